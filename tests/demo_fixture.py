"""The demo pipeline trained once per test session, through the console as a user runs it.

Why one: `console run --host local --demo` (prepare, extract, vocab, train, evaluate as
detached jobs, speculators 0.3 in the main .venv) costs ~100 s on the shared cores, and two
places need a trained demo: tests/test_pipeline_demo.py asserts on this very run (its session
file `first.jsonl`), and the engine box (tests/engine_fixture.py) serves its target and head.
Training it twice (the engine box used to run `python -m pipeline all` again on its own copy,
~70 s) bought nothing: same code, same config, same outputs.

The engine box reaches this demo through a symlink, not a copy: stage manifests key the
target and dataset by their resolved paths, so only the same files seen through a link keep
every stage complete. test_pipeline_demo.py reruns stages of it (evaluate, a killed extract,
vocab); each of those tests leaves it complete again, as its own assertions check.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from console.cli import main as console_main


@dataclass
class Demo:
    root: Path
    box: Path
    console_toml: Path
    config: Path
    out: Path

    @property
    def demo_dir(self) -> Path:
        return self.config.parent


def run_local(demo: Demo, session: Path, *extra: str) -> int:
    """`console run --host local ARGS`, recorded to `session`."""
    return console_main(["run", "--host", "local", "--config", str(demo.console_toml),
                         "--session", str(session), *extra])


@pytest.fixture(scope="session")
def console_demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """The demo after `console run --host local --demo`, its session in `root/first.jsonl`."""
    root = tmp_path_factory.mktemp("demo")
    box = root / "box"
    console_toml = root / "console.toml"
    console_toml.write_text(f'[hosts.local]\nworkdir = "{box}"\n')
    d = Demo(root, box, console_toml, box / "demo" / "pipeline.toml", box / "demo" / "out")
    rc = run_local(d, root / "first.jsonl", "--demo")
    assert rc == 0, "the demo run failed (see the captured output)"
    return d

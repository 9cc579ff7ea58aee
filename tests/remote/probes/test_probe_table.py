"""Issue 40, one fact once: a probe is its script plus one row of remote/probe_table.py.

A dummy probe (a stdlib script written here) goes in as one row, and nothing else changes:
`console probe dummy` runs it on one host and on two (hosts of this machine, run as the box runs
a probe: uploaded, with the options its row gives), prints its summary line and its fleet table,
keeps its usage rule, and the TUI's Probes screen shows it from the recorded session. A name
without a row is refused with the names there are.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from console.cli import main
from remote import probe_table
from remote.errors import EXIT_USAGE, UsageError
from remote.probe_table import Probe, ProbeRequest

SCRIPT = """import argparse, json, os
ap = argparse.ArgumentParser()
ap.add_argument("--family", required=True)
ap.add_argument("--deadline", type=int, default=0)
args = ap.parse_args()
print(json.dumps({"kind": "result", "result": {"family": args.family, "cwd": os.getcwd()}}))
"""


@pytest.fixture
def dummy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Probe:
    script = tmp_path / "scripts" / "dummy_probe.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    row = Probe("dummy", "says which family it was asked about",
                lambda r: f"asked about {r.get('family')}", script=str(script),
                options=lambda req: [f"--family={req.family}"],
                needs=lambda req: None if req.family else "probe dummy needs --family NAME",
                fleet_header=("FAMILY",), fleet_row=lambda r: [str(r.get("family"))])
    monkeypatch.setattr(probe_table, "TABLE", (*probe_table.TABLE, row))
    return row


def _config(tmp_path: Path) -> Path:
    """Two hosts on this machine (no ssh: each runs its commands here), workdirs of their own."""
    path = tmp_path / "console.toml"
    path.write_text("".join(f'[hosts.{n}]\nworkdir = "{tmp_path / n}"\npython = "{sys.executable}"\n'
                            for n in ("a", "b")))
    return path


async def _probes_screen(session: Path) -> str:
    from textual.widgets import Static

    from tests.tui_helpers import plain, replayed

    async with replayed(session, start_screen="probes") as (app, _):
        return plain(app.query_one("#env", Static))


def test_a_dummy_probe_runs_and_prints_on_one_host_and_on_two(
        dummy: Probe, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    common = ["probe", "dummy", "--config", str(config), "--family=-kimi"]
    argv = [*common, "--no-record"]
    session = tmp_path / "probe.jsonl"
    assert main([*common, "--session", str(session), "--host", "a"]) == 0
    out = capsys.readouterr().out
    # `-kimi` reached the script as a value, not as an option (the row's --opt=value words).
    assert "[a] probe.result: asked about -kimi" in out
    # The TUI's Probes screen over the recorded session: its summary line, from its row.
    assert "dummy: asked about -kimi" in asyncio.run(_probes_screen(session))

    assert main([*argv, "--host", "a,b", "--json"]) == 0
    results = [json.loads(ln) for ln in capsys.readouterr().out.splitlines() if ln.startswith("{")]
    assert {(e["host"], e["payload"]["probe"], e["payload"]["result"]["family"])
            for e in results if e["kind"] == "probe.result"} == {("a", "dummy", "-kimi"),
                                                                 ("b", "dummy", "-kimi")}
    assert main([*argv, "--host", "a,b"]) == 0
    table = [ln.split() for ln in capsys.readouterr().out.splitlines()
             if ln.split()[:1] in (["HOST"], ["a"], ["b"])]
    assert table == [["HOST", "FAMILY"], ["a", "-kimi"], ["b", "-kimi"]]

    # its row's usage rule, before anything runs
    assert main(["probe", "dummy", "--config", str(config), "--no-record", "--host", "a"]) == EXIT_USAGE
    assert "probe dummy needs --family NAME" in capsys.readouterr().err


def test_a_row_that_takes_a_head_gets_its_dir_and_target_from_its_field_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`takes_head` on a row gives its verb the head's DIR, --target, --demo and --pipeline and
    their usage rule: no command compares the head probe's name."""
    script = tmp_path / "scripts" / "fits_probe.py"
    script.parent.mkdir()
    script.write_text("import json, sys\n"
                      'print(json.dumps({"kind": "result", "result": {"argv": sys.argv[1:]}}))\n')
    row = Probe("fits", "a head against its target", lambda r: f"argv {r.get('argv')}",
                script=str(script), takes_head=True,
                options=lambda req: [f"--head={req.head}", f"--target={req.model}"])
    monkeypatch.setattr(probe_table, "TABLE", (*probe_table.TABLE, row))
    common = ["probe", "fits", "--config", str(_config(tmp_path)), "--no-record", "--host", "a"]
    assert main([*common, "/h"]) == EXIT_USAGE
    assert "probe fits needs one target: --target DIR" in capsys.readouterr().err
    assert main([*common, "--target", "/t"]) == EXIT_USAGE
    assert "probe fits needs the head directory: console probe fits --host H DIR" in \
        capsys.readouterr().err
    assert main([*common, "/h", "--target", "/t"]) == 0
    assert "probe.result: argv ['--head=/h', '--target=/t', " in capsys.readouterr().out
    # a row without the field: its verb has no DIR
    assert main(["probe", "env", "--host", "a", "/h"]) == EXIT_USAGE
    assert "unrecognized arguments: /h" in capsys.readouterr().err


def test_an_unknown_probe_is_refused_naming_the_probes(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from remote.link.hosts import HostConfig
    from remote.link.transport import LocalTransport
    from remote.ops import probes as ops
    from remote.probe_runner import run_probe
    from remote.spine.bus import EventBus

    host = HostConfig(name="local", python=sys.executable, workdir=str(tmp_path / "box"))

    async def both() -> list[str]:
        transport = LocalTransport("local")
        await transport.connect()
        said = []
        try:
            for call in (ops.run(transport, host, EventBus(), "nope", ProbeRequest()),
                         run_probe(transport, "nope", workdir=host.workdir)):
                with pytest.raises(UsageError) as refused:
                    await call
                said.append(str(refused.value))
        finally:
            await transport.close()
        return said

    assert asyncio.run(both()) == ["unknown probe 'nope' (probes: env, model, compat, head, source)"] * 2
    assert main(["probe", "nope", "--host", "local"]) == EXIT_USAGE
    assert "invalid choice: 'nope' (choose from 'env', 'model', 'compat', 'head', 'source')" in capsys.readouterr().err

"""The layers of docs/architecture.md, enforced on the source rather than by convention.

The import contracts (console -> remote -> pipeline, only console.tui imports Textual, remote's own
layers from ops down to errors with the probes importing no other part of remote, the box-side job
helper importing no other part of the console) are import-linter's, declared in
pyproject.toml ([tool.importlinter]) and run by `make test`; here they are run once more, and
shown to break on a violation of each. What import-linter cannot say is checked by hand below:
the code uploaded to the box imports nothing but the standard library (and, for a probe, the
modules beside it that remote/link/upload.py uploads with it).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on the packages under `root` (it puts its working directory first on the
    path), with the project's contracts."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold() -> None:
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in done.stdout


def test_each_contract_breaks_on_a_violation(tmp_path: Path) -> None:
    """Not vacuous: one forbidden import per contract, in a copy of the packages, and every
    contract reports it."""
    for package in ("console", "remote", "pipeline"):
        shutil.copytree(REPO / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__", "__snapshots__"))
    violations = {
        "pipeline/config.py": "import remote.errors\n",  # layers: pipeline -> remote
        "remote/link/argv.py": "import textual\n",  # textual: outside console.tui
        "remote/probes/gpu_query.py": "from ..spine import events\n",  # probes -> remote.spine
        "remote/link/hosts.py": "from remote.jobs import names\n",  # remote-layers: link -> jobs
        "remote/jobs/helper.py": "from remote.jobs import cursors\n",  # the helper -> a sibling
    }
    for rel, line in violations.items():
        with open(tmp_path / rel, "a") as fh:
            fh.write(line)
    done = _lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"Contracts: 0 kept, {len(CONTRACTS)} broken." in done.stdout, done.stdout[-3000:]
    for needle in ("pipeline.config -> remote.errors", "remote.link.argv -> textual",
                   "remote.probes.gpu_query -> remote.spine.events", "remote.link.hosts -> remote.jobs.names",
                   "remote.jobs.helper -> remote.jobs.cursors"):
        assert needle in done.stdout, needle


def _imports(path: Path) -> tuple[set[str], list[tuple[int, str | None]]]:
    """(top-level names of absolute imports, (level, module) of relative ones)."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    relative: list[tuple[int, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            relative.append((node.level, node.module))
    return names, relative


def _box_side() -> list[Path]:
    """What runs on the box with only the container's python: the probes and the job helper."""
    return [*sorted((REPO / "remote/probes").glob("*.py")), REPO / "remote/jobs/helper.py",
            REPO / "remote/jobs/helper_runs.py"]


def test_box_side_code_is_stdlib_only() -> None:
    # A probe may import another stdlib-only module of remote/probes (gpu_query, the model
    # probe's phases): the upload puts it beside the probe on the box (probe_modules).
    siblings = {p.stem for p in (REPO / "remote/probes").glob("*.py")}
    helper_siblings = {"helper", "helper_runs"}  # the job helper, uploaded with its sibling
    allowed = set(sys.stdlib_module_names) | {"__future__", "pynvml"}
    offenders = {}
    for path in _box_side():
        names, relative = _imports(path)
        near = siblings if path.parent.name == "probes" else helper_siblings
        extra = names - allowed - near
        # relative imports only of a sibling module: `from . import x`, `from .x import y`
        far = [(level, mod) for level, mod in relative
               if level != 1 or (mod is not None and mod not in near)]
        if extra or far:
            offenders[path.name] = sorted(extra) + [f"{'.' * lv}{m or ''}" for lv, m in far]
    assert offenders == {}
    assert len(_box_side()) > 2

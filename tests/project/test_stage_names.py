"""No stage's name written outside the stage table (pipeline/stages/): every other module reads
the table (`stage_table.TRAIN`, `names()`), so a renamed or added stage is one edit there. The
packages, and the benchmarks and scripts that drive the pipeline (its commands, its output
folders, its events' `stage` field): a benchmark that wrote "train" would break on a rename
without a test noticing, since benchmarks are not run by the suite.

Not counted: pipeline/config.py and config_types.py, whose TOML sections ([extract], [train], ...) share the names
and are the config's own vocabulary; and a line that says `# not a stage` and why (another
vocabulary that happens to use the word, such as speculators' metrics key, a synthetic job's
name, or a script's option)."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline import stages as stage_table

ROOT = Path(__file__).resolve().parents[2]
DIRS = ("console", "remote", "pipeline", "benchmarks", "scripts")
NOT_COUNTED = {Path("pipeline/config.py"), Path("pipeline/config_types.py")}
QUOTED = re.compile(r"""(["'])(""" + "|".join(map(re.escape, stage_table.names())) + r")\1")


def literal_stage_names() -> list[str]:
    found = []
    for folder in DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("pipeline", "stages") or rel in NOT_COUNTED:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if QUOTED.search(line) and "# not a stage" not in line:
                    found.append(f"{rel}:{n}: {line.strip()}")
    return found


def test_no_stage_name_is_written_outside_the_stage_table() -> None:
    found = literal_stage_names()
    assert not found, ("a stage's name written outside pipeline/stages/ (read it from the table: "
                       "`stage_table.TRAIN`, `stage_table.names()`):\n" + "\n".join(found))


def test_the_check_sees_a_written_name() -> None:
    """The pattern finds a quoted name in either quote, and not a longer word."""
    assert QUOTED.search('stage_dir(cfg, "train")') and QUOTED.search("join(out, 'evaluate')")
    assert not QUOTED.search('"trainer"') and not QUOTED.search("stage_table.TRAIN")

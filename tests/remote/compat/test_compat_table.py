"""The advisor's rules are data (remote/compat/rules.toml): a row that names a check, an on-box
reader, a severity or a stage that does not exist is refused when the table loads, not when the
rule would fire on some box months later."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote.compat import advisor

ROW = """
[[rule]]
id = "x"
title = "t"
severity = "error"
stage = "serving"
versions = {vllm = ""}
check = "no_eagle3_in_vllm"
fix = {kind = "upgrade", text = "t"}

[[error]]
pattern = "boom"
rule = "x"
fix = "f"
"""


def _table(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rules.toml"
    path.write_text(text)
    return path


def test_a_good_row_loads_with_its_check() -> None:
    rules, errors = advisor.load_table()
    assert rules == advisor.RULES and errors == advisor.ERROR_FIXES
    assert {r.check.__name__ for r in rules} >= {"worker_cannot_hook", "no_eagle3_in_vllm"}
    assert all(r.on_box is None or r.on_box in advisor.ON_BOX for r in rules)


@pytest.mark.parametrize(("old", "new", "says"), [
    ('check = "no_eagle3_in_vllm"', 'check = "no_such_check"', "no check 'no_such_check'"),
    ('check = "no_eagle3_in_vllm"', 'check = "no_eagle3_in_vllm"\non_box = "nowhere"', "no on-box reader"),
    ('severity = "error"', 'severity = "fatal"', "severity 'fatal'"),
    ('stage = "serving"', 'stage = "deploy"', "stage 'deploy'"),
])
def test_a_row_naming_what_does_not_exist_is_refused_at_load(tmp_path: Path, old: str, new: str,
                                                            says: str) -> None:
    advisor.load_table(_table(tmp_path, ROW))  # the row as written is fine
    with pytest.raises(ValueError, match=says) as err:
        advisor.load_table(_table(tmp_path, ROW.replace(old, new)))
    assert "rule 'x'" in str(err.value) and "\n" not in str(err.value)

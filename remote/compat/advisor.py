"""The compatibility advisor: what will break, for this box's versions and this model, and the fix.

The knowledge lives in rules.toml, a table of data (the package versions a rule applies to, the
check that triggers it, the evidence with file and line, and the fix the console offers),
evaluated on the env probe's and the model probe's results. Adding what we learn about a new
release is a new row, not a new branch of code.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from remote.compat.checks import CHECKS, ON_BOX, Check, Facts
from remote.compat.versions import version_in
from remote.spine.traceback_fold import readable_message

SEVERITIES = ("error", "warning", "info")
STAGES = ("hidden-states", "serving", "training")
TABLE = Path(__file__).with_name("rules.toml")


@dataclass(frozen=True, slots=True)
class Evidence:
    package: str
    version: str
    file: str
    line: int | None = None
    quote: str | None = None  # the text at that line, so a reader can check it


@dataclass(frozen=True, slots=True)
class Fix:
    kind: str  # "patch" | "upgrade" | "config"
    text: str
    recipe: str | None = None  # the patcher's recipe name for kind == "patch"


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    title: str
    severity: str
    versions: Mapping[str, str]  # package -> version spec; every one must match
    check: Check
    evidence: tuple[Evidence, ...]
    fix: Fix
    stage: str  # what it breaks: "hidden-states" | "serving" | "training"
    unless: tuple[str, ...] = ()  # rule ids that, when they fire, make this one redundant
    # Substrings of the architecture / model_type / text model_type it is about; empty: any model.
    families: tuple[str, ...] = ()
    # Breaks only speculators 0.3's own vllm_hidden_states_generator, which the pipeline never
    # runs (its extract captures through transformers or its own worker extension): it stays
    # a finding for a user of that generator, but must not stop `console run`.
    generator_only: bool = False
    on_box: str | None = None  # what the box showed for it (checks.ON_BOX), beside the evidence

    def about(self, facts: Facts) -> bool:
        if not self.families:
            return True
        m = facts.model
        names = " ".join(str(m.get(k) or "") for k in ("architecture", "model_type", "text_model_type")).lower()
        return any(f in names for f in self.families)


@dataclass(frozen=True, slots=True)
class ErrorFix:
    """A stage error (regex on its message) the advisor knows, and what fixes it."""

    pattern: str
    rule: str  # the rules.toml id that predicts it, or a stage-level name
    fix: str


def _rule(row: dict[str, Any]) -> Rule:
    """One [[rule]] row; a row naming a check or an on-box reader that does not exist, or a
    severity or stage outside the known ones, fails at import, not when the rule would fire."""
    where = f"{TABLE.name}: rule {row.get('id')!r}"
    if row["check"] not in CHECKS:
        raise ValueError(f"{where}: no check {row['check']!r} in remote/compat/checks.py")
    if row.get("on_box") is not None and row["on_box"] not in ON_BOX:
        raise ValueError(f"{where}: no on-box reader {row['on_box']!r} in remote/compat/checks.py")
    if row["severity"] not in SEVERITIES or row["stage"] not in STAGES:
        raise ValueError(f"{where}: severity {row['severity']!r} / stage {row['stage']!r} unknown")
    return Rule(
        id=row["id"], title=row["title"], severity=row["severity"], versions=dict(row["versions"]),
        check=CHECKS[row["check"]], evidence=tuple(Evidence(**e) for e in row.get("evidence", ())),
        fix=Fix(**row["fix"]), stage=row["stage"], unless=tuple(row.get("unless", ())),
        families=tuple(row.get("families", ())), generator_only=row.get("generator_only", False),
        on_box=row.get("on_box"))


def load_table(path: Path = TABLE) -> tuple[tuple[Rule, ...], tuple[ErrorFix, ...]]:
    with open(path, "rb") as fh:
        table = tomllib.load(fh)
    return (tuple(_rule(row) for row in table["rule"]),
            tuple(ErrorFix(**row) for row in table["error"]))


RULES, ERROR_FIXES = load_table()


@dataclass(slots=True)
class Finding:
    rule: str
    title: str
    severity: str
    stage: str
    detail: str
    evidence: list[dict[str, Any]]
    fix: dict[str, Any]
    versions: dict[str, str | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def advise(env: Mapping[str, Any] | None, model: Mapping[str, Any] | None,
           rules: tuple[Rule, ...] = RULES) -> list[Finding]:
    facts = Facts.from_probes(env, model)
    fired: dict[str, Finding] = {}
    for rule in rules:
        if any(u in fired for u in rule.unless) or not rule.about(facts):
            continue
        if not all(version_in(facts.version(pkg), spec) for pkg, spec in rule.versions.items()):
            continue
        reason = rule.check(facts)
        if reason is None:
            continue
        evidence = [asdict(e) for e in rule.evidence]
        shown = ON_BOX[rule.on_box](facts) if rule.on_box else None
        if shown is not None:
            evidence.append(shown)
        fired[rule.id] = Finding(
            rule=rule.id, title=rule.title, severity=rule.severity, stage=rule.stage, detail=reason,
            evidence=evidence, fix=asdict(rule.fix),
            versions={pkg: facts.version(pkg) for pkg in rule.versions},
        )
    return list(fired.values())


GENERATOR_ONLY = frozenset(r.id for r in RULES if r.generator_only)


def pipeline_blockers(findings: list[Finding]) -> list[Finding]:
    """The error findings that stop the pipeline before its first stage: not those that only
    speculators' own generator would hit (Rule.generator_only)."""
    return [f for f in findings if f.severity == "error" and f.rule not in GENERATOR_ONLY]


def summarize(findings: list[Finding]) -> str:
    if not findings:
        return "no known incompatibilities"
    counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}
    parts = [f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
    return ", ".join(parts) + ": " + "; ".join(f.rule for f in findings)


# -- failed stages: the fix for an error message the advisor recognizes ---------------------------
def fix_for_error(message: str) -> ErrorFix | None:
    return next((known for known in ERROR_FIXES if re.search(known.pattern, message)), None)


def shorten(message: str, limit: int = 400) -> str:
    """One readable line: the same shortening as a folded traceback's message (whole sentences
    kept, library boilerplate dropped; remote/spine/traceback_fold.py says why)."""
    return readable_message(message, limit)

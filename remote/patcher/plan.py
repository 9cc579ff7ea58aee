"""Deciding, without touching anything, what a file should become and why.

Pure functions over text: the box is read once (remote.probes.patch_helper `inspect`) and
everything here can be tested on the real wheel's files. A patched file is always
`compose(original, S)` for some set S of recipes, applied in RECIPES order; that is what makes
"which recipes are in effect" and "roll back one recipe" exact rather than heuristic.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from remote.errors import AnchorError
from remote.patcher.recipes import RECIPES, Recipe
from remote.spine.op_types import RecipeDecision  # as patch.planned reports it


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def anchors_match(text: str, recipe: Recipe) -> str | None:
    """None when every anchor occurs exactly once, else what is wrong."""
    for i, edit in enumerate(recipe.edits):
        n = text.count(edit.anchor)
        if n != 1:
            first = edit.anchor.strip().splitlines()[0] if edit.anchor.strip() else "?"
            how = "not found" if n == 0 else f"found {n} times"
            return f"anchor {i + 1} of {recipe.name} ({first!r}) {how}"
    return None


def compose(original: str, recipes: Iterable[Recipe]) -> str:
    """`original` with `recipes` applied, always in RECIPES order (so the result of a set of
    recipes does not depend on the order they were asked for)."""
    chosen = {r.name for r in recipes}
    text = original
    for recipe in RECIPES:
        if recipe.name not in chosen:
            continue
        problem = anchors_match(text, recipe)
        if problem:
            raise AnchorError(problem)
        for edit in recipe.edits:
            text = text.replace(edit.anchor, edit.replacement, 1)
    return text


def in_effect_set(original: str, current: str, recipes: Sequence[Recipe]) -> frozenset[str] | None:
    """The set S with compose(original, S) == current, or None if the file is in no state the
    patcher could have produced (edited by hand, or patched by something else)."""
    for k in range(len(recipes) + 1):
        for subset in combinations(recipes, k):
            try:
                if compose(original, subset) == current:
                    return frozenset(r.name for r in subset)
            except AnchorError:
                continue
    return None


def markers_present(text: str, recipe: Recipe) -> bool:
    """Looser than in_effect_set: every replacement is in the text (used when the original is
    unknown, e.g. a file patched by hand the same way)."""
    return all(edit.replacement in text for edit in recipe.edits)


# Facts about the box a recipe may depend on: (inspect result) -> (holds, reason).
def _scheduler_requires(box: dict[str, Any]) -> tuple[bool, str]:
    vllm = box.get("vllm") or {}
    if not vllm.get("found"):
        return False, "vLLM is not installed next to the package, so nothing builds SchedulerConfig"
    info = vllm.get("scheduler_is_encoder_decoder") or {}
    state = info.get("state", "unknown")
    version = vllm.get("version") or "?"
    if state == "required":
        return True, (f"vLLM {version}'s SchedulerConfig requires is_encoder_decoder "
                      f"({info.get('source')}:{info.get('line')})")
    if state == "optional":
        return False, f"vLLM {version}'s SchedulerConfig has a default for is_encoder_decoder"
    if state == "absent":
        return False, (f"vLLM {version}'s SchedulerConfig has no is_encoder_decoder: "
                       "passing it would fail")
    return False, f"SchedulerConfig not found in vLLM {version}'s sources: cannot tell"


CONDITIONS: dict[str, Callable[[dict[str, Any]], tuple[bool, str]]] = {
    "scheduler_requires_is_encoder_decoder": _scheduler_requires,
}


@dataclass(slots=True)
class FilePlan:
    """What one file is, and what `apply` would make of it."""

    rel: str  # path inside the package
    path: str  # absolute path on the box
    version: str | None
    current: str
    current_sha256: str
    original: str  # from the backup if there is one, else the current file
    original_sha256: str
    original_known: bool
    has_backup: bool
    in_effect: frozenset[str] | None
    decisions: list[RecipeDecision]
    target: str  # what apply would write
    refused: str | None = None  # why apply would refuse (even before --force is considered)
    forceable: bool = False  # --force would lift the refusal (anchors still match)
    notes: list[str] = field(default_factory=list)

    @property
    def target_set(self) -> frozenset[str]:
        return frozenset(d.name for d in self.decisions if d.applies or d.in_effect)

    @property
    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            self.current.splitlines(keepends=True), self.target.splitlines(keepends=True),
            fromfile=f"a/{self.rel}", tofile=f"b/{self.rel}"))

    @property
    def changes(self) -> bool:
        return self.current != self.target


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AnchorError(f"{path} is not UTF-8 text ({exc})") from None


def plan_file(
    rel: str,
    entry: dict[str, Any],
    box: dict[str, Any],
    recipes: Sequence[Recipe],
    selected: set[str] | None,
    *,
    force: bool = False,
) -> FilePlan:
    """`entry` is the helper's inspect record of one file (contents already decoded to bytes
    under the keys `current` and `backup`)."""
    version = box.get("version")
    current = _decode(entry["current"], entry["path"])
    backup = entry.get("backup")
    original = _decode(backup, entry["path"]) if backup is not None else current
    original_sha = sha256_text(original)
    known = {sha for r in recipes for sha in r.known_originals.values()}
    original_known = original_sha in known
    in_effect = in_effect_set(original, current, recipes)
    decisions: list[RecipeDecision] = []
    refused: str | None = None
    forceable = False
    notes: list[str] = []
    anchor_problems: list[str] = []

    for recipe in recipes:
        active = in_effect is not None and recipe.name in in_effect
        if in_effect is None:
            active = markers_present(current, recipe)
        wanted = selected is None or recipe.name in selected
        applies, reason = True, recipe.summary
        if not wanted:
            applies, reason = False, "not selected (--recipe)"
        elif active:
            applies, reason = False, "already in effect"
        else:
            anchor_problem = anchors_match(original, recipe)
            if anchor_problem:
                applies, reason = False, anchor_problem
                anchor_problems.append(anchor_problem)
            elif recipe.condition is not None:
                holds, why = CONDITIONS[recipe.condition](box)
                applies, reason = holds, why
            if applies and original_sha not in recipe.known_originals.values():
                reason = (f"{recipe.summary} (anchors match, but the file is not a known "
                          "original)")
            if applies and version is not None and version not in recipe.known_originals:
                notes.append(f"{recipe.name} was written for {recipe.package} "
                             f"{', '.join(recipe.versions)}, the box has {version}")
        decisions.append(RecipeDecision(name=recipe.name, applies=applies, reason=reason,
                                        in_effect=active))

    if in_effect is None:
        refused = (
            f"{rel} (sha256 {sha256_text(current)[:12]}) is neither its original nor the "
            "original with some of the console's recipes applied: it was changed by something "
            "else" + ("; `rollback` restores the backed-up original" if backup is not None else "")
        )
        target = current
    else:
        goal = set(in_effect) | {d.name for d in decisions if d.applies}
        target = compose(original, [r for r in recipes if r.name in goal])
        if not original_known and (target != current or anchor_problems):
            versions = ", ".join(sorted({v for r in recipes for v in r.versions}))
            why = (
                f"{rel} sha256 {original_sha} is not a known original of "
                f"{recipes[0].package} {versions}"
                f" (installed: {version or 'unknown'}), so the recipes were not written "
                "against this text"
            )
            if anchor_problems:
                refused = why + f"; {'; '.join(anchor_problems)}: refused even with --force"
            else:
                refused = why + ("; the anchors still match, so --force would apply the diff "
                                 "that `plan` shows")
                forceable = True
            if force and forceable:
                notes.append("applying to an unknown original because of --force")
                refused = None
    return FilePlan(
        rel=rel, path=entry["path"], version=version, current=current,
        current_sha256=sha256_text(current), original=original, original_sha256=original_sha,
        original_known=original_known, has_backup=backup is not None, in_effect=in_effect,
        decisions=decisions, target=target, refused=refused, forceable=forceable, notes=notes,
    )


def rollback_target(plan: FilePlan, selected: set[str] | None) -> tuple[str, frozenset[str]]:
    """The content and recipe set after rolling back `selected` (None: all of them)."""
    if plan.in_effect is None:
        return plan.original, frozenset()
    remaining = frozenset() if selected is None else plan.in_effect - selected
    order = [r for r in RECIPES if r.name in remaining and r.file == plan.rel]
    return compose(plan.original, order), remaining


def recipes_for(package: str, names: Iterable[str] | None = None) -> dict[str, list[Recipe]]:
    """Recipes of `package` grouped by file, in RECIPES order; unknown names raise KeyError."""
    wanted = set(names) if names is not None else None
    if wanted is not None:
        unknown = wanted - {r.name for r in RECIPES}
        if unknown:
            raise KeyError(", ".join(sorted(unknown)))
    grouped: dict[str, list[Recipe]] = {}
    for r in RECIPES:
        if r.package == package:
            grouped.setdefault(r.file, []).append(r)
    if wanted is not None:
        grouped = {f: rs for f, rs in grouped.items() if any(r.name in wanted for r in rs)}
    return grouped

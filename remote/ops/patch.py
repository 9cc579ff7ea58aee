"""Patch plan / apply / verify / rollback, as `console patch` and the TUI's Patch screen run them.

Apply takes what the operator was shown (the plans printed by the CLI, or the patch.planned
events the TUI displayed) and refuses, writing nothing, when a fresh plan differs from it: the
file changed on the box, or the recipes would now write something else. Both front ends get the
same check because both call `apply` here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from remote.errors import Refused
from remote.patcher.plan import FilePlan
from remote.patcher.runner import Patcher
from remote.spine import event_types as et

# (file on the box, its sha256 when planned, the diff shown)
ShownPlan = tuple[str, str | None, str]


patcher = Patcher  # what the front ends build, here: they reach the patcher through this layer


def shown_plan(plan: FilePlan | et.PatchPlanned) -> ShownPlan:
    """What identifies a plan an operator saw, from the plan itself or its patch.planned event."""
    if isinstance(plan, et.PatchPlanned):
        return (plan.file, plan.sha256, plan.diff)
    return (plan.path, plan.current_sha256, plan.diff)


async def plan(p: Patcher, *, force: bool = False) -> list[FilePlan]:
    """Every file's plan, each published as a patch.planned event."""
    return await p.plan(force=force)


async def apply(p: Patcher, *, shown: Iterable[FilePlan | et.PatchPlanned] | None = None,
                force: bool = False) -> list[FilePlan]:
    """Write the plan. With `shown`, only if a fresh plan is exactly what was shown (Refused,
    exit 4, nothing written, otherwise); without it (`--yes`), whatever the plan is now."""
    if shown is None:
        return await p.apply(force=force)
    seen = {shown_plan(s) for s in shown}
    fresh = await p.plan(force=force, emit=False)
    moved = [f.rel for f in fresh if f.changes and shown_plan(f) not in seen]
    if moved:
        raise Refused(f"{', '.join(moved)} changed on {p.host.name} since the plan was shown: "
                      "nothing applied, plan again")
    return await p.apply(force=force, emit_plan=False, confirmed=fresh)


async def verify(p: Patcher) -> list[FilePlan]:
    return await p.verify()


async def rollback(p: Patcher, *, force: bool = False) -> list[FilePlan]:
    """A file edited since apply is refused unless `force` (which keeps the edit beside it)."""
    return await p.rollback(force=force)


def refused(plans: Sequence[FilePlan]) -> str | None:
    reasons = [pl.refused or "" for pl in plans if pl.refused]
    return "; ".join(reasons) if reasons else None

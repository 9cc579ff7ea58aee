"""The patcher over a Transport: inspect the box, plan, apply, verify, roll back, as events.

The laptop side decides (remote.patcher.plan); the box side (remote/probes/patch_helper.py,
uploaded content-hashed) does every read and write where the file lives, so the same code runs
over `local`, SSH and a container exec.
"""

from __future__ import annotations

import base64
import json
import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from remote.errors import AnchorError, PatchError, Refused, RemoteCommandError, UsageError
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.link.upload import box_path, upload_probe
from remote.patcher import drift
from remote.patcher.plan import FilePlan, plan_file, recipes_for, rollback_target, sha256_text
from remote.patcher.recipes import SPECULATORS, Recipe
from remote.spine import events as ev
from remote.spine.bus import EventBus

HELPER = Path(__file__).resolve().parents[1] / "probes" / "patch_helper.py"


def write_entry(p: FilePlan, text: str) -> dict[str, Any]:
    """The helper's entry that writes `text` over `p`'s file, refused on the box unless the file
    still holds what was planned."""
    return {"file": p.path, "expect_sha256": p.current_sha256,
            "original_sha256": p.original_sha256,
            "content_b64": base64.b64encode(text.encode("utf-8")).decode("ascii")}


def rollback_request(
    plans: Sequence[FilePlan], selected: set[str] | None,
) -> tuple[list[dict[str, Any]], dict[str, tuple[str, frozenset[str]]]]:
    """The helper's `rollback_all` entries for `plans`, and each file's (text, recipes left).
    A file keeping some recipes (only some were selected) is written like an apply; the others
    restore their backup, keeping a hand edit beside it (the caller refused it unless forced)."""
    entries: list[dict[str, Any]] = []
    targets: dict[str, tuple[str, frozenset[str]]] = {}
    for p in plans:
        content, remaining = rollback_target(p, selected)
        targets[p.path] = (content, remaining)
        if remaining:
            entries.append(write_entry(p, content))
        else:
            entries.append({"file": p.path, "action": "restore",
                            "expect_sha256": p.current_sha256,
                            "keep_edited": p.in_effect is None})
    return entries, targets


class Patcher:
    def __init__(
        self,
        transport: Transport,
        host: HostConfig,
        bus: EventBus,
        *,
        package: str = SPECULATORS,
        site_packages: str | None = None,
        recipes: Sequence[str] | None = None,
    ) -> None:
        self.transport = transport
        self.host = host
        self.bus = bus
        self.package = package
        self.site_packages = site_packages
        try:
            self.groups = recipes_for(package, recipes)
        except KeyError as exc:
            known = ", ".join(r.name for rs in recipes_for(package).values() for r in rs)
            raise UsageError(f"unknown recipe {exc.args[0]} (known: {known})") from None
        if not self.groups:
            raise UsageError(f"no recipes for package {package!r}")
        self.selected = set(recipes) if recipes is not None else None
        self._helper: str | None = None
        self.drift: str | None = None  # set by verify: the container was recreated since

    # -- box side ------------------------------------------------------------------------
    async def _helper_path(self) -> str:
        if self._helper is None:
            workdir = await box_path(self.transport, self.host.workdir, self.host.python)
            remote = posixpath.join(workdir, "probes", HELPER.name)
            await upload_probe(self.transport, HELPER, remote, python=self.host.python,
                               bus=self.bus, host=self.host.name)
            self._helper = remote
        return self._helper

    async def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        helper = await self._helper_path()
        try:
            done = await self.transport.run([self.host.python, helper],
                                            input=json.dumps(request), timeout=300)
        except (BrokenPipeError, ConnectionResetError) as exc:  # it exited before reading
            raise PatchError(f"the patch helper on {self.host.name} ({self.host.python}) exited "
                             f"before reading its request: {exc}") from None
        if done.returncode != 0:
            raise RemoteCommandError(done.argv, done.returncode, done.stderr)
        lines = done.stdout.strip().splitlines()
        try:
            answer = json.loads(lines[-1]) if lines else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or "ok" not in answer:
            raise PatchError(
                f"the patch helper on {self.host.name} printed no JSON answer: "
                f"{done.stdout[-200:]!r} {done.stderr.strip()[-200:]}"
            )
        if not answer["ok"]:
            raise PatchError(f"{request['op']} on {self.host.name}: {answer.get('error')}")
        return answer

    async def inspect(self) -> dict[str, Any]:
        req: dict[str, Any] = {"op": "inspect", "package": self.package,
                               "files": sorted(self.groups)}
        if self.site_packages:
            req["site_packages"] = self.site_packages
        box = await self._call(req)
        if not box.get("package_dir"):
            where = self.site_packages or f"the import path of {self.host.python}"
            raise Refused(f"{self.package} is not installed in {where} on {self.host.name}")
        for rel, entry in box.get("files", {}).items():
            if not entry.get("exists"):
                versions = sorted({v for r in self.groups[rel] for v in r.versions})
                raise Refused(
                    f"{entry.get('path', rel)} does not exist on {self.host.name} "
                    f"({self.package} {box.get('version') or 'of unknown version'} is installed;"
                    f" the recipes are for {', '.join(versions)})")
            entry["current"] = base64.b64decode(entry["content_b64"])
            good = [b for b in entry.get("backups", []) if "content_b64" in b]
            if len(entry.get("backups", [])) > 1:
                raise Refused(f"several backups of {entry['path']} exist on {self.host.name}: "
                              + ", ".join(b["path"] for b in entry["backups"]))
            if entry.get("backups") and not good:
                b = entry["backups"][0]
                raise Refused(f"backup {b['path']} is corrupt (content sha256 {b['sha256']}, "
                              f"named {b['sha256_named']})")
            entry["backup"] = base64.b64decode(good[0]["content_b64"]) if good else None
        return box

    # -- operations ----------------------------------------------------------------------
    async def _inspect_recovered(self, recover: bool, emit: bool) -> dict[str, Any]:
        """inspect, after completing an apply a kill interrupted (its journal on the box) when
        `recover`; `plan` alone only says one is pending, since it never writes."""
        box = await self.inspect()
        if not box.get("journal_pending"):
            return box
        journal = str(box.get("journal"))
        kind = box.get("journal_kind") or "apply"
        if not recover:
            if emit:
                self.bus.emit(ev.CONSOLE_WARNING, self.host.name, message=(
                    f"an interrupted {kind} is pending on {self.host.name} ({journal}): "
                    "`patch verify`, `apply` or `rollback` completes it first"))
            return box
        answer = await self._call({"op": "recover", "journal": journal})
        done = answer.get("recovered") or []
        kind = answer.get("kind") or kind
        self.bus.emit(ev.CONSOLE_WARNING, self.host.name, message=(
            f"completed an interrupted {kind} on {self.host.name} from {journal}"
            + (f" ({len(done)} file(s) written: {', '.join(done)})" if done else
               " (every file was already written)")))
        return await self.inspect()

    async def plan(self, *, force: bool = False, emit: bool = True,
                   recover: bool = False) -> list[FilePlan]:
        box = await self._inspect_recovered(recover, emit)
        plans = []
        for rel, recipes in self.groups.items():
            try:
                p = plan_file(rel, box["files"][rel], box, recipes, self.selected, force=force)
            except AnchorError as exc:
                raise Refused(f"{rel}: {exc}") from None
            plans.append(p)
            if emit:
                self._emit_planned(p)
        return plans

    def _emit_planned(self, p: FilePlan) -> None:
        applying = [d.name for d in p.decisions if d.applies]
        if p.refused:
            summary = f"{p.rel}: refused: {p.refused}"
        elif applying:
            summary = f"{p.rel}: would apply {', '.join(applying)}"
        else:
            summary = f"{p.rel}: nothing to do"
        self.bus.emit(
            ev.PATCH_PLANNED, self.host.name, file=p.path, rel=p.rel, version=p.version,
            recipes=msgspec.to_builtins(p.decisions), diff=p.diff, sha256=p.current_sha256,
            original_sha256=p.original_sha256, original_known=p.original_known,
            refused=p.refused, forceable=p.forceable, notes=p.notes, summary=summary,
        )

    async def apply(self, *, force: bool = False, emit_plan: bool = True,
                    confirmed: Sequence[FilePlan] | None = None) -> list[FilePlan]:
        """Plans again and writes. With `confirmed` (the plans an operator approved), refuses
        if what would be written is no longer exactly that; the helper in turn refuses if the
        file changes between this plan and its write."""
        plans = await self.plan(force=force, emit=emit_plan, recover=True)
        refused = [p for p in plans if p.refused]
        if refused:
            raise Refused("; ".join(p.refused or "" for p in refused))
        if confirmed is not None:
            seen = {(p.rel, p.current_sha256, p.target) for p in confirmed}
            moved = [p.rel for p in plans if (p.rel, p.current_sha256, p.target) not in seen]
            if moved:
                raise Refused(f"{', '.join(moved)} changed on {self.host.name} since the plan "
                              "was shown: nothing applied, plan again")
        writes = [p for p in plans if p.changes]
        answers: dict[str, dict[str, Any]] = {}
        if writes:
            # One helper call for every file: all-or-nothing on the box (its journal).
            done = await self._call({"op": "apply_all",
                                     "files": [write_entry(p, p.target) for p in writes]})
            answers = {a["file"]: a for a in done.get("files", [])}
        for p in plans:
            if not p.changes:
                self._emit_state(ev.PATCH_APPLIED, p, p.current_sha256, p.in_effect or frozenset(),
                                 changed=False)
                continue
            answer = answers.get(p.path, {})
            if answer.get("warning"):
                self.bus.emit(ev.CONSOLE_WARNING, self.host.name,
                              message=f"{p.rel}: {answer['warning']}")
            self._emit_state(ev.PATCH_APPLIED, p, answer.get("sha256") or p.current_sha256,
                             p.target_set, changed=bool(answer.get("changed")),
                             backup=answer.get("backup"),
                             backup_sha256=answer.get("backup_sha256"))
        await drift.write(self.transport, {p.rel: sorted(p.target_set) for p in plans})
        return plans

    async def verify(self) -> list[FilePlan]:
        """The state of every file; through a container that was recreated since the apply
        (remote/patcher/drift.py), one line naming it, as `drift` on each file's event."""
        plans = await self.plan(emit=False, recover=True)
        lost = None
        if not all(p.in_effect for p in plans):
            lost = drift.drift_line(await drift.read(self.transport),
                                    getattr(self.transport, "identity", None))
        if lost:
            self.drift = lost
            self.bus.emit(ev.CONSOLE_WARNING, self.host.name, message=lost)
        for p in plans:
            active = p.in_effect if p.in_effect is not None else frozenset(
                d.name for d in p.decisions if d.in_effect)
            self._emit_state(ev.PATCH_VERIFIED, p, p.current_sha256, active,
                             original=p.current_sha256 == p.original_sha256,
                             original_known=p.original_known, has_backup=p.has_backup,
                             consistent=p.in_effect is not None,
                             **({"drift": lost} if lost else {}))
        return plans

    async def rollback(self, *, force: bool = False) -> list[FilePlan]:
        """Back to the originals. A file edited after apply (neither its original nor a state
        the recipes produce) is refused, every file untouched, since restoring would discard
        the edit; with `force` the edit is kept beside the original first."""
        plans = await self.plan(emit=False, recover=True)
        lost = [p for p in plans if not p.has_backup and not p.original_known]
        if lost:
            raise Refused("; ".join(
                f"{p.path} has no backup on {self.host.name} and is not a known original "
                f"(sha256 {p.current_sha256[:12]}): nothing to roll back to" for p in lost))
        edited = [p for p in plans if p.in_effect is None]
        if edited and not force:
            raise Refused("; ".join(
                f"{p.path} on {self.host.name} differs from both its original and the patched "
                f"text (sha256 {p.current_sha256[:12]}; edited after apply?): rolling back "
                "would discard that edit" for p in edited)
                + ". Nothing rolled back; --force keeps each edited file as "
                "<file>.eagle3-edited-<first 12 hex of its sha256> beside it and restores the original")
        # One helper call for every file: all-or-nothing on the box (the journal apply uses).
        entries, targets = rollback_request(plans, self.selected)
        done = await self._call({"op": "rollback_all", "files": entries})
        answers = {a["file"]: a for a in done.get("files", [])}
        for p in plans:
            content, remaining = targets[p.path]
            answer = answers.get(p.path, {})
            if answer.get("warning"):
                self.bus.emit(ev.CONSOLE_WARNING, self.host.name,
                              message=f"{p.rel}: {answer['warning']}")
            sha = answer.get("sha256") or sha256_text(content)
            extra: dict[str, Any] = {}
            if answer.get("kept_edited"):
                extra["kept_edited"] = answer["kept_edited"]
                self.bus.emit(ev.CONSOLE_WARNING, self.host.name,
                              message=f"{p.rel}: the edited file is kept as "
                              f"{answer['kept_edited']}")
            self._emit_state(ev.PATCH_ROLLED_BACK, p, sha, remaining,
                             changed=bool(answer.get("changed")), backup=answer.get("backup"),
                             **extra)
        left = {p.rel: sorted(targets[p.path][1]) for p in plans}
        if any(left.values()):
            await drift.write(self.transport, left)
        else:
            await drift.clear(self.transport)
        return plans

    def _emit_state(self, kind: str, p: FilePlan, sha: str, active: frozenset[str],
                    **extra: Any) -> None:
        recipes: list[Recipe] = self.groups[p.rel]
        listed = [{"name": r.name, "in_effect": r.name in active} for r in recipes]
        on = [r["name"] for r in listed if r["in_effect"]]
        verb = {ev.PATCH_APPLIED: "applied", ev.PATCH_VERIFIED: "verified",
                ev.PATCH_ROLLED_BACK: "rolled back"}[kind]
        state = ("in effect: " + ", ".join(str(n) for n in on)) if on else (
            "original (no recipe in effect)")
        if kind == ev.PATCH_VERIFIED and extra.get("consistent") is False:
            verb = "inconsistent"
            state = ("neither the original nor the original with the console's "
                     "recipes (edited by hand or by something else; `patch rollback --force` "
                     "keeps the edit and restores the original)")
        if kind == ev.PATCH_APPLIED and not extra.get("changed"):
            verb = "unchanged"
        self.bus.emit(kind, self.host.name, file=p.path, rel=p.rel, recipes=listed, sha256=sha,
                      summary=f"{p.rel}: {verb}: {state} (sha256 {sha[:12]})", **extra)

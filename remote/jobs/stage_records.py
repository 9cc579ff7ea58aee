"""A pipeline stage's `@@eagle3 {...}` log records (pipeline/progress.py) as stage events.

Parsed where job lines are produced (remote/jobs/client.py's tail), not by one consumer: a tail of any
job (live, reattached with `console jobs tail` or the TUI after a restart) yields the same
stage.start / stage.progress / stage.end / stage.skipped events, and a replay holds them as
recorded.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from pipeline.progress import PREFIX
from pipeline.progress import parse as parse_record
from pipeline.units import fmt_bytes
from remote.compat import fix_for_error, shorten
from remote.errors import MalformedRecord
from remote.spine import event_types as et
from remote.spine import events as ev
from remote.spine import intake, stage_life

# A note's own fields (and the record's type): an info record's other fields go along beside them.
_NOTE_FIELDS = {"type", "summary", *et.ConsoleInfo.__struct_fields__}


# What a manifest says about a finished stage (pipeline/manifest.py: facts).
FACTS = ("seconds", "bytes", "outputs", "completed")


# The largest count a fact may hold and still be shown: a box's record is untrusted input, and
# `bytes: 1<400 zeros>` made the float conversion below raise (issue 48 row 3).
FACT_MAX = 2**63 - 1


def plausible(value: object) -> TypeGuard[int | float]:
    """A finite, non-negative number within FACT_MAX (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return 0 <= value <= FACT_MAX  # False for NaN; inf is above FACT_MAX


def facts_text(facts: dict[str, Any]) -> str:
    """` (finished 2026-01-02T03:04:05Z, took 12.3 s, 4.1 MiB in 3 outputs)`, or "" without
    facts."""
    parts = []
    if facts.get("completed"):
        parts.append(f"finished {facts['completed']}")
    if plausible(facts.get("seconds")):
        parts.append(f"took {facts['seconds']:.1f} s")
    if plausible(facts.get("bytes")) and isinstance(facts["bytes"], int):
        n = facts.get("outputs")
        parts.append(f"{fmt_bytes(facts['bytes'])} in {n} output{'' if n == 1 else 's'}")
    return f" ({', '.join(parts)})" if parts else ""


def stage_event(rec: dict[str, Any], run_id: str, stage: str) -> tuple[str, dict[str, Any]] | None:
    """(kind, payload) of one record, or None for a record type the console does not show.

    The record's fields go into the payload as they are (never coerced), so the kind's schema
    judges them (`record_event`); a field whose type the mapping itself needs (an end's
    `summary` dict) raises MalformedRecord."""
    kind = rec.get("type")
    stage = rec.get("stage", stage)
    if not isinstance(stage, str):
        raise MalformedRecord(f"'stage' is {type(stage).__name__}, not a string")
    if kind == "start":
        started = {"stage": stage, "run_id": run_id, "reason": rec.get("reason"),
                   "summary": f"{stage} started ({rec.get('reason', '')})"}
        argv = rec.get("argv")
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            started["argv"] = argv
        return ev.STAGE_START, started
    if kind == "progress":
        payload = {"stage": stage}
        payload.update({k: rec[k] for k in ("done", "total", "unit", "rate") if k in rec})
        payload.update({k: v for k, v in rec.items()
                        if k not in ("type", "stage", "done", "total", "unit", "rate")})
        return ev.STAGE_PROGRESS, payload
    if kind == "end":
        ok = rec.get("ok", True)
        result = rec.get("summary")
        if result is not None and not isinstance(result, dict):
            raise MalformedRecord(f"an end record's 'summary' is {type(result).__name__}, "
                                  "not an object")
        ended: dict[str, Any] = {"stage": stage, "ok": ok, "seconds": rec.get("seconds"),
                                 "outputs": rec.get("outputs"), "run_id": run_id,
                                 "result": dict(result or {}),
                                 "summary": f"{stage} done in {rec.get('seconds')} s"}
        if ok is False:  # the box runner's record of a stage that exited non-zero
            ended["error"] = str(rec.get("error") or f"{stage} failed")
            ended["summary"] = f"{stage} failed: {ended['error']}"
        return ev.STAGE_END, ended
    if kind == "skipped":
        # A number that is no plausible count or time (1e400, NaN, -5) is left out and the
        # event kept; a value of the wrong type goes on to the schema, which refuses it.
        facts = {k: rec[k] for k in FACTS if rec.get(k) is not None
                 and (not isinstance(rec[k], (int, float)) or isinstance(rec[k], bool)
                      or plausible(rec[k]))}
        said = "up to date" + facts_text(facts) if facts else rec.get("reason", "")
        return ev.STAGE_SKIPPED, {"stage": stage, "reason": rec.get("reason", ""), **facts,
                                  "summary": f"{stage} skipped: {said}"}
    if kind == "not_run":
        return ev.STAGE_NOT_RUN, {"stage": stage, "reason": str(rec.get("reason", "")),
                                  "run_id": run_id,
                                  "summary": f"{stage} not run: {rec.get('reason', '')}"}
    if kind == "info":  # its other fields go along (a `nodes` record: remote/train_nodes.py)
        said = {k: v for k, v in rec.items() if k not in _NOTE_FIELDS}
        return ev.CONSOLE_INFO, {**said, "message": f"{stage}: {rec.get('message', '')}",
                                 "stage": stage}
    if kind == "error":
        # One readable line (a transformers error can be 2,000+ characters), with the advisor's
        # fix when it knows the error; the full text stays in the job log.
        full = str(rec.get("message", ""))
        known = fix_for_error(full)
        message = f"{stage}: {shorten(full)}" + (f" — fix: {known.fix}" if known else "")
        return ev.CONSOLE_ERROR, {"message": message, "stage": stage}
    return None


def record_event(text: str, run_id: str, job_name: str, offset: int
                 ) -> tuple[str, dict[str, Any]] | None:
    """The event of one `@@eagle3` log line: its stage event, None for a record type the
    console does not show, or ONE console.warning for a malformed record (not JSON, or a
    field its kind's schema refuses: remote/spine/intake.py), so the tail goes on. A job's
    output is untrusted input (a model's text, a user's script): nothing here raises -- a
    record that raised once would raise again at the same byte on every later tail, and the
    rest of the log and the job's exit would be unreachable (issue 48 row 3)."""
    stage = job_name.removeprefix(stage_life.OLD_JOB_PREFIX)  # a record without its "stage"
    try:
        rec = parse_record(text)
        if rec is None:
            raise MalformedRecord("not a JSON object with a string 'type'")
        found = stage_event(rec, run_id, stage)
        why = intake.problem(*found) if found is not None else None
    except (MalformedRecord, TypeError, ValueError, AttributeError, ArithmeticError,
            RecursionError, MemoryError) as exc:
        why = (str(exc) or type(exc).__name__)[:300]
    if why is None:
        return found
    return ev.CONSOLE_WARNING, {
        "message": f"{job_name}: malformed stage record skipped (log line ending at byte "
                   f"{offset}): {why}", "stage": stage, "source": "job output"}


__all__ = ["FACTS", "PREFIX", "facts_text", "parse_record", "plausible",
           "record_event", "stage_event"]

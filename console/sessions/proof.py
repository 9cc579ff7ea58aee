"""What lets a fast path take a session record as valid without asking `decode_record`.

`decode_record` (console/sessions/decode.py) is the one judgement of a record: its kind's
schema (remote/spine/intake.py). The fast `--print` paths (human_fast, human_records,
human_log) decode a segment in one call into small typed structs instead, and may print a
record only when those types PROVE the schema holds: a job line's text and run_id strings
and a progress record's stage and numbers (checked where they are formatted), a log block's
columns (`block_ok`), the fields of `Typed` typed as the schemas type them with `typed_ok`
for TYPED_KINDS, and any other kind by one decode of its line straight into its schema
(`line_matches`). A record none of these proves goes to `decode_record`.
tests/test_hostile_inputs.py holds the fast and per-event paths to the same verdict on each
damaged shape.
"""

from __future__ import annotations

from typing import Any

import msgspec

from remote.spine import intake
from remote.spine.event_types import SCHEMAS

UNSET = msgspec.UNSET


class Strict:
    """Field types the fast decoders share with every schema that has the field (remote/spine/
    event_types.py): `summary` is every payload's, `name` and `offset` the job kinds'. A value
    of another type fails the batch decode, and its segment goes the way that checks each
    record (a kind without a schema using them so is only slower, never misjudged)."""

    Summary = str | None | msgspec.UnsetType
    Name = str | msgspec.UnsetType
    Offset = int | msgspec.UnsetType
    # the union of what every schema with the field takes (so a record of any kind in the
    # recorder's shape decodes), which for the kinds of TYPED_KINDS is what their schema takes
    OptStr = str | None | msgspec.UnsetType
    OptNum = int | float | None | msgspec.UnsetType
    OptInt = int | None | msgspec.UnsetType
    OptStrs = list[str] | None | msgspec.UnsetType
    Bool = bool | msgspec.UnsetType
    Str = str | msgspec.UnsetType


class Typed(msgspec.Struct, gc=False):
    """The fields of TYPED_KINDS (console notes, stage.start/end/manifest, job.started/exit,
    pipeline.run, connection.up) that their schemas type,
    typed (Strict): with `typed_ok`, such a record is proven valid without another decode."""

    error: Strict.OptStr = msgspec.UNSET
    source: Strict.OptStr = msgspec.UNSET
    reason: Strict.OptStr = msgspec.UNSET
    delay: Strict.OptNum = msgspec.UNSET
    attempt: Strict.OptInt = msgspec.UNSET
    files: Strict.OptStrs = msgspec.UNSET
    ok: Strict.Bool = msgspec.UNSET
    seconds: Strict.OptNum = msgspec.UNSET
    complete: Strict.Bool = msgspec.UNSET
    bytes: Strict.OptInt = msgspec.UNSET
    completed: Strict.OptStr = msgspec.UNSET
    config: Strict.Str = msgspec.UNSET
    outputs: Any = msgspec.UNSET
    pid: Strict.OptInt = msgspec.UNSET
    log: Strict.Str = msgspec.UNSET
    state: Strict.OptStr = msgspec.UNSET
    returncode: Strict.OptInt = msgspec.UNSET
    how: Strict.Str = msgspec.UNSET
    started: Strict.Str = msgspec.UNSET
    argv: Strict.OptStrs = msgspec.UNSET


def block_ok(p: Any) -> bool:
    """JobLinesRecord as expand_record takes it: texts (strings, typed) as many as offsets
    (integers, typed), at least one, run_id a string."""
    texts, offsets = p.texts, p.offsets
    return bool(texts) and offsets is not None and len(texts) == len(offsets) \
        and type(p.run_id) is str


_LEVELS = frozenset({"console.info", "console.warning", "console.error"})
_RUNS = frozenset({"job.started", "job.exit", "pipeline.run"})
TYPED_KINDS = _LEVELS | _RUNS | {"stage.start", "stage.end", "stage.manifest", "connection.up"}


def typed_ok(kind: str, p: Any) -> bool:
    """For a kind of TYPED_KINDS decoded with the `Typed` fields: what their schemas ask
    beyond those fields' types (a required field, a field one kind types narrower)."""
    if kind in _LEVELS:
        return type(p.message) is str
    if kind in _RUNS:
        if type(p.run_id) is not str:
            return False
        if kind == "job.started":
            return type(p.name) is str and p.argv is not None
        return p.state is not None
    if kind == "connection.up":
        return p.attempt is not None
    if type(p.stage) is not str:
        return False
    if kind == "stage.manifest":
        reason, outputs = p.reason, p.outputs
        return (reason is UNSET or type(reason) is str) and (
            outputs is UNSET or outputs is None or type(outputs) is int)
    return kind in TYPED_KINDS


_CHECKERS: dict[str, msgspec.json.Decoder[Any]] = {}


def line_matches(kind: str, line: bytes) -> bool:
    """The line's payload decoded straight into its kind's schema (a C-speed check, about a
    microsecond for a stats sample of eight GPUs): True means decode_record takes it too;
    False only that it must be asked."""
    decoder = _CHECKERS.get(kind)
    if decoder is None:
        envelope = msgspec.defstruct(f"Checked_{kind.replace('.', '_')}",
                                     [("payload", SCHEMAS[kind] | None, None)])
        decoder = _CHECKERS[kind] = msgspec.json.Decoder(envelope)
    try:
        payload = decoder.decode(line).payload
    except (msgspec.DecodeError, RecursionError):
        return False
    return payload is not None or intake.problem(kind, {}) is None

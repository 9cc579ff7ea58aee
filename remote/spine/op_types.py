"""The schemas of what the operations report (remote/ops): patches, stats samples, all-reduce,
bench, vLLM's server, and the session's redaction count. Their kinds are named in the one table,
remote/spine/event_types.py's SCHEMAS."""

from __future__ import annotations

from typing import Any

import msgspec

from remote.spine.payload import Num, Payload

# -- patches ------------------------------------------------------------------------------------


class RecipeDecision(msgspec.Struct, kw_only=True, frozen=True):
    name: str
    applies: bool = False
    reason: str = ""
    in_effect: bool = False


class PatchPlanned(Payload, kw_only=True, frozen=True):
    """The plan for one file. recipes: the decision per recipe (remote.patcher.plan)."""

    file: str
    rel: str = ""
    version: str | None = None
    recipes: list[RecipeDecision] = []
    diff: str = ""
    sha256: str | None = None
    original_sha256: str | None = None
    original_known: bool = False
    refused: str | None = None
    forceable: bool = False
    notes: list[str] = []


class RecipeState(msgspec.Struct, kw_only=True, frozen=True):
    name: str
    in_effect: bool


class _PatchState(Payload, kw_only=True, frozen=True):
    """The state of a file after an action: every recipe of the file, and whether it is in
    effect now."""

    file: str
    rel: str = ""
    recipes: list[RecipeState] = []
    sha256: str = ""
    state: str | None = None
    changed: bool | None = None
    backup: str | None = None
    backup_sha256: str | None = None


class PatchApplied(_PatchState, kw_only=True, frozen=True):
    pass


class PatchVerified(_PatchState, kw_only=True, frozen=True):
    # the container the patch was applied to was recreated since (remote/patcher/drift.py)
    drift: str | None = None


class PatchRolledBack(_PatchState, kw_only=True, frozen=True):
    pass


# -- stats --------------------------------------------------------------------------------------


class HostSample(msgspec.Struct, kw_only=True, frozen=True):
    cpu: Num | None = None
    mem_used: Num | None = None
    mem_total: Num | None = None
    load1: Num | None = None


class GpuProc(msgspec.Struct, kw_only=True, frozen=True):
    pid: int
    # None where the box cannot read /proc/PID/comm: a host pid seen from inside a container
    # (remote/probes/host_stats.py process_name); the sample is still the sample
    name: str | None = ""
    mem_used: int | None = None


class NvLinkSample(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One NVLink link: data throughput (bytes/s) and its error counters, each absent (None)
    where the driver does not answer it."""

    link: int
    tx: Num | None = None
    rx: Num | None = None
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_flit_errors: int | None = None
    crc_data_errors: int | None = None


class GpuSample(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One GPU of a sample. Written without its unset fields (omit_defaults): a driver without
    the health calls costs no bytes for them, and a field it lacks stays absent on the wire."""

    index: int
    name: str = ""
    util: Num | None = None
    mem_used: Num | None = None
    mem_total: Num | None = None
    power: Num | None = None
    power_limit: Num | None = None
    temp: Num | None = None
    sm_clock: Num | None = None
    pcie_tx: Num | None = None
    pcie_rx: Num | None = None
    procs: list[GpuProc] = []
    # health (remote/stats/samples.py HEALTH_COUNTERS): None where the driver lacks the call,
    # and in every session recorded before they existed
    clock_reasons: list[str] | None = None
    clock_reasons_mask: int | None = None
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: int | None = None
    remapped_rows_corrected: int | None = None
    remapped_rows_uncorrected: int | None = None
    remapped_rows_pending: int | None = None
    remapped_rows_failure: int | None = None
    pcie_replay: int | None = None
    nvlink: list[NvLinkSample] | None = None
    xid: list[int] | None = None


class StatsSample(Payload, kw_only=True, frozen=True):
    """One sample of a host and its GPUs. `reason` (why the source is not NVML) is only in the
    first sample after it changed: a long session must not repeat it per sample."""

    source: str = "none"
    host: HostSample
    gpus: list[GpuSample] = []
    reason: str | None = None
    seq: Num | None = None
    t: Num | None = None
    self_cpu: Num | None = None
    interval: Num | None = None


class StatsAlert(Payload, kw_only=True, frozen=True):
    """One incident a rule of remote/stats/alerts.py saw in a host's samples: the rule's name,
    what happened, what the rule means and what to do; the GPU or the stage it is about."""

    rule: str
    message: str
    meaning: str = ""
    advice: str = ""
    gpu: int | None = None
    stage: str | None = None
    value: Any = None


# -- allreduce, bench ---------------------------------------------------------------------------


class AllreduceResult(Payload, kw_only=True, frozen=True):
    mode: str = ""


class BenchPoint(Payload, kw_only=True, frozen=True):
    """One concurrency of a sweep: remote.bench.results.Point's fields (and the label, url and
    model the operation adds), the ones a reader computes with typed here."""

    label: str = ""
    concurrency: int | None = None
    requests: int | None = None
    failed: int | None = None
    output_tokens: int | None = None
    duration: Num | None = None
    output_tok_s: Num | None = None
    req_s: Num | None = None
    acceptance: dict[str, Any] | None = None
    errors: list[str] = []


class BenchSummary(Payload, kw_only=True, frozen=True):
    label: str = ""
    result_file: str | None = None


class BenchWatch(Payload, kw_only=True, frozen=True):
    window: int | None = None
    seconds: Num | None = None


# -- serve (remote/serving/serve.py) --------------------------------------------------------------


class _ServeLaunch(Payload, kw_only=True, frozen=True):
    """A server of the host's: which, where, and what it speculates with."""

    role: str
    url: str
    run_id: str
    pid: int | None = None  # the server's pid on the box (absent before #42)
    # read from the box on connect (its served.json), not started (or seen starting) by this console
    found: bool = False
    draft: str = ""  # pipeline, none, ngram or a head directory (absent before #49)
    k: int | None = None  # num_speculative_tokens asked for (None: the draft's own)


class ServeStarting(_ServeLaunch, kw_only=True, frozen=True):
    pass


class ServeReady(_ServeLaunch, kw_only=True, frozen=True):
    seconds: Num | None = None  # launch to first answer (None: found without its record)
    model: str = ""  # what /v1/models names (absent before #42)


class ServeFailed(Payload, kw_only=True, frozen=True):
    role: str
    run_id: str
    error: str
    log_tail: list[str] = []


class ServeStopped(Payload, kw_only=True, frozen=True):
    role: str = ""
    run_id: str
    state: str


class SessionRedactions(Payload, kw_only=True, frozen=True):
    """How many secret shapes the console masked in this session (remote/spine/redact.py), by
    kind: the last record of a session that masked any; the reader shows it with the header."""

    count: int
    kinds: dict[str, int] = msgspec.field(default_factory=dict)

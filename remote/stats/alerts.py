"""Alerts: a rule table that turns a host's stats samples (and its stages' progress) into
`stats.alert` events, once per incident.

A GPU's health fields (remote/probes/gpu_health.py) say what is wrong in one sample; an operator
needs to hear it once when it starts, not ten times a second. Each rule keeps what it needs to
know whether an incident is new (an ECC counter's last value, since when a GPU brakes, which
GPUs were seen) and stays silent on a healthy stream. No I/O: the stats stream
(remote/stats/stream.py) feeds it and publishes what it returns, so the printer, the TUI and the
session see the same alerts and a replay shows them again without re-judging.

The rules, their meaning and what to do are data (RULES): README.md and docs/health.md say the
same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from remote.stats.samples import BRAKE_REASONS


@dataclass(frozen=True, slots=True)
class AlertConfig:
    """console.toml's [alerts] table: the thresholds (remote/link/hosts.py parses it)."""

    brake_seconds: float = 10.0  # a thermal or power brake held this long is an incident
    stall_minutes: float = 15.0  # a running stage with no progress for this long is one

    @classmethod
    def of(cls, table: dict[str, float] | None) -> AlertConfig:
        """From console.toml's checked [alerts] table (Config.alerts)."""
        return cls(**(table or {}))


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    meaning: str
    advice: str


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("ecc_uncorrected", "uncorrected ECC errors increased on a GPU",
         "the GPU's memory returned data it could not correct: the process that used it may have "
         "crashed or computed garbage; drain the GPU, check `nvidia-smi -q -d ECC,ROW_REMAPPER` "
         "and reset it (pending row remaps apply at reset); replace it if they keep coming"),
    Rule("xid", "an Xid error reported by the driver",
         "look the number up in NVIDIA's Xid catalogue: 79 (fallen off the bus), 48/63/64/94/95 "
         "(ECC, page retirement/row remap), 13/31/43 (usually the application); restart the job "
         "after a reset for the GPU-side ones"),
    Rule("brake", "a GPU held a thermal or power brake",
         "the GPU clocks down for heat or power: check its temperature, fans and airflow, the "
         "power supply and `nvidia-smi -q -d PERFORMANCE`; training runs slower until it ends"),
    Rule("gpu_missing", "a GPU that was reported is missing from a sample",
         "the driver no longer sees it (often with Xid 79): check `nvidia-smi`, the kernel log; "
         "the box needs a GPU reset or a reboot, and the run a restart"),
    Rule("stage_stalled", "a running stage reported no progress",
         "look at the stage's log (Pipeline screen, `console jobs tail`): a hung collective (NCCL), "
         "a dead data loader or a stuck server; cancel and resume it if it does not move"),
)}


@dataclass
class _Gpu:
    ecc: int | None = None  # the last uncorrected ECC count seen
    brake_since: float | None = None
    brake_fired: bool = False


@dataclass
class AlertWatch:
    """One host's rules. `sample(payload, t)` and `stage(kind, payload, t)` return the alerts
    (stats.alert payloads) that fired; `t` is seconds (the event's time), so a replayed or
    scripted stream is judged exactly as a live one."""

    config: AlertConfig = field(default_factory=AlertConfig)
    _gpus: dict[int, _Gpu] = field(default_factory=dict)
    _seen: set[int] = field(default_factory=set)
    _missing: set[int] = field(default_factory=set)
    _stages: dict[str, float] = field(default_factory=dict)  # running stage -> last progress
    _stalled: set[str] = field(default_factory=set)

    def sample(self, payload: dict[str, Any], t: float) -> list[dict[str, Any]]:
        gpus = [g for g in payload.get("gpus") or () if isinstance(g.get("index"), int)]
        present = {g["index"] for g in gpus}
        out = [_alert("gpu_missing", f"GPU {index} is missing from the sample "
                      f"({len(present)} of {len(self._seen)} reported)", gpu=index)
               for index in sorted(self._seen - present - self._missing)]
        self._missing = self._seen - present  # one that came back can go missing again
        self._seen |= present
        for g in gpus:
            out += self._gpu(g, t)
        out += self._stalls(t)
        return out

    def stage(self, kind: str, payload: dict[str, Any], t: float) -> None:
        name = payload.get("stage")
        if not isinstance(name, str):
            return
        if kind in ("stage.start", "stage.progress"):
            self._stages[name] = t
            self._stalled.discard(name)
        elif kind in ("stage.end", "stage.skipped", "stage.not_run"):
            self._stages.pop(name, None)
            self._stalled.discard(name)

    def _gpu(self, g: dict[str, Any], t: float) -> list[dict[str, Any]]:
        index = g["index"]
        st = self._gpus.setdefault(index, _Gpu())
        out = []
        ecc = g.get("ecc_uncorrected_volatile", g.get("ecc_uncorrected_aggregate"))
        if isinstance(ecc, int):
            if st.ecc is not None and ecc > st.ecc:
                out.append(_alert("ecc_uncorrected", f"GPU {index}: uncorrected ECC errors "
                                  f"{st.ecc} -> {ecc}", gpu=index, value=ecc))
            st.ecc = ecc
        xids = g.get("xid")
        if xids:
            out.append(_alert("xid", f"GPU {index}: Xid {', '.join(str(x) for x in xids)}",
                              gpu=index, value=xids[-1]))
        reasons = g.get("clock_reasons")
        if isinstance(reasons, list):  # absent: nothing known, nothing changes
            brakes = sorted(BRAKE_REASONS.intersection(reasons))
            if not brakes:
                st.brake_since, st.brake_fired = None, False
            else:
                if st.brake_since is None:
                    st.brake_since = t
                held = t - st.brake_since
                if not st.brake_fired and held >= self.config.brake_seconds:
                    st.brake_fired = True
                    out.append(_alert("brake", f"GPU {index}: {'+'.join(brakes)} for {held:.0f}s "
                                      f"(>= {self.config.brake_seconds:g}s)", gpu=index,
                                      value=round(held, 1)))
        return out

    def _stalls(self, t: float) -> list[dict[str, Any]]:
        out = []
        limit = self.config.stall_minutes * 60
        for name, last in self._stages.items():
            if name not in self._stalled and t - last >= limit:
                self._stalled.add(name)
                out.append(_alert("stage_stalled", f"stage {name}: no progress for "
                                  f"{(t - last) / 60:.0f} min (>= {self.config.stall_minutes:g} min)",
                                  stage=name, value=round(t - last)))
        return out


def _alert(rule: str, message: str, *, gpu: int | None = None, stage: str | None = None,
           value: Any = None) -> dict[str, Any]:
    r = RULES[rule]
    out: dict[str, Any] = {"rule": rule, "message": message, "meaning": r.meaning, "advice": r.advice}
    out.update((k, v) for k, v in (("gpu", gpu), ("stage", stage), ("value", value)) if v is not None)
    return out

"""A box's trouble scripted through the NVML test double's state file (tests/doubles/pynvml.py
reads it again when it changes): the steps each alert rule must see once, shared by the
headless, TUI and report tests of issue 53."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

DOUBLES = Path(__file__).parent / "doubles"
# [alerts] for a test: a brake of half a second is an incident, a stage still for 0.6 s is one.
ALERTS_TOML = "[alerts]\nbrake_seconds = 0.5\nstall_minutes = 0.01\n"
RULES = ("ecc_uncorrected", "xid", "brake", "gpu_missing", "stage_stalled")


def pynvml_double(name: str = "pynvml_double") -> ModuleType:
    """A fresh copy of the NVML test double (tests/doubles/pynvml.py), as module `name`."""
    spec = importlib.util.spec_from_file_location(name, DOUBLES / "pynvml.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def default_state() -> dict[str, Any]:
    return copy.deepcopy(pynvml_double("pynvml_state_double").DEFAULT_STATE)


class Box:
    """The state file and the steps of the scenario."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.state = default_state()
        self.write()

    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(DOUBLES), "PYNVML_DOUBLE_STATE": str(self.path)}

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state))
        os.replace(tmp, self.path)
        st = self.path.stat()
        os.utime(self.path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # seen as a change

    def ecc(self, n: int) -> None:
        self.state["devices"][0]["ecc"]["uncorrected"]["volatile"] = n
        self.write()

    def xid(self, number: int) -> None:
        xids = self.state["devices"][0]["xids"]
        xids.append({"id": len(xids) + 1, "xid": number})
        self.write()

    def brake(self, on: bool) -> None:
        self.state["devices"][0]["clock_reasons"] = 0x40 if on else 0  # HwThermalSlowdown
        self.write()

    def lose_gpu(self, index: int) -> None:
        self.state["devices"][index]["lost"] = True
        self.write()

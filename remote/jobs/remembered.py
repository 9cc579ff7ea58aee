"""The pipeline runs this laptop started or attached to, one per host, so the next console start
knows which boxes to reconnect to without asking every configured host.

    <state dir>/pipelines/<host>-<sha256(ssh|workdir)[:12]>.json
        {"run_id", "config", "workdir", "host", "started", "remembered"}

The box keeps the truth (its run directory and the stage manifests); this is only a pointer to
it. Keyed by the host's address and workdir as well as its name, so a `local` host with another
workdir (another checkout, a test) is another box and is not reconnected to by mistake. A file
that cannot be read is treated as absent: the console then simply does not reattach by itself.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import suppress
from pathlib import Path
from typing import Any

import platformdirs

from remote.jobs.cursors import safe_part, write_private_json
from remote.link.hosts import APP_NAME, HostConfig


class RememberedRuns:
    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root or Path(platformdirs.user_state_dir(APP_NAME)) / "pipelines")

    def path(self, host: HostConfig) -> Path:
        where = hashlib.sha256(f"{host.ssh or ''}|{host.workdir}".encode()).hexdigest()[:12]
        return self.root / f"{safe_part(host.name)}-{where}.json"

    def remember(self, host: HostConfig, run_id: str, *, config: str = "",
                 started: str = "") -> None:
        """Best effort: a laptop whose state dir is read-only loses only the auto-reattach."""
        from remote.spine.events import format_ts, utc_now

        record = {"run_id": run_id, "config": config, "workdir": host.workdir,
                  "host": host.name, "started": started, "remembered": format_ts(utc_now())}
        with suppress(OSError):
            write_private_json(self.path(host), record)

    def recall(self, host: HostConfig) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path(host).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
            return None
        if data.get("workdir") != host.workdir:
            return None
        return data

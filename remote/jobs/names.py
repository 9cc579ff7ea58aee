"""A run's name as the box, the session and every id built from it see it.

The operator names a run (`console jobs launch --name ...`); the box builds the run id and the
run directory from that name (remote/jobs/helper.py) and the name lock is keyed by it. A name
that holds a secret (`--name hf_...`, issue 41) would put the secret into the run id, the run
directory's name on the box, every job event and the `jobs list` table, where redaction on the
bus comes too late (the id is already made) and masking the id afterwards would break it (two
different tokens both become `hf_***`: one lock, one id prefix for two runs).

So the name is masked on the laptop before it is sent, then made unique again: the masked text
and a short keyed hash of the whole name (`hf_***-3f9c01ab`). The same name gives the same
masked name on this machine (the lock still keeps a rerun from starting a duplicate); two
secrets never share one. The hash is an HMAC with a key kept on this machine (0600, created
once), not a plain digest: a plain digest of `--password hunter2` in a shared session would let
anyone confirm a guessed password offline.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

import platformdirs

from remote.link.hosts import APP_NAME
from remote.spine.bus import EventBus
from remote.spine.redact import Redactor

KEY_FILE = "run-name-key"


def _key() -> bytes:
    path = Path(platformdirs.user_state_dir(APP_NAME)) / KEY_FILE
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    except OSError:
        return b""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another console made it meanwhile
        return path.read_bytes()
    except OSError:  # a read-only home: a key for this process only (still never the secret)
        return _PROCESS_KEY
    key = os.urandom(32)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    return key


_PROCESS_KEY = os.urandom(32)


def masked_name(name: str) -> str:
    """`name` unchanged when it holds no secret shape; else its masked text and 8 hex digits
    of an HMAC of the whole name."""
    masked = Redactor().text(name)
    if masked == name:
        return name
    digest = hmac.new(_key() or _PROCESS_KEY, name.encode("utf-8"), hashlib.sha256)
    return f"{masked}-{digest.hexdigest()[:8]}"


def launch_name(name: str, bus: EventBus | None) -> str:
    """The name a launch sends: masked unless the session keeps secrets (`--no-redact`: a bus
    without a redactor), and counted in the session's redactions when it was."""
    if bus is not None and bus.redactor is None:
        return name
    shown = masked_name(name)
    if bus is not None and bus.redactor is not None and shown != name:
        bus.redactor.counts["run_name"] += 1
    return shown

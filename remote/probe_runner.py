"""Upload a probe to the box, run it with the box's python, and turn its JSON lines into events.

A probe's output crosses a network and comes from a box in an unknown state: a killed probe, a
line that is not JSON or a non-zero exit is reported as one probe.error event and a RemoteError
with the probe name and what went wrong, never as a traceback.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from remote import probe_table
from remote.errors import ProbeFailed, RemoteError, UsageError
from remote.link.container_identity import ContainerIdentity
from remote.link.transport import Transport
from remote.link.upload import box_path, upload_probe
from remote.spine import events as ev
from remote.spine.bus import EventBus

PROBES_DIR = Path(__file__).resolve().parent / "probes"
DEFAULT_TIMEOUT = 600.0


async def box_workdir(transport: Transport, workdir: str, python: str = "python3") -> str:
    try:
        return await box_path(transport, workdir, python)
    except RemoteError as exc:
        raise ProbeFailed(str(exc)) from None


def parse_probe_output(probe: str, stdout_lines: Sequence[str], stderr_lines: Sequence[str],
                       returncode: int) -> list[dict[str, Any]]:
    """The results a probe printed; raises ProbeFailed with a one-line reason otherwise."""
    results: list[dict[str, Any]] = []
    reported: str | None = None
    bad: str | None = None
    lines = [ln for ln in stdout_lines if ln.strip()]
    for n, line in enumerate(lines, 1):
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            snippet = line if len(line) <= 80 else line[:77] + "..."
            where = "its last line is cut short" if n == len(lines) else f"line {n} of its output is not JSON"
            bad = f"{where}: {snippet!r}"
            break
        if not isinstance(msg, dict) or msg.get("kind") not in ("result", "error"):
            bad = f"line {n} is not a probe message (no kind result/error)"
            break
        if msg["kind"] == "error":
            reported = str(msg.get("message") or "error without a message")
        elif not isinstance(msg.get("result"), dict):
            bad = f"line {n} has no result object"
            break
        else:
            results.append(msg)
    tail = next((s.strip() for s in reversed(stderr_lines) if s.strip()), "")
    if reported is not None:
        raise ProbeFailed(f"probe {probe}: {reported}")
    if returncode != 0:
        how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited {returncode}"
        detail = bad or tail or (f"after {len(results)} result line(s)" if results else "no output")
        raise ProbeFailed(f"probe {probe} {how}: {detail}")
    if bad is not None:
        raise ProbeFailed(f"probe {probe}: {bad}")
    if not results:
        raise ProbeFailed(f"probe {probe} printed no result" + (f": {tail}" if tail else ""))
    return [m["result"] for m in results]


async def run_probe(
    transport: Transport,
    probe: str,
    args: Sequence[str] = (),
    *,
    workdir: str,
    python: str = "python3",
    bus: EventBus | None = None,
    host: str = "",
    timeout: float = DEFAULT_TIMEOUT,
) -> list[dict[str, Any]]:
    """Upload (content-hashed) and run one probe's script (its row in remote/probe_table.py)
    with `args` (`--opt=value` words, as the row's options give them); emit probe.result per
    result, or one probe.error and raise ProbeFailed."""
    row = probe_table.get(probe)
    if not row.script:
        raise UsageError(f"probe {probe} has no script of its own: remote/ops/probes.py runs it")
    script = PROBES_DIR / row.script
    try:
        wd = await box_workdir(transport, workdir, python)
        remote_path = posixpath.join(wd, "probes", script.name)
        await upload_probe(transport, script, remote_path, python=python, bus=bus, host=host)
        # The probe ends itself shortly after we stop waiting: closing a channel does not kill
        # a process on the box (docs/design.md §4), and a stuck probe must not linger there.
        deadline = ["--deadline", str(int(timeout) + 5)] if timeout else []
        done = await transport.run([python, remote_path, *args, *deadline],
                                   timeout=timeout)
        results = parse_probe_output(probe, done.stdout.splitlines(), done.stderr.splitlines(), done.returncode)
    except ProbeFailed as exc:
        _error(bus, host, probe, str(exc))
        raise
    except TimeoutError:
        msg = f"probe {probe} did not finish within {timeout:g} s"
        _error(bus, host, probe, msg)
        raise ProbeFailed(msg) from None
    except RemoteError as exc:  # the command itself could not be run (upload, connection)
        _error(bus, host, probe, f"probe {probe}: {exc}")
        raise
    for result in results:  # a probe that says which container it ran in (env)
        with_container(result, transport)
    if bus is not None:
        for result in results:
            bus.emit(ev.PROBE_RESULT, host, probe=probe, result=result, summary=row.summary(result))
    return results


def with_container(result: dict[str, Any], transport: Transport) -> None:
    """The runtime's word on the container a probe ran in (name, id, start time, image or
    rootfs: `<runtime> inspect` on the host) beside what the probe saw from inside (its
    `container`, which the env probe reports); `matches` when both name the same id."""
    ident: ContainerIdentity | None = getattr(transport, "identity", None)
    inside = result.get("container")
    if ident is None or not isinstance(inside, dict):
        return
    inside["runtime"] = ident.to_dict()
    inside["matches"] = inside.get("id") == ident.id


def _error(bus: EventBus | None, host: str, probe: str, message: str) -> None:
    if bus is not None:
        bus.emit(ev.PROBE_ERROR, host, probe=probe, message=message, summary=message)

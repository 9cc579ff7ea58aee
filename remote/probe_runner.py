"""Upload a probe to the box, run it with the box's python, and turn its JSON lines into events.

A probe's output crosses a network and comes from a box in an unknown state: a killed probe, a
line that is not JSON or a non-zero exit is reported as one probe.error event and a ConsoleError
with the probe name and what went wrong, never as a traceback.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from remote.link.container_identity import ContainerIdentity
from remote.link.errors import ConsoleError, UsageError
from remote.link.transport import Transport
from remote.link.upload import box_path, upload_probe
from remote.spine import events as ev
from remote.spine.bus import EventBus

PROBES_DIR = Path(__file__).resolve().parent / "probes"
# probe name -> the script that answers it (the source diagnostic is a mode of the model probe,
# which already knows how to read vLLM's source)
PROBE_SCRIPTS = {"env": "env_probe.py", "model": "model_probe.py", "source": "model_probe.py"}
DEFAULT_TIMEOUT = 600.0

class ProbeFailed(ConsoleError):
    """A probe ran but did not produce a usable result."""


async def box_workdir(transport: Transport, workdir: str, python: str = "python3") -> str:
    try:
        return await box_path(transport, workdir, python)
    except ConsoleError as exc:
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
    emit_results: bool = True,
) -> list[dict[str, Any]]:
    """Upload (content-hashed) and run one probe; emit probe.result per result, or one
    probe.error and raise ProbeFailed."""
    if probe not in PROBE_SCRIPTS:
        raise UsageError(f"unknown probe {probe!r} (known: {', '.join(sorted(PROBE_SCRIPTS))})")
    script = PROBES_DIR / PROBE_SCRIPTS[probe]
    try:
        wd = await box_workdir(transport, workdir, python)
        remote_path = posixpath.join(wd, "probes", script.name)
        await upload_probe(transport, script, remote_path, python=python, bus=bus, host=host)
        # The probe ends itself shortly after we stop waiting: closing a channel does not kill
        # a process on the box (docs/design.md §4), and a stuck probe must not linger there.
        deadline = ["--deadline", str(int(timeout) + 5)] if timeout else []
        done = await transport.run([python, remote_path, *_glued(args), *deadline],
                                   timeout=timeout)
        results = parse_probe_output(probe, done.stdout.splitlines(), done.stderr.splitlines(), done.returncode)
    except ProbeFailed as exc:
        _error(bus, host, probe, str(exc))
        raise
    except TimeoutError:
        msg = f"probe {probe} did not finish within {timeout:g} s"
        _error(bus, host, probe, msg)
        raise ProbeFailed(msg) from None
    except ConsoleError as exc:  # the command itself could not be run (upload, connection)
        _error(bus, host, probe, f"probe {probe}: {exc}")
        raise
    if probe == "env":
        for result in results:
            with_container(result, transport)
    if bus is not None and emit_results:
        for result in results:
            bus.emit(ev.PROBE_RESULT, host, probe=probe, result=result, summary=summarize(probe, result))
    return results


def with_container(result: dict[str, Any], transport: Transport) -> None:
    """The runtime's word on the container the env probe ran in (name, id, start time, image
    or rootfs: `<runtime> inspect` on the host) beside what the probe saw from inside;
    `matches` when both name the same id."""
    ident: ContainerIdentity | None = getattr(transport, "identity", None)
    inside = result.get("container")
    if ident is None or not isinstance(inside, dict):
        return
    inside["runtime"] = ident.to_dict()
    inside["matches"] = inside.get("id") == ident.id


# The probes' options that take a value. Passed as `--opt=value`, so a value that starts with
# `-` (a workdir `-wd`, a model dir `-m`) is not read by the probe's argparse as an option.
_VALUE_OPTIONS = frozenset({"--workdir", "--model", "--arch", "--family", "--vllm-root"})


def _glued(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    it = iter(args)
    for a in it:
        if a in _VALUE_OPTIONS:
            value = next(it, None)
            out.append(a if value is None else f"{a}={value}")
        else:
            out.append(a)
    return out


def _error(bus: EventBus | None, host: str, probe: str, message: str) -> None:
    if bus is not None:
        bus.emit(ev.PROBE_ERROR, host, probe=probe, message=message, summary=message)


def _gb(n: Any) -> str:
    return f"{n / 1e9:.1f} GB" if isinstance(n, (int, float)) else "?"


def _container_part(c: Any) -> str:
    """`; in container NAME (id ..., started ..., rootfs ...)`, or where it ran without one."""
    if not isinstance(c, dict):
        return ""
    if not c.get("in_container"):
        return "; not in a container"
    rt = c.get("runtime") if isinstance(c.get("runtime"), dict) else None
    cid = str((rt or c).get("id") or "?")[:12]
    if rt is None:
        return f"; in a container (id {cid}, seen from {', '.join(c.get('evidence') or [])})"
    source = f"image {rt['image']}" if rt.get("image") else f"rootfs {rt.get('rootfs')}"
    note = "" if c.get("matches") else f" (inside it reports id {str(c.get('id'))[:12]})"
    return f"; in container {rt.get('name')} (id {cid}, started {rt.get('started_at')}, {source}){note}"


def summarize(probe: str, r: dict[str, Any]) -> str:
    """One line for the headless printer and the TUI's list views."""
    if probe == "env":
        pk = r.get("packages") or {}
        torch = r.get("torch") or {}
        gpu = r.get("gpu") or {}
        if gpu.get("count"):
            names = sorted({g.get("name") or "?" for g in gpu.get("gpus", [])})
            link = (gpu.get("topology") or {}).get("interconnect")
            gpus = f"{gpu['count']}x {'/'.join(names)}" + (f" ({link})" if link else "") + f" via {gpu.get('source')}"
        else:
            gpus = gpu.get("reason") or "no GPU information"
        cuda = f" cuda {torch['cuda']}" if torch.get("cuda") else ""
        free = _gb(((r.get("host") or {}).get("workdir") or {}).get("free"))
        return (f"python {(r.get('python') or {}).get('version')}; torch {pk.get('torch')}{cuda}; "
                f"vllm {pk.get('vllm')}; speculators {pk.get('speculators')}; transformers {pk.get('transformers')}; "
                f"{gpus}; workdir free {free}{_container_part(r.get('container'))}")
    if probe == "model":
        arch = r.get("architecture")
        if r.get("status") != "resolved":
            return f"{arch}: {r.get('status')}: {r.get('reason')} ({r.get('stopped_at')})"
        n = r.get("num_layers")
        layers = f" ({n} layers)" if n else ""
        aux = f", default aux layers {r['default_aux_layers']}" if r.get("default_aux_layers") else ""
        eagle = "yes" if r.get("supports_eagle3") else "no"
        return f"{arch}: {r.get('layers_path')}{layers}, SupportsEagle3: {eagle}{aux} (vLLM {r.get('vllm_version')})"
    if probe == "source":
        files = r.get("files") or []
        classes = sum(len(f.get("classes") or []) for f in files)
        return (f"{r.get('family')}: {len(files)} model file(s), {classes} classes, "
                f"architectures {', '.join(r.get('architectures') or []) or 'none'} (vLLM {r.get('vllm_version')})")
    if probe == "compat":
        return str(r.get("summary", ""))
    return probe

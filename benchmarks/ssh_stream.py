"""Log streaming over SSH: lines/s from a detached job through Jobs.tail into the session recorder.

Starts a real OpenSSH sshd on loopback (tests/sshd_harness.py), launches a job that writes N
numbered lines, waits for it, then measures in the same run:
- console: Jobs.tail over SSHTransport, every line published as a job.line event and written by
  the session recorder (SessionWriter, one write per published batch), as `console jobs tail` does;
- baseline: `ssh HOST cat LOG` with the OpenSSH client, lines counted from its stdout.
Prints both rates, their ratio, and lines lost (must be 0). Target: >= 100,000 lines/s.

    python benchmarks/ssh_stream.py [--lines N]
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import int_options  # first: the repository on sys.path

from console.sessions.reader import SessionReader
from console.sessions.recorder import Recorder
from console.sessions.writer import SessionWriter
from remote.jobs.client import Jobs
from remote.link.ssh import SSHTransport
from remote.spine.bus import EventBus
from tests.sshd_harness import Sshd, start_sshd

WRITER = (
    "import sys\n"
    "w = sys.stdout.write\n"
    "for i in range(1, int(sys.argv[1]) + 1):\n"
    "    w(f'line {i} of the benchmark log\\n')\n"
)


async def console_rate(sshd: Sshd, root: Path, n: int) -> tuple[float, int, str, Path]:
    session = root / "bench-session.jsonl"
    bus = EventBus()
    recorder = Recorder(SessionWriter(session, ["box"])).attach(bus)
    t = SSHTransport(sshd.host_config(workdir=str(root / "box")), bus=bus)
    await t.connect()
    jobs = Jobs(t, str(root / "box"), host="box", bus=bus, python=sys.executable)
    info = await jobs.launch([sys.executable, "-c", WRITER, str(n)], name="bench")
    done = await jobs.wait(info.run_id)
    assert done.returncode == 0, done
    count = 0
    t0 = time.perf_counter()
    async for _line in jobs.tail(info.run_id):
        count += 1
    recorder.sync()  # the recording is part of the work timed: its writes run on a thread
    elapsed = time.perf_counter() - t0
    await t.close()
    recorder.close()
    if recorder.error:
        raise SystemExit(f"recorder failed: {recorder.error}")
    return elapsed, count, done.log_path, session


def ssh_argv(sshd: Sshd, *command: str) -> list[str]:
    return ["ssh", "-F", str(sshd.ssh_config), "-o", f"UserKnownHostsFile={sshd.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", sshd.alias, *command]


def setup_time(sshd: Sshd) -> float:
    """`ssh host true`: connection, login and the shell's rc files, without any data."""
    t0 = time.perf_counter()
    subprocess.run(ssh_argv(sshd, "true"), check=True)
    return time.perf_counter() - t0


def baseline_rate(sshd: Sshd, log: str) -> tuple[float, int]:
    argv = ssh_argv(sshd, "cat", log)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    count = 0
    while block := proc.stdout.read1(1 << 20):
        count += block.count(b"\n")
    proc.wait()
    return time.perf_counter() - t0, count


def verify(session: Path, n: int) -> int:
    """Lines missing or out of order in the recorded session (0 when all N arrived in order)."""
    expected = 1
    bad = 0
    with SessionReader(session) as reader:  # a log block's record read as its lines' events
        for event in reader.events():
            if event.kind == "job.line":
                if int(event.payload["text"].split()[1]) != expected:
                    bad += 1
                expected += 1
    return bad + abs(n - (expected - 1))


def main() -> None:
    args = int_options(__doc__.splitlines()[0], lines=500_000)
    if shutil.which("ssh") is None:
        raise SystemExit("the OpenSSH client (ssh) is needed for the baseline")
    with tempfile.TemporaryDirectory(prefix="ssh-stream-bench-") as tmp:
        root = Path(tmp)
        sshd = start_sshd(root / "sshd")
        try:
            c_time, c_count, log, session = asyncio.run(console_rate(sshd, root, args.lines))
            b_time, b_count = baseline_rate(sshd, log)
            setup = setup_time(sshd)
            lost = verify(session, args.lines)
        finally:
            sshd.stop()
    c_rate, b_rate = c_count / c_time, b_count / b_time
    print(f"lines: {args.lines:,} (the same log file for both)")
    print(f"console tail -> recorder : {c_rate:12,.0f} lines/s ({c_time:.2f} s, {c_count:,} lines)")
    print(f"ssh host cat (OpenSSH)   : {b_rate:12,.0f} lines/s ({b_time:.2f} s, {b_count:,} lines)")
    print(f"ratio console/baseline   : {c_rate / b_rate:.3f}")
    print(f"(ssh host true           : {setup:.2f} s of setup inside the baseline's time; the "
          "console's time includes starting its tail helper, not connecting)")
    print(f"lost or out of order     : {lost}")
    print(f"target >= 100,000 lines/s: {'met' if c_rate >= 100_000 and lost == 0 else 'NOT met'}")


if __name__ == "__main__":
    main()

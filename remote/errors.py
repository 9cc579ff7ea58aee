"""Every error the remote layer raises, and the exit code the headless CLI documents for each.

0 ok, 1 a stage/probe/bench failed, 2 usage or config error, 3 connection/auth/host-key error,
4 compat/patch refused, 130 interrupted. A RemoteError's message is shown to the operator as
is; the CLI exits with its `exit_code`. RemoteError is remote/'s one root and the operator's: the
console's (console/errors.py) derives from it, so the CLI and the TUI catch RemoteError alone.
The pipeline's (pipeline/errors.py) cannot (it runs on the box alone), so it keeps the two codes
they share and this module imports them. The box-side probes and patch helper (uploaded alone,
stdlib only) keep theirs in remote/probes/probe_errors.py.

    Exception
    └── RemoteError             exit 1: the operator reads the message as is
        ├── UsageError              exit 2: bad usage or input, nothing was started
        │   ├── ConfigError             a file, a key and what is wrong with it
        │   ├── JobNotFound             no run of that name or id on the box
        │   ├── OutputRefused           an output would replace a file the console did not write
        │   ├── TraceError              a file that is not a Chrome trace
        │   ├── PortInUse               the server's port is taken on the box
        │   ├── ModelMismatch           the bench's model is not the one served
        │   └── ResultFileError         not a bench result file
        ├── ConnectionFailed        exit 3: the box cannot be reached
        │   ├── AuthFailed
        │   ├── HostKeyError            unknown, changed or revoked host key
        │   └── NoServer                nothing answers HTTP at the vLLM URL
        ├── ContainerError          exit 3: the container is missing or not running
        │   └── ContainerConfigError    exit 2: its runtime or name cannot be used as written
        ├── Refused                 exit 4: a compatibility check or a precondition said no
        │   ├── JobLocked               a run of the same name is running
        │   ├── CancelRefused           the run's pid file names a process that is not its job
        │   └── DraftRefused            a draft does not fit its target or the box's vLLM
        ├── StageFailed             exit 1
        │   ├── PipelineFailed          the box runner ended with a failed stage
        │   └── EngineFailed            vLLM's server exited or never answered
        ├── RemoteCommandError      a command on the box exited non-zero
        ├── JobHelperError          the job helper printed something that is not a run record
        ├── NameHeld                a cancelled run's supervisor did not let go of its name
        ├── ProbeFailed             a probe ran without a usable result
        ├── PatchError              the patch helper's answer was not what the patcher needs
        ├── StatsError              the sampler cannot run on the box
        ├── SweepFailed             the all-reduce sweep did not finish
        ├── NoSpeculation           the server has no spec-decode counters
        ├── CountersReset           the server restarted within a bench window
        ├── MetricsMalformed        /metrics is not Prometheus text
        ├── BenchFailed             every request of a bench point failed
        ├── Dropped                 a box command ended with the connection (the job tail retries)
        ├── AnchorError             a patch anchor missing or ambiguous in the box's file (a ValueError too)
        ├── MalformedRecord         a stage record that is not its event (a ValueError too)
        ├── RecordError             a damaged job.lines record in a session (a ValueError too)
        └── PayloadError            a producer's fields do not fit its kind's schema (a TypeError too)
"""

from __future__ import annotations

# 1 and 2 are the box's pipeline's exit codes too (a stage failed; bad config or input): one
# definition, where the pipeline (which cannot import remote) keeps it.
from pipeline.errors import EXIT_FAILED, EXIT_USAGE

EXIT_OK = 0
EXIT_CONNECTION = 3
EXIT_REFUSED = 4
EXIT_INTERRUPTED = 130


class RemoteError(Exception):
    """remote/'s root and the operator's: the message is shown as is, on one line where possible."""

    exit_code = EXIT_FAILED


class UsageError(RemoteError):
    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """Names the file, the key and what is wrong, so the fix is obvious."""

    def __init__(self, file: str, key: str | None, problem: str) -> None:
        self.file = file
        self.key = key
        self.problem = problem
        where = f"{file}: {key}" if key else file
        super().__init__(f"{where}: {problem}")


class JobNotFound(UsageError):
    pass


class OutputRefused(UsageError):
    """A named output that would replace a file the console did not write (exit 2)."""


class TraceError(UsageError):
    """A file that is not a Chrome trace: named, one line, exit 2."""


class PortInUse(UsageError):
    """The server's port is taken on the box (exit code 2): found before an engine start is
    paid for, with the way to choose another port."""


class ModelMismatch(UsageError):
    """The model the operator named is not the one the server serves or reports."""


class ResultFileError(UsageError):
    """A result JSON given to compare/--baseline is missing or not a bench result."""


class ConnectionFailed(RemoteError):
    exit_code = EXIT_CONNECTION


class AuthFailed(ConnectionFailed):
    pass


class HostKeyError(ConnectionFailed):
    """`verdict` ("unknown" | "changed" | "revoked") and the offered key's `fingerprint` let an interactive
    front end (the TUI) offer to trust an unknown key, and only that key; a changed one never."""

    def __init__(self, message: str, *, verdict: str = "", fingerprint: str = "",
                 known_hosts: str = "") -> None:
        super().__init__(message)
        self.verdict = verdict
        self.fingerprint = fingerprint
        self.known_hosts = known_hosts


class NoServer(ConnectionFailed):
    """Nothing answers HTTP at the vLLM URL (server down, wrong port, forward broken)."""


class ContainerError(RemoteError):
    """The container runtime or the named container is missing on the box, or the container
    is not running: the box's state, like a refused connection (exit 3)."""

    exit_code = EXIT_CONNECTION


class ContainerConfigError(ContainerError):
    """The host's runtime or container name cannot be used as written (exit 2)."""

    exit_code = EXIT_USAGE


class Refused(RemoteError):
    """A compatibility check or a patch precondition said no."""

    exit_code = EXIT_REFUSED


class JobLocked(Refused):
    """A run with the same name is running on the box (exit code 4)."""

    def __init__(self, name: str, run_id: str, host: str = "") -> None:
        self.name = name
        self.run_id = run_id
        where = f" on {host}" if host else ""
        super().__init__(f"a run named {name!r} is already running{where} ({run_id or 'unknown id'})"
                         "; cancel it or wait for it to end")


class DraftRefused(Refused):
    """The draft cannot be served on this box (remote/ops/heads.py): one line per mismatch,
    each naming both values (exit code 4); no engine was started."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("\n".join(lines))


class StageFailed(RemoteError):
    exit_code = EXIT_FAILED


class PipelineFailed(StageFailed):
    """`outcome` is the run's remote/pipeline_runner.py RunOutcome, carried for its catcher: this
    module names no type of the layers it sits under (tests/project/test_import_cycles.py)."""

    def __init__(self, message: str, outcome: object) -> None:
        super().__init__(message)
        self.outcome = outcome


class EngineFailed(StageFailed):
    """The server exited or never answered while starting (exit code 1)."""

    def __init__(self, message: str, log_tail: list[str]) -> None:
        self.log_tail = log_tail
        text = message
        if log_tail:
            text += "\nlast log lines:\n  " + "\n  ".join(log_tail)
        super().__init__(text)


class RemoteCommandError(RemoteError):
    def __init__(self, argv: list[str], returncode: int | None, stderr: str) -> None:
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr
        tail = stderr.strip().splitlines()[-1] if stderr.strip() else "no stderr"
        super().__init__(f"{argv[0] if argv else '?'} exited {returncode}: {tail}")


class JobHelperError(RemoteError):
    """The box-side helper printed something that is not a run record."""


class NameHeld(RemoteError):
    """A cancel ended the job, but the run's supervisor did not exit within the wait: the name
    cannot be launched again yet (remote/jobs/helper.py cmd_cancel)."""


class CancelRefused(Refused):
    """A cancel found the run's pid file naming a process that is not the run's job (pid 1, a
    reused pid): nothing was signalled (exit code 4)."""


class ProbeFailed(RemoteError):
    """A probe ran but did not produce a usable result."""


class PatchError(RemoteError):
    """The box answered, but not with what the patcher needs (or the helper said no)."""


class StatsError(RemoteError):
    """The sampler cannot run on the box (not a broken stream: restarting would not help)."""


class SweepFailed(RemoteError):
    """The sweep ran but did not finish (a rank failed, torch missing, timeout)."""


class NoSpeculation(RemoteError):
    """The server answers but exposes no spec-decode counters: it runs without speculation."""


class CountersReset(RemoteError):
    """A counter went backwards or was re-created between two scrapes: the server restarted,
    so the window mixes two servers and its figures would be meaningless."""


class MetricsMalformed(RemoteError):
    """/metrics answered with something that is not Prometheus text."""


class BenchFailed(RemoteError):
    """The load itself failed (every request of a point errored)."""


class Dropped(RemoteError):
    """A command that ended with the connection instead of an exit status."""


class AnchorError(RemoteError, ValueError):
    """An anchor is missing or ambiguous: the file is not what the recipe was written for."""


class MalformedRecord(RemoteError, ValueError):
    """A stage record the console cannot turn into its event (why, in one line)."""


class RecordError(RemoteError, ValueError):
    """A session record that cannot be expanded into events (a damaged job.lines record)."""


class PayloadError(RemoteError, TypeError):
    """A producer sent fields its kind's schema does not accept: a bug in the producer."""

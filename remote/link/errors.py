"""Errors that reach the operator, each with the exit code the headless CLI documents.

0 ok, 1 a stage/probe/bench failed, 2 usage or config error, 3 connection/auth/host-key error,
4 compat/patch refused, 130 interrupted.
"""

from __future__ import annotations

# 1 and 2 are the box's pipeline's exit codes too (a stage failed; bad config or input): one
# definition, where the pipeline (which cannot import remote) keeps it.
from pipeline.errors import EXIT_FAILED, EXIT_USAGE

EXIT_OK = 0
EXIT_CONNECTION = 3
EXIT_REFUSED = 4
EXIT_INTERRUPTED = 130


class ConsoleError(Exception):
    """Base: the message is shown to the operator as is, on one line where possible."""

    exit_code = EXIT_FAILED


class UsageError(ConsoleError):
    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """Names the file, the key and what is wrong, so the fix is obvious."""

    def __init__(self, file: str, key: str | None, problem: str) -> None:
        self.file = file
        self.key = key
        self.problem = problem
        where = f"{file}: {key}" if key else file
        super().__init__(f"{where}: {problem}")


class ConnectionFailed(ConsoleError):
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


class ContainerError(ConsoleError):
    """The container runtime or the named container is missing on the box, or the container
    is not running: the box's state, like a refused connection (exit 3)."""

    exit_code = EXIT_CONNECTION


class ContainerConfigError(ContainerError):
    """The host's runtime or container name cannot be used as written (exit 2)."""

    exit_code = EXIT_USAGE


class RemoteCommandError(ConsoleError):
    def __init__(self, argv: list[str], returncode: int | None, stderr: str) -> None:
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr
        tail = stderr.strip().splitlines()[-1] if stderr.strip() else "no stderr"
        super().__init__(f"{argv[0] if argv else '?'} exited {returncode}: {tail}")


class Refused(ConsoleError):
    """A compatibility check or a patch precondition said no."""

    exit_code = EXIT_REFUSED


class StageFailed(ConsoleError):
    exit_code = EXIT_FAILED

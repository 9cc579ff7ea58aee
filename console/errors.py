"""The errors only the console raises: session files and the TUI. The operator-facing root
(ConsoleError, its exit codes and the rest of the tree) is remote/errors.py, the lowest layer the
console shares with the operations it calls.

    remote.errors.ConsoleError      exit 1
    ├── SessionWriteError               the session file cannot be written
    ├── ReadOnlyReplay                  an action that would drive a box, asked of a replay
    └── remote.errors.UsageError    exit 2
        ├── SessionFormatError          not a session file, or an unsupported version
        └── SessionPathError            the session file cannot be created where asked
    ValueError
    └── BadLine                     a session line that is not an event (the reader warns)
    Exception
    └── FrameError                  damaged zstd data (the reader says which session)
"""

from __future__ import annotations

from remote.errors import ConsoleError, UsageError


class SessionWriteError(ConsoleError):
    pass


class ReadOnlyReplay(ConsoleError):
    """Actions that would drive the box are refused while replaying a session."""


class SessionFormatError(UsageError):
    """Not a session file (or an unsupported version): a one-line message, exit code 2."""


class SessionPathError(UsageError):
    """The session file cannot be created where asked: a one-line message, exit code 2."""


class BadLine(ValueError):
    pass


class FrameError(Exception):
    pass

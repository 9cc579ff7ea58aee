"""The console's errors: session files and the TUI. ConsoleError is the console's one root; it
derives from remote/'s RemoteError (remote/errors.py: the operator-facing root, its exit codes and
the rest of remote's tree), the lowest layer the console shares with the operations it calls, so
the CLI and the TUI catch both as RemoteError.

    remote.errors.RemoteError       exit 1
    └── ConsoleError                exit 1: the console's root
        ├── SessionWriteError           the session file cannot be written
        ├── ReadOnlyReplay              an action that would drive a box, asked of a replay
        ├── SessionFormatError      exit 2 (a UsageError too): not a session file, or a newer one
        ├── SessionPathError        exit 2 (a UsageError too): the session file cannot be made there
        ├── BadLine                     a session line that is not an event (also a ValueError)
        └── FrameError                  damaged zstd data (the reader says which session)
"""

from __future__ import annotations

from remote.errors import RemoteError, UsageError


class ConsoleError(RemoteError):
    pass


class SessionWriteError(ConsoleError):
    pass


class ReadOnlyReplay(ConsoleError):
    """Actions that would drive the box are refused while replaying a session."""


class SessionFormatError(ConsoleError, UsageError):
    """Not a session file (or an unsupported version): a one-line message, exit code 2."""


class SessionPathError(ConsoleError, UsageError):
    """The session file cannot be created where asked: a one-line message, exit code 2."""


class BadLine(ConsoleError, ValueError):
    pass


class FrameError(ConsoleError):
    pass

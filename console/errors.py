"""The console's errors: session files and the TUI, under its one root, ConsoleError, which derives
from remote/errors.py's RemoteError (the operator's root, with the exit codes): the CLI and the
TUI catch both as RemoteError.

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

"""Errors a stage reports to the operator as one line, with the exit code the console expects.

The pipeline cannot import remote/errors.py (it runs on the box alone), so the two codes they
share are defined here and remote/errors.py imports them: 2 for bad config or input (nothing
was started), 1 for a stage that failed.

    Exception
    └── PipelineError           exit 1: a stage failed
        ├── ServedError             the evaluate stage's vLLM server is unreachable or not speculating
        ├── RequestRefused      one regeneration request refused or timed out: skipped, never fatal
        ├── Unreachable         exit 3: shard-fetch could not connect to the shard box at all
        └── ConfigInvalid       exit 2: bad config or input, found before any work started
            ├── NotEnoughDisk       the stage's outputs would not fit on the disk
            ├── TargetTooBig        the target model cannot be loaded here
            └── CopyRefused         a box-to-box copy's bad input (port in use, wrong token, no shard)
"""

from __future__ import annotations

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3  # shard-fetch could not connect at all: the console falls back to its refusal


class PipelineError(Exception):
    exit_code = EXIT_FAILED


class ServedError(PipelineError):
    """The server is unreachable, not speculating, or its counters went backwards."""


class RequestRefused(PipelineError):
    """A vLLM server refused one regeneration request (HTTP 4xx/5xx) or it timed out: the
    conversation is skipped with `reason` and the run goes on (pipeline/regenerate.py)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unreachable(PipelineError):
    exit_code = EXIT_UNREACHABLE


class ConfigInvalid(PipelineError):
    """Bad config or input, found before any work started."""

    exit_code = EXIT_USAGE

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}" if where else problem)


class NotEnoughDisk(ConfigInvalid):
    pass


class TargetTooBig(ConfigInvalid):
    """The target cannot be loaded here; nothing was started."""


class CopyRefused(ConfigInvalid):
    """Bad input to a copy (a port in use, a wrong token, no shard there): nothing was copied."""

    def __init__(self, problem: str) -> None:
        super().__init__("", problem)

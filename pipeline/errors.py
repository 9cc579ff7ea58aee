"""Errors a stage reports to the operator as one line, with the exit code the console expects.

The pipeline cannot import remote/errors.py (it runs on the box alone), so the two codes they
share are defined here and remote/errors.py imports them: 2 for bad config or input (nothing
was started), 1 for a stage that failed.

    Exception
    └── PipelineError           exit 1: a stage failed
        ├── ServedError             the evaluate stage's vLLM server is unreachable or not speculating
        └── ConfigInvalid       exit 2: bad config or input, found before any work started
            ├── NotEnoughDisk       the stage's outputs would not fit on the disk
            └── TargetTooBig        the target model cannot be loaded here
"""

from __future__ import annotations

EXIT_FAILED = 1
EXIT_USAGE = 2


class PipelineError(Exception):
    exit_code = EXIT_FAILED


class ServedError(PipelineError):
    """The server is unreachable, not speculating, or its counters went backwards."""


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

"""Errors a stage reports to the operator as one line, with the exit code the console expects.

The pipeline cannot import remote.link.errors (it runs on the box alone), so the two codes they
share are defined here and remote.link.errors imports them: 2 for bad config or input (nothing
was started), 1 for a stage that failed.
"""

from __future__ import annotations

EXIT_FAILED = 1
EXIT_USAGE = 2


class PipelineError(Exception):
    exit_code = EXIT_FAILED


class ConfigInvalid(PipelineError):
    """Bad config or input, found before any work started."""

    exit_code = EXIT_USAGE

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}" if where else problem)


class NotEnoughDisk(ConfigInvalid):
    pass

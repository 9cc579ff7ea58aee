"""The ways a benchmark can fail that the operator must be told about in one line."""

from __future__ import annotations

from remote.link.errors import ConnectionFailed, ConsoleError, UsageError


class NoServer(ConnectionFailed):
    """Nothing answers HTTP at the vLLM URL (server down, wrong port, forward broken)."""


class NoSpeculation(ConsoleError):
    """The server answers but exposes no spec-decode counters: it runs without speculation."""


class CountersReset(ConsoleError):
    """A counter went backwards or was re-created between two scrapes: the server restarted,
    so the window mixes two servers and its figures would be meaningless."""


class ModelMismatch(UsageError):
    """The model the operator named is not the one the server serves or reports."""


class MetricsMalformed(ConsoleError):
    """/metrics answered with something that is not Prometheus text."""


class BenchFailed(ConsoleError):
    """The load itself failed (every request of a point errored)."""


class ResultFileError(UsageError):
    """A result JSON given to compare/--baseline is missing or not a bench result."""

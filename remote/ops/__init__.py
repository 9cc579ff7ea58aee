"""The operations layer: every action an operator can take, once, for the CLI, the TUI and tests.

An operation takes a connected transport, the host's config and the event bus, does the work
through the remote modules, and reports by publishing events (and by its return value or a
RemoteError with the documented exit code). It never prints and never imports Textual: the
headless commands (console/commands/*) print what the events say, the TUI folds them into its
state (console/tui/controller.py's LiveController calls these functions). Which
operation lives where: docs/architecture.md, "Where an action goes".

The front ends reach the runners below these (StatsStream, run_sweep, capture, ServeRunner, ...)
only through here: tests/project/test_layering.py keeps it so.
"""

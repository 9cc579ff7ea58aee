"""The operations layer: every action an operator can take, once, for the CLI, the TUI and tests.

An operation takes a connected transport, the host's config and the event bus, does the work
through the remote modules, and reports by publishing events (and by its return value or a
ConsoleError with the documented exit code). It never prints and never imports Textual: the
headless commands (console/commands/*) print what the events say, the TUI folds them into its
state (console/tui/wiring.py adapts the controller's calls to these functions).

    connect              console/context.py Context.transport, console/tui/controller.py
                         (remote.link.connect.make_transport: one transport per host)
    probe, compat        remote/ops/probes.py
    patch plan/apply/    remote/ops/patch.py (apply checks the plan the operator was shown)
      verify/rollback
    run/resume/cancel,   remote/ops/pipeline.py
      reattach
    stats                remote/ops/stats.py (the stream is the operation)
    allreduce            remote/ops/allreduce.py (sweep, trace, capture)
    bench                remote/ops/bench.py (run, compare, watch)
    serve                remote/ops/serve.py (start, stop, status; run --serve's closing step)

The front ends reach the runners below these (StatsStream, run_sweep, capture, ServeRunner, ...)
only through here: tests/project/test_layering.py keeps it so.
"""

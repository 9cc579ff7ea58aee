"""Domain layer of the console: hosts, transports, jobs, probes, patches, stats, bench.

Nothing here imports Textual, so the headless CLI, the TUI and the tests share one core.
"""

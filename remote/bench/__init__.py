"""Acceptance-rate and speedup benchmarks against the box's vLLM server.

A head is worth deploying only if it is accepted often enough to beat the baseline at the
concurrency the service runs at; this package measures exactly that, with vLLM's own counters
(docs/design.md §2.7), through a port forward so no port is opened on the box.
"""

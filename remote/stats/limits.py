"""The stats stream's limits that `console stats --help` prints: a module with no imports, so
building the parser does not load the stream (asyncio, the SSH transport, msgspec events)."""

# The sampler on the box refuses a shorter interval (remote/probes/sampler.py holds the same
# figure: a probe is stdlib-only and cannot import this module).
MIN_INTERVAL = 0.1

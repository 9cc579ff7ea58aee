"""One module per stage; each exposes `run(ctx) -> (outputs, summary)` (see pipeline.runner)."""

"""The serve jobs' roles, which `console serve stop|status --role` offers, and the drafts a
server can be given (`console serve start --draft`): a module with no imports, so building
that parser does not load the server runner (httpx, asyncio, the SSH transport).

DRAFTS is the box side's list (pipeline/serve.py DRAFTS), kept here too so the console's
--help needs nothing else; any other --draft value is a head directory on the box.
tests/remote/serving/test_serve_units.py checks that both lists agree."""

ROLES = ("speculative", "baseline")
DRAFTS = ("pipeline", "none", "ngram")

"""The serve jobs' roles, which `console serve stop|status --role` offers: a module with no
imports, so building that parser does not load the server runner (httpx, asyncio, the SSH
transport)."""

ROLES = ("speculative", "baseline")

"""The shareable HTML report of a recorded session (console report)."""

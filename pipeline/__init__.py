"""EAGLE-3 pipeline stages. Runs on the box with the container's own Python and ML stack:
never imports `console` or `remote`."""

"""Probe scripts uploaded to the box and run with its Python (>= 3.8, stdlib only).

They are read as files and uploaded; nothing here imports `console` or `remote`.
"""

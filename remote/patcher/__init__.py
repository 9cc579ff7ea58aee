"""Worker patcher: known fixes to speculators files inside the deployed container.

recipes (the fixes, as data) · plan (what a file should become, as a diff) · runner (over a
Transport, as events). The file operations themselves run on the box:
remote/probes/patch_helper.py.
"""

"""Worker patcher: known fixes to speculators files inside the deployed container.

recipes (the fixes, as data) · plan (what a file should become, as a diff) · runner (over a
Transport, as events). The file operations themselves run on the box:
remote/probes/patch_helper.py (atomic replace, backup `<file>.eagle3-orig-<sha256>` next to the
target, compile check, directory lock; one apply of several files is all-or-nothing through a
journal `.eagle3-patch-journal` that the next verify / apply / rollback completes; rollback refuses
a file edited after apply unless forced, which keeps the edit as `<file>.eagle3-edited-<sha256[:12]>`).

Events, one per target file (keys beyond the brief's are extra, none renamed):
- patch.planned {file, rel, version, recipes: [{name, applies, reason, in_effect}], diff,
  sha256, original_sha256, original_known, refused (str|None), forceable, notes, summary}
- patch.applied {file, rel, recipes: [{name, in_effect}], sha256, changed, backup?,
  backup_sha256?, summary}
- patch.verified {file, rel, recipes: [{name, in_effect}], sha256, original, original_known,
  has_backup, consistent, summary}
- patch.rolled_back {file, rel, recipes: [{name, in_effect}], sha256, changed, backup,
  kept_edited?, summary}
Refusals raise remote.errors.Refused (exit 4) and, from the CLI, become console.error events.
"""

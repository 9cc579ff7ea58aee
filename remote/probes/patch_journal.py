"""The patch helper's all-or-nothing writes over several files: the checks of one apply or
restore before anything is written, the writes themselves, and the journal that records every
file's planned and final content first, so a run killed between two files is completed by the
next `recover` (remote/probes/patch_helper.py says why).

Box side: stdlib only, Python >= 3.8, uploaded beside the patch helper.
"""

import base64
import json
import os

from . import patch_files
from .probe_errors import HelperError


def check_apply(entry):
    """Everything that could refuse an apply of one file, before anything is written. Returns
    None when the file already holds the new content, else the (path, new, backup) to write."""
    path = entry["file"]
    new = base64.b64decode(entry["content_b64"])
    expect = entry["expect_sha256"]
    original_sha = entry["original_sha256"]
    patch_files.clean_stale_tmp(path)
    current_sha = patch_files.sha(patch_files.read(path))
    check_planned(path, current_sha, expect)
    if patch_files.sha(new) == current_sha:
        return None
    patch_files.compile_check(new, path)
    backup = patch_files.good_backup(path)
    if backup is None:
        if current_sha != original_sha:
            raise HelperError(
                "no backup of the original of %s exists and the file is not that original "
                "(sha256 %s, original %s): refusing to replace it" % (path, current_sha,
                                                                       original_sha)
            )
    elif backup[1] != original_sha:
        raise HelperError(
            "the backup of %s holds sha256 %s, not the original %s this plan assumed"
            % (path, backup[1], original_sha)
        )
    return path, new, backup


def check_planned(path, current_sha, expect):
    if current_sha != expect:
        raise HelperError("%s changed since it was planned (sha256 %s, planned against %s): "
                          "plan again" % (path, current_sha, expect))


_APPLY_KEYS = ("file", "expect_sha256", "original_sha256", "content_b64")


def apply_entry(entry):
    """The journal entry of one apply: what `complete` needs to finish it."""
    return {k: entry[k] for k in _APPLY_KEYS}


def write_apply(path, new, backup, original_sha):
    """The writes of one checked apply: the backup first (if none yet), then the target."""
    mode = os.stat(path).st_mode & 0o7777  # kept by the backup and by the new content
    if backup is None:
        backup = (patch_files.backup_path(path, original_sha), original_sha)
        patch_files.write_atomic(backup[0], patch_files.read(path), mode)
        patch_files.step("backed-up")
    patch_files.write_atomic(path, new, mode)
    patch_files.step("replaced")
    return {
        "file": path,
        "changed": True,
        "sha256": patch_files.sha(new),
        "backup": backup[0],
        "backup_sha256": backup[1],
        "warning": patch_files.refresh_bytecode(path),
    }


def journal_path(paths):
    return os.path.join(os.path.dirname(min(paths)) or ".", patch_files.JOURNAL_NAME)


def is_restore(entry):
    return entry.get("action") == patch_files.RESTORE


def read_journal(path):
    """(kind, entries) of a journal: kind "apply" (also every journal written before rollbacks
    were journalled) or "rollback"."""
    try:
        data = json.loads(patch_files.read(path).decode("utf-8"))
        files = data["files"]
        kind = data.get("kind", "apply")
        for f in files:
            if not isinstance(f, dict):
                raise ValueError("an entry is not an object")
            keys = ("file", "expect_sha256", "backup_sha256") if is_restore(f) else _APPLY_KEYS
            if not all(k in f for k in keys):
                raise ValueError("an entry lacks one of %s" % ", ".join(keys))
        if kind not in ("apply", "rollback"):
            raise ValueError("unknown kind %r" % (kind,))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise HelperError("patch journal %s is unreadable (%s): remove it by hand after "
                          "checking its files" % (path, exc)) from None
    return kind, files


def file_sha(path):
    return patch_files.sha(patch_files.read(path)) if os.path.isfile(path) else None


def check_restore(path, backup_sha):
    """The backup a journalled restore puts back: there, intact, and the one it planned."""
    backup = patch_files.good_backup(path)
    if backup is None or backup[1] != backup_sha:
        raise HelperError(
            "the backup of %s holding sha256 %s is gone or replaced (%s): cannot restore it"
            % (path, backup_sha, backup[0] if backup else "no backup"))
    return backup


def write_restore(path, backup, keep_edited):
    """The writes of one checked restore: the edit kept beside it (if asked and edited), the
    original put back, the backup dropped last (so a kill before that loses nothing)."""
    bpath, bsha = backup
    original = patch_files.read(bpath)
    current = patch_files.read(path) if os.path.isfile(path) else None
    current_sha = patch_files.sha(current) if current is not None else None
    kept = None
    if keep_edited and current is not None and current_sha != bsha:
        kept = path + patch_files.EDITED_TAG + current_sha[:12]
        patch_files.write_atomic(kept, current, os.stat(path).st_mode & 0o7777)
        patch_files.step("kept-edited")
    changed = current_sha != bsha
    if changed:
        patch_files.write_atomic(path, original, os.stat(bpath).st_mode & 0o7777)
        patch_files.step("restored")
    warning = patch_files.refresh_bytecode(path)
    os.unlink(bpath)
    patch_files.fsync_dir(os.path.dirname(path) or ".")
    return {"file": path, "changed": changed, "sha256": bsha, "backup": bpath,
            "warning": warning, "kept_edited": kept}


def complete(journal, files):
    """Finish an interrupted apply or rollback: every file must be either as planned or already
    as the journal says it ends. All checked before the first write, as in the run itself."""
    todo = []
    for f in files:
        path = f["file"]
        current_sha = file_sha(path)
        if is_restore(f):
            end_sha = f["backup_sha256"]
            if current_sha == end_sha:
                if patch_files.list_backups(path):  # restored, killed before its backup was dropped
                    todo.append((f, check_restore(path, end_sha)))
                continue
        else:
            end_sha = patch_files.sha(base64.b64decode(f["content_b64"]))
            if current_sha == end_sha:
                continue
        if current_sha != f["expect_sha256"]:
            raise HelperError(
                "an interrupted patch (journal %s) cannot be completed: %s is neither as "
                "planned (sha256 %s) nor as it should end (%s) but %s; fix it by hand, then "
                "remove the journal" % (journal, path, f["expect_sha256"], end_sha, current_sha))
        todo.append((f, check_restore(path, end_sha) if is_restore(f) else check_apply(f)))
    done = []
    for f, c in todo:
        if is_restore(f) or c is not None:
            write_entry(f, c)
            done.append(f["file"])
    os.unlink(journal)
    patch_files.fsync_dir(os.path.dirname(journal) or ".")
    return done


def recover_pending(journal):
    patch_files.clean_stale_tmp(journal)
    if not os.path.exists(journal):
        return []
    return complete(journal, read_journal(journal)[1])


def write_entry(entry, checked):
    """The writes of one checked journal entry: a restore, or an apply."""
    if is_restore(entry):
        return write_restore(entry["file"], checked, bool(entry.get("keep_edited")))
    return write_apply(checked[0], checked[1], checked[2], entry["original_sha256"])


def run_journalled(journal, kind, pending):
    """Write the journal of `pending` entries, do each entry's writes, drop the journal."""
    answers = []
    if pending:
        record = {"version": 1, "kind": kind, "files": [entry for entry, _ in pending]}
        patch_files.write_atomic(journal, json.dumps(record).encode("utf-8"), 0o600)
        patch_files.step("journal-written")
        for entry, checked in pending:
            answers.append(write_entry(entry, checked))
        os.unlink(journal)
        patch_files.fsync_dir(os.path.dirname(journal) or ".")
        patch_files.step("journal-removed")
    return answers

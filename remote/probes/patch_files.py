"""The patch helper's file operations (remote/probes/patch_helper.py): atomic replace through a
fsynced temp file, the backup of the original kept beside the target, the compile check and the
bytecode refresh, and the step points the crash-safety test kills between.

Box side: stdlib only, Python >= 3.8, uploaded beside the patch helper.
"""

import contextlib
import hashlib
import os
import py_compile
import sys
import time

from .probe_errors import HelperError

BACKUP_TAG = ".eagle3-orig-"
TMP_TAG = ".eagle3-tmp-"
JOURNAL_NAME = ".eagle3-patch-journal"
EDITED_TAG = ".eagle3-edited-"
RESTORE = "restore"  # a journal entry that puts the backup back (else: write content_b64)


def sha(data):
    return hashlib.sha256(data).hexdigest()


def read(path):
    with open(path, "rb") as fh:
        return fh.read()


def step(name):
    """A point between two file operations. With EAGLE3_PATCH_STEP_DELAY (seconds) set, the step
    is announced on stderr and the gap stretched, so the crash-safety test can land its SIGKILL
    between any two steps, not only at startup."""
    delay = os.environ.get("EAGLE3_PATCH_STEP_DELAY")
    if delay:
        sys.stderr.write("step %s\n" % name)
        sys.stderr.flush()
        time.sleep(float(delay))


def fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path, data, mode=None):
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, "." + os.path.basename(path) + TMP_TAG + str(os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        step("tmp-written")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def clean_stale_tmp(path):
    """Temp files a killed run left behind; they never replaced anything, so they can go."""
    directory = os.path.dirname(path) or "."
    prefix = "." + os.path.basename(path)  # its own temp files and those of its backup
    journal_tmp = "." + JOURNAL_NAME + TMP_TAG  # a journal never renamed into place
    for name in os.listdir(directory):
        if (name.startswith(prefix) and TMP_TAG in name) or name.startswith(journal_tmp):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


def list_backups(path):
    """[(backup path, sha256 in its name, sha256 of its content)] for this target."""
    directory = os.path.dirname(path) or "."
    prefix = os.path.basename(path) + BACKUP_TAG
    found = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(prefix):
            full = os.path.join(directory, name)
            found.append((full, name[len(prefix):], sha(read(full))))
    return found


def backup_path(path, sha):
    return path + BACKUP_TAG + sha


def good_backup(path):
    """The one intact backup of `path`, or None; several or a corrupt one is an error."""
    backups = list_backups(path)
    if not backups:
        return None
    if len(backups) > 1:
        raise HelperError(
            "several backups of %s exist (%s): remove the wrong ones by hand"
            % (path, ", ".join(os.path.basename(b[0]) for b in backups))
        )
    bpath, named, actual = backups[0]
    if named != actual:
        raise HelperError(
            "backup %s is corrupt: its content hashes to %s, not the %s in its name"
            % (bpath, actual, named)
        )
    return bpath, named


def compile_check(data, path):
    try:
        compile(data, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        raise HelperError("new content of %s does not compile: %s" % (path, exc)) from None


def refresh_bytecode(path):
    try:
        py_compile.compile(path, doraise=True)
        return None
    except (py_compile.PyCompileError, OSError) as exc:
        return "bytecode not refreshed: %s" % exc

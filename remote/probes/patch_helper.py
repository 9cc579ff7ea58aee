"""File operations of the worker patcher, run on the box with the container's own python.

The laptop decides *what* a file should contain (recipes, diffs); this script only reads and
replaces files where they live, so that a dropped SSH connection or a killed console can never
leave a half-written module in site-packages:

- every write goes to a temp file in the target's directory, is fsynced, then os.replace()d over
  the target (atomic on POSIX), and the directory is fsynced;
- the original is kept next to the target as `<name>.eagle3-orig-<sha256>` before the target is
  first replaced, and removed only after a rollback has put it back, so a rollback is possible
  from every state a crash can leave;
- new content is compiled before it replaces anything, and the target's bytecode is refreshed
  after;
- one apply of several files is all-or-nothing: every check runs before anything is written,
  then a journal (`.eagle3-patch-journal` in the first target's directory) records every
  file's planned and new content before the first file is touched, and is removed after the
  last. A run killed in between leaves the journal; the next `recover` (the console runs it
  before verify, apply and rollback) completes the apply from it, so no later command ever sees
  one file patched and its sibling original;
- one rollback of several files goes through the same journal (its entries say "restore" the
  backup, or "write" a text with fewer recipes), so a run killed between two files is completed
  by the next `recover` too: no command after it sees one file rolled back and its sibling
  still patched;
- a rollback of a file that is neither the planned text nor the original refuses unless told
  to keep the edit, which it then copies to `<name>.eagle3-edited-<sha256[:12]>` first.

Protocol: one JSON request on stdin, one JSON object on stdout ({"ok": true, ...} or
{"ok": false, "error": "..."}); exit status 0 either way unless the script itself broke.
Stdlib only, Python >= 3.8; never imports `console` or `remote`.
"""

import ast
import base64
import fcntl
import hashlib
import json
import os
import py_compile
import sys
import time

BACKUP_TAG = ".eagle3-orig-"
TMP_TAG = ".eagle3-tmp-"
JOURNAL_NAME = ".eagle3-patch-journal"
EDITED_TAG = ".eagle3-edited-"
RESTORE = "restore"  # a journal entry that puts the backup back (else: write content_b64)


class HelperError(Exception):
    pass


def _sha(data):
    return hashlib.sha256(data).hexdigest()


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


def _step(name):
    """A point between two file operations. With EAGLE3_PATCH_STEP_DELAY (seconds) set, the step
    is announced on stderr and the gap stretched, so the crash-safety test can land its SIGKILL
    between any two steps, not only at startup."""
    delay = os.environ.get("EAGLE3_PATCH_STEP_DELAY")
    if delay:
        sys.stderr.write("step %s\n" % name)
        sys.stderr.flush()
        time.sleep(float(delay))


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomic(path, data, mode=None):
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
        _step("tmp-written")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def _clean_stale_tmp(path):
    """Temp files a killed run left behind; they never replaced anything, so they can go."""
    directory = os.path.dirname(path) or "."
    prefix = "." + os.path.basename(path)  # its own temp files and those of its backup
    journal_tmp = "." + JOURNAL_NAME + TMP_TAG  # a journal never renamed into place
    removed = []
    for name in os.listdir(directory):
        if (name.startswith(prefix) and TMP_TAG in name) or name.startswith(journal_tmp):
            try:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
            except OSError:
                pass
    return removed


def _backups(path):
    """[(backup path, sha256 in its name, sha256 of its content)] for this target."""
    directory = os.path.dirname(path) or "."
    prefix = os.path.basename(path) + BACKUP_TAG
    found = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(prefix):
            full = os.path.join(directory, name)
            found.append((full, name[len(prefix):], _sha(_read(full))))
    return found


def _backup_path(path, sha):
    return path + BACKUP_TAG + sha


def _good_backup(path):
    """The one intact backup of `path`, or None; several or a corrupt one is an error."""
    backups = _backups(path)
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


def _compile_check(data, path):
    try:
        compile(data, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        raise HelperError("new content of %s does not compile: %s" % (path, exc)) from None


def _refresh_bytecode(path):
    try:
        py_compile.compile(path, doraise=True)
        return None
    except (py_compile.PyCompileError, OSError) as exc:
        return "bytecode not refreshed: %s" % exc


def _dist_version(package, site_packages):
    try:
        import importlib.metadata as md
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        if site_packages:
            for dist in md.distributions(path=[site_packages]):
                name = (dist.metadata.get("Name") or "").lower().replace("_", "-")
                if name == package.lower().replace("_", "-"):
                    return dist.version
            return None
        return md.version(package)
    except Exception:
        return None


def _package_dir(package, site_packages):
    """Where the package lives, found without importing it (its __init__ may pull in vLLM)."""
    if site_packages:
        candidate = os.path.join(site_packages, package)
        return candidate if os.path.isdir(candidate) else None
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))


def _scheduler_is_encoder_decoder(vllm_dir):
    """How vLLM's SchedulerConfig takes `is_encoder_decoder`, read from its source with ast:
    "required" (a field or InitVar without default), "optional", "absent" or "unknown"."""
    candidates = [
        os.path.join(vllm_dir, "config", "scheduler.py"),
        os.path.join(vllm_dir, "config", "__init__.py"),
        os.path.join(vllm_dir, "config.py"),
    ]
    for source in candidates:
        if not os.path.isfile(source):
            continue
        try:
            tree = ast.parse(_read(source).decode("utf-8"), source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == "SchedulerConfig":
                for item in node.body:
                    if (
                        isinstance(item, ast.AnnAssign)
                        and isinstance(item.target, ast.Name)
                        and item.target.id == "is_encoder_decoder"
                    ):
                        state = "required" if item.value is None else "optional"
                        return {"state": state, "source": source, "line": item.lineno}
                return {"state": "absent", "source": source, "line": node.lineno}
    return {"state": "unknown", "source": None, "line": None}


def op_inspect(req):
    package = req["package"]
    site_packages = req.get("site_packages")
    pkg_dir = _package_dir(package, site_packages)
    out = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "package": package,
        "package_dir": pkg_dir,
        "version": _dist_version(package, site_packages) if pkg_dir else None,
        "files": {},
    }
    if pkg_dir is not None:
        for rel in req.get("files", []):
            path = os.path.join(pkg_dir, *rel.split("/"))
            entry = {"path": path, "exists": os.path.isfile(path)}
            if entry["exists"]:
                data = _read(path)
                entry["sha256"] = _sha(data)
                entry["content_b64"] = base64.b64encode(data).decode("ascii")
                backups = []
                for bpath, named, actual in _backups(path):
                    b = {"path": bpath, "sha256_named": named, "sha256": actual}
                    if named == actual:
                        b["content_b64"] = base64.b64encode(_read(bpath)).decode("ascii")
                    backups.append(b)
                entry["backups"] = backups
            out["files"][rel] = entry
    if pkg_dir is not None:
        paths = [os.path.join(pkg_dir, *rel.split("/")) for rel in req.get("files", [])]
        journal = journal_path(paths) if paths else None
        out["journal"] = journal
        out["journal_pending"] = bool(journal and os.path.exists(journal))
        if out["journal_pending"]:
            try:
                out["journal_kind"] = _read_journal(journal)[0]
            except HelperError:
                out["journal_kind"] = None
    vllm_dir = _package_dir("vllm", site_packages)
    vllm = {"found": vllm_dir is not None, "dir": vllm_dir}
    if vllm_dir is not None:
        vllm["version"] = _dist_version("vllm", site_packages)
        vllm["scheduler_is_encoder_decoder"] = _scheduler_is_encoder_decoder(vllm_dir)
    out["vllm"] = vllm
    return out


def _check_apply(entry):
    """Everything that could refuse an apply of one file, before anything is written. Returns
    None when the file already holds the new content, else the (path, new, backup) to write."""
    path = entry["file"]
    new = base64.b64decode(entry["content_b64"])
    expect = entry["expect_sha256"]
    original_sha = entry["original_sha256"]
    _clean_stale_tmp(path)
    current_sha = _sha(_read(path))
    if current_sha != expect:
        raise HelperError(
            "%s changed since it was planned (sha256 %s, planned against %s): plan again"
            % (path, current_sha, expect)
        )
    if _sha(new) == current_sha:
        return None
    _compile_check(new, path)
    backup = _good_backup(path)
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


def _write_apply(path, new, backup, original_sha):
    """The writes of one checked apply: the backup first (if none yet), then the target."""
    if backup is None:
        current = _read(path)
        mode = os.stat(path).st_mode & 0o7777
        _write_atomic(_backup_path(path, original_sha), current, mode)
        _step("backed-up")
        backup = (_backup_path(path, original_sha), original_sha)
    mode = os.stat(path).st_mode & 0o7777
    _write_atomic(path, new, mode)
    _step("replaced")
    return {
        "file": path,
        "changed": True,
        "sha256": _sha(new),
        "backup": backup[0],
        "backup_sha256": backup[1],
        "warning": _refresh_bytecode(path),
    }


def op_apply(req):
    """Replace `file` with `content_b64`, keeping the original (sha `original_sha256`) first."""
    stale = _clean_stale_tmp(req["file"])
    _step("checked")
    checked = _check_apply(req)
    if checked is None:
        return {"file": req["file"], "changed": False, "sha256": req["expect_sha256"],
                "stale_removed": stale}
    _step("compiled")
    out = _write_apply(checked[0], checked[1], checked[2], req["original_sha256"])
    out["stale_removed"] = stale
    return out


def journal_path(paths):
    return os.path.join(os.path.dirname(min(paths)) or ".", JOURNAL_NAME)


def _is_restore(entry):
    return entry.get("action") == RESTORE


def _read_journal(path):
    """(kind, entries) of a journal: kind "apply" (also every journal written before rollbacks
    were journalled) or "rollback"."""
    try:
        data = json.loads(_read(path).decode("utf-8"))
        files = data["files"]
        kind = data.get("kind", "apply")
        for f in files:
            if not isinstance(f, dict):
                raise ValueError("an entry is not an object")
            keys = (("file", "expect_sha256", "backup_sha256") if _is_restore(f) else
                    ("file", "expect_sha256", "original_sha256", "content_b64"))
            if not all(k in f for k in keys):
                raise ValueError("an entry lacks one of %s" % ", ".join(keys))
        if kind not in ("apply", "rollback"):
            raise ValueError("unknown kind %r" % (kind,))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise HelperError("patch journal %s is unreadable (%s): remove it by hand after "
                          "checking its files" % (path, exc)) from None
    return kind, files


def _current_sha(path):
    return _sha(_read(path)) if os.path.isfile(path) else None


def _check_restore(path, backup_sha):
    """The backup a journalled restore puts back: there, intact, and the one it planned."""
    backup = _good_backup(path)
    if backup is None or backup[1] != backup_sha:
        raise HelperError(
            "the backup of %s holding sha256 %s is gone or replaced (%s): cannot restore it"
            % (path, backup_sha, backup[0] if backup else "no backup"))
    return backup


def _write_restore(path, backup, keep_edited):
    """The writes of one checked restore: the edit kept beside it (if asked and edited), the
    original put back, the backup dropped last (so a kill before that loses nothing)."""
    bpath, bsha = backup
    original = _read(bpath)
    current = _read(path) if os.path.isfile(path) else None
    current_sha = _sha(current) if current is not None else None
    kept = None
    if keep_edited and current is not None and current_sha != bsha:
        kept = path + EDITED_TAG + current_sha[:12]
        _write_atomic(kept, current, os.stat(path).st_mode & 0o7777)
        _step("kept-edited")
    changed = current_sha != bsha
    if changed:
        _write_atomic(path, original, os.stat(bpath).st_mode & 0o7777)
        _step("restored")
    warning = _refresh_bytecode(path)
    os.unlink(bpath)
    _fsync_dir(os.path.dirname(path) or ".")
    return {"file": path, "changed": changed, "sha256": bsha, "backup": bpath,
            "warning": warning, "kept_edited": kept}


def _complete(journal, files):
    """Finish an interrupted apply or rollback: every file must be either as planned or already
    as the journal says it ends. All checked before the first write, as in the run itself."""
    todo = []
    for f in files:
        path = f["file"]
        current_sha = _current_sha(path)
        if _is_restore(f):
            end_sha = f["backup_sha256"]
            if current_sha == end_sha:
                if _backups(path):  # restored, killed before its backup was dropped
                    todo.append((f, _check_restore(path, end_sha)))
                continue
        else:
            end_sha = _sha(base64.b64decode(f["content_b64"]))
            if current_sha == end_sha:
                continue
        if current_sha != f["expect_sha256"]:
            raise HelperError(
                "an interrupted patch (journal %s) cannot be completed: %s is neither as "
                "planned (sha256 %s) nor as it should end (%s) but %s; fix it by hand, then "
                "remove the journal" % (journal, path, f["expect_sha256"], end_sha, current_sha))
        todo.append((f, _check_restore(path, end_sha) if _is_restore(f) else _check_apply(f)))
    done = []
    for f, c in todo:
        if _is_restore(f):
            _write_restore(f["file"], c, bool(f.get("keep_edited")))
            done.append(f["file"])
        elif c is not None:
            _write_apply(c[0], c[1], c[2], f["original_sha256"])
            done.append(f["file"])
    os.unlink(journal)
    _fsync_dir(os.path.dirname(journal) or ".")
    return done


def _recover_pending(journal):
    _clean_stale_tmp(journal)
    if not os.path.exists(journal):
        return []
    return _complete(journal, _read_journal(journal)[1])


def _run_journalled(journal, kind, pending, write):
    """Write the journal of `pending` entries, do each entry's writes, drop the journal."""
    answers = []
    if pending:
        record = {"version": 1, "kind": kind, "files": [entry for entry, _ in pending]}
        _write_atomic(journal, json.dumps(record).encode("utf-8"), 0o600)
        _step("journal-written")
        for entry, checked in pending:
            answers.append(write(entry, checked))
        os.unlink(journal)
        _fsync_dir(os.path.dirname(journal) or ".")
        _step("journal-removed")
    return answers


def op_apply_all(req):
    """Several files as one: all checked, journalled, written, journal dropped."""
    entries = req["files"]
    if not entries:
        return {"files": [], "recovered": []}
    journal = journal_path([e["file"] for e in entries])
    recovered = _recover_pending(journal)
    checked = [(e, _check_apply(e)) for e in entries]
    _step("checked")
    pending = [({k: e[k] for k in ("file", "expect_sha256", "original_sha256", "content_b64")}, c)
               for e, c in checked if c is not None]
    answers = [{"file": e["file"], "changed": False, "sha256": e["expect_sha256"]}
               for e, c in checked if c is None]
    answers += _run_journalled(journal, "apply", pending, lambda e, c: _write_apply(
        c[0], c[1], c[2], e["original_sha256"]))
    return {"files": answers, "recovered": recovered}


def op_rollback_all(req):
    """Several files rolled back as one, through the journal apply uses. Each entry either
    restores its backup (`"action": "restore"`, optionally keeping an edit) or writes a text that
    keeps only some recipes (`content_b64`, checked as an apply)."""
    entries = req["files"]
    if not entries:
        return {"files": [], "recovered": []}
    journal = journal_path([e["file"] for e in entries])
    recovered = _recover_pending(journal)
    pending = []
    answers = []
    for e in entries:
        path = e["file"]
        if not _is_restore(e):
            c = _check_apply(e)
            if c is None:
                answers.append({"file": path, "changed": False, "sha256": e["expect_sha256"]})
            else:
                pending.append(({k: e[k] for k in ("file", "expect_sha256", "original_sha256",
                                                   "content_b64")}, c))
            continue
        _clean_stale_tmp(path)
        current_sha = _current_sha(path)
        if current_sha != e["expect_sha256"]:
            raise HelperError(
                "%s changed since it was planned (sha256 %s, planned against %s): plan again"
                % (path, current_sha, e["expect_sha256"]))
        backup = _good_backup(path)
        if backup is None:
            answers.append({"file": path, "changed": False, "sha256": current_sha,
                            "backup": None})
            continue
        pending.append(({"file": path, "action": RESTORE, "expect_sha256": current_sha,
                         "backup_sha256": backup[1],
                         "keep_edited": bool(e.get("keep_edited"))}, backup))
    _step("checked")

    def write(entry, checked):
        if _is_restore(entry):
            return _write_restore(entry["file"], checked, entry["keep_edited"])
        return _write_apply(checked[0], checked[1], checked[2], entry["original_sha256"])

    answers += _run_journalled(journal, "rollback", pending, write)
    return {"files": answers, "recovered": recovered}


def op_recover(req):
    """Complete the apply or rollback a killed run left journalled (nothing without one)."""
    journal = req["journal"]
    _clean_stale_tmp(journal)
    if not os.path.exists(journal):
        return {"journal": journal, "recovered": [], "kind": None}
    kind, files = _read_journal(journal)
    return {"journal": journal, "recovered": _complete(journal, files), "kind": kind}


def op_rollback(req):
    """Put the backed-up original back byte for byte, then drop the backup."""
    path = req["file"]
    stale = _clean_stale_tmp(path)
    backup = _good_backup(path)
    if backup is None:
        return {"file": path, "changed": False, "sha256": _current_sha(path), "backup": None,
                "stale_removed": stale}
    current_sha = _current_sha(path)
    expect = req.get("expect_sha256")
    if expect is not None and current_sha != expect:
        raise HelperError(
            "%s changed since it was planned (sha256 %s, planned against %s): plan again"
            % (path, current_sha, expect))
    out = _write_restore(path, backup, bool(req.get("keep_edited")))
    out["stale_removed"] = stale
    return out


class _DirLock(object):
    """Exclusive flock on the target's directory: two patchers (two consoles, or a retry racing
    a run the dropped connection left behind) take turns instead of interleaving steps. Locking
    the directory itself leaves no lock file behind in site-packages."""

    def __init__(self, path):
        self.directory = os.path.dirname(path) or "."
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.directory, os.O_RDONLY)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # closing drops the lock
        return False


def _locked(op):
    def run(req):
        with _DirLock(req["file"]):
            return op(req)

    return run


def _locked_all(paths_of, op):
    """Every directory involved, locked in sorted order (the order single-file ops share), so
    a multi-file op and a single-file op never interleave nor deadlock."""

    def run(req):
        dirs = sorted({os.path.dirname(p) or "." for p in paths_of(req)})
        locks = []
        try:
            for d in dirs:
                locks.append(_DirLock(os.path.join(d, "x")).__enter__())
            return op(req)
        finally:
            for lock in reversed(locks):
                lock.__exit__()

    return run


def _journal_files(req):
    journal = req["journal"]
    paths = [journal]
    if os.path.exists(journal):
        try:
            paths += [f["file"] for f in _read_journal(journal)[1]]
        except HelperError:
            pass
    return paths


OPS = {
    "inspect": op_inspect,
    "apply": _locked(op_apply),
    "rollback": _locked(op_rollback),
    "apply_all": _locked_all(lambda req: [e["file"] for e in req["files"]], op_apply_all),
    "rollback_all": _locked_all(lambda req: [e["file"] for e in req["files"]],
                                op_rollback_all),
    "recover": _locked_all(_journal_files, op_recover),
}


def main():
    try:
        req = json.loads(sys.stdin.read())
        op = OPS[req["op"]]
    except (ValueError, KeyError, TypeError) as exc:
        print(json.dumps({"ok": False, "error": "bad request: %s" % exc}))
        return 0
    try:
        result = op(req)
    except HelperError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}))
        return 0
    except (OSError, KeyError, ValueError) as exc:
        print(json.dumps({"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}))
        return 0
    result["ok"] = True
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
Stdlib only, Python >= 3.8; never imports `console` or `remote`. Its parts (patch_files: atomic
writes and backups; patch_journal: the checks, writes and journal of several files;
find_package: a package found without importing it) are uploaded beside it.
"""

import ast
import base64
import contextlib
import fcntl
import json
import os
import sys

if not __package__:  # run as a script on the box: the siblings uploaded beside it are its package
    import types

    __package__ = "eagle3_probes"
    sys.modules[__package__] = types.ModuleType(__package__)
    sys.modules[__package__].__path__ = [os.path.dirname(os.path.abspath(__file__))]
from . import find_package, patch_files, patch_journal
from .probe_errors import HelperError


def op_inspect(req):
    package = req["package"]
    site_packages = req.get("site_packages")
    pkg_dir = find_package.package_dir(package, site_packages)
    out = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "package": package,
        "package_dir": pkg_dir,
        "version": find_package.dist_version(package, site_packages) if pkg_dir else None,
        "files": {},
    }
    if pkg_dir is not None:
        for rel in req.get("files", []):
            path = os.path.join(pkg_dir, *rel.split("/"))
            entry = {"path": path, "exists": os.path.isfile(path)}
            if entry["exists"]:
                data = patch_files.read(path)
                entry["sha256"] = patch_files.sha(data)
                entry["content_b64"] = base64.b64encode(data).decode("ascii")
                backups = []
                for bpath, named, actual in patch_files.list_backups(path):
                    b = {"path": bpath, "sha256_named": named, "sha256": actual}
                    if named == actual:
                        b["content_b64"] = base64.b64encode(patch_files.read(bpath)).decode("ascii")
                    backups.append(b)
                entry["backups"] = backups
            out["files"][rel] = entry
        paths = [os.path.join(pkg_dir, *rel.split("/")) for rel in req.get("files", [])]
        journal = patch_journal.journal_path(paths) if paths else None
        out["journal"] = journal
        out["journal_pending"] = bool(journal and os.path.exists(journal))
        if out["journal_pending"]:
            try:
                out["journal_kind"] = patch_journal.read_journal(journal)[0]
            except HelperError:
                out["journal_kind"] = None
    vllm_dir = find_package.package_dir("vllm", site_packages)
    vllm = {"found": vllm_dir is not None, "dir": vllm_dir}
    if vllm_dir is not None:
        vllm["version"] = find_package.dist_version("vllm", site_packages)
        vllm["scheduler_is_encoder_decoder"] = scheduler_is_encoder_decoder(vllm_dir)
    out["vllm"] = vllm
    return out


def scheduler_is_encoder_decoder(vllm_dir):
    """How vLLM's SchedulerConfig takes `is_encoder_decoder`, read from its source with ast:
    "required" (a field or InitVar without default), "optional", "absent" or "unknown"."""
    candidates = [
        os.path.join(vllm_dir, "config", "scheduler.py"),
        os.path.join(vllm_dir, "config", "__init__.py"),
        os.path.join(vllm_dir, "config.py"),
    ]
    for source in candidates:
        tree = find_package.parse_file(source)  # None: missing, or not Python
        for node in tree.body if tree is not None else ():
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


def op_all(req, kind):
    """Several files as one apply or rollback (`kind`): all checked, journalled, written, journal
    dropped. Each entry either writes `content_b64` (checked as an apply; a rollback that keeps
    only some recipes writes such a text) or restores its backup (`"action": "restore"`,
    optionally keeping an edit)."""
    entries = req["files"]
    if not entries:
        return {"files": [], "recovered": []}
    journal = patch_journal.journal_path([e["file"] for e in entries])
    recovered = patch_journal.recover_pending(journal)
    pending = []
    answers = []
    for e in entries:
        path = e["file"]
        if not patch_journal.is_restore(e):
            c = patch_journal.check_apply(e)
            if c is None:
                answers.append({"file": path, "changed": False, "sha256": e["expect_sha256"]})
            else:
                pending.append((patch_journal.apply_entry(e), c))
            continue
        patch_files.clean_stale_tmp(path)
        current_sha = patch_journal.file_sha(path)
        patch_journal.check_planned(path, current_sha, e["expect_sha256"])
        backup = patch_files.good_backup(path)
        if backup is None:
            answers.append({"file": path, "changed": False, "sha256": current_sha,
                            "backup": None})
            continue
        pending.append(({"file": path, "action": patch_files.RESTORE, "expect_sha256": current_sha,
                         "backup_sha256": backup[1],
                         "keep_edited": bool(e.get("keep_edited"))}, backup))
    patch_files.step("checked")
    answers += patch_journal.run_journalled(journal, kind, pending)
    return {"files": answers, "recovered": recovered}


def op_recover(req):
    """Complete the apply or rollback a killed run left journalled (nothing without one)."""
    journal = req["journal"]
    patch_files.clean_stale_tmp(journal)
    if not os.path.exists(journal):
        return {"journal": journal, "recovered": [], "kind": None}
    kind, files = patch_journal.read_journal(journal)
    return {"journal": journal, "recovered": patch_journal.complete(journal, files), "kind": kind}


@contextlib.contextmanager
def _dir_lock(directory):
    """Exclusive flock on the target's directory: two patchers (two consoles, or a retry racing
    a run the dropped connection left behind) take turns instead of interleaving steps. Locking
    the directory itself leaves no lock file behind in site-packages."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _locked_all(paths_of, op):
    """Every directory involved, locked in sorted order, so two ops over the same directories
    never interleave nor deadlock."""

    def run(req):
        with contextlib.ExitStack() as locks:
            for d in sorted({os.path.dirname(p) or "." for p in paths_of(req)}):
                locks.enter_context(_dir_lock(d))
            return op(req)

    return run


def _journal_files(req):
    journal = req["journal"]
    paths = [journal]
    if os.path.exists(journal):
        with contextlib.suppress(HelperError):
            paths += [f["file"] for f in patch_journal.read_journal(journal)[1]]
    return paths


OPS = {
    "inspect": op_inspect,
    "apply_all": _locked_all(lambda req: [e["file"] for e in req["files"]],
                             lambda req: op_all(req, "apply")),
    "rollback_all": _locked_all(lambda req: [e["file"] for e in req["files"]],
                                lambda req: op_all(req, "rollback")),
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

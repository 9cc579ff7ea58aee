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
  after.

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
    removed = []
    for name in os.listdir(directory):
        if name.startswith(prefix) and TMP_TAG in name:
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
    vllm_dir = _package_dir("vllm", site_packages)
    vllm = {"found": vllm_dir is not None, "dir": vllm_dir}
    if vllm_dir is not None:
        vllm["version"] = _dist_version("vllm", site_packages)
        vllm["scheduler_is_encoder_decoder"] = _scheduler_is_encoder_decoder(vllm_dir)
    out["vllm"] = vllm
    return out


def op_apply(req):
    """Replace `file` with `content_b64`, keeping the original (sha `original_sha256`) first."""
    path = req["file"]
    new = base64.b64decode(req["content_b64"])
    expect = req["expect_sha256"]
    original_sha = req["original_sha256"]
    stale = _clean_stale_tmp(path)
    current = _read(path)
    current_sha = _sha(current)
    if current_sha != expect:
        raise HelperError(
            "%s changed since it was planned (sha256 %s, planned against %s): plan again"
            % (path, current_sha, expect)
        )
    _step("checked")
    if _sha(new) == current_sha:
        return {"file": path, "changed": False, "sha256": current_sha, "stale_removed": stale}
    _compile_check(new, path)
    _step("compiled")
    backup = _good_backup(path)
    if backup is None:
        if current_sha != original_sha:
            raise HelperError(
                "no backup of the original of %s exists and the file is not that original "
                "(sha256 %s, original %s): refusing to replace it" % (path, current_sha,
                                                                       original_sha)
            )
        mode = os.stat(path).st_mode & 0o7777
        _write_atomic(_backup_path(path, original_sha), current, mode)
        _step("backed-up")
        backup = (_backup_path(path, original_sha), original_sha)
    elif backup[1] != original_sha:
        raise HelperError(
            "the backup of %s holds sha256 %s, not the original %s this plan assumed"
            % (path, backup[1], original_sha)
        )
    mode = os.stat(path).st_mode & 0o7777
    _write_atomic(path, new, mode)
    _step("replaced")
    warning = _refresh_bytecode(path)
    return {
        "file": path,
        "changed": True,
        "sha256": _sha(new),
        "backup": backup[0],
        "backup_sha256": backup[1],
        "warning": warning,
        "stale_removed": stale,
    }


def op_rollback(req):
    """Put the backed-up original back byte for byte, then drop the backup."""
    path = req["file"]
    stale = _clean_stale_tmp(path)
    backup = _good_backup(path)
    if backup is None:
        sha = _sha(_read(path)) if os.path.isfile(path) else None
        return {"file": path, "changed": False, "sha256": sha, "backup": None,
                "stale_removed": stale}
    bpath, bsha = backup
    original = _read(bpath)
    current_sha = _sha(_read(path)) if os.path.isfile(path) else None
    changed = current_sha != bsha
    if changed:
        mode = os.stat(bpath).st_mode & 0o7777
        _write_atomic(path, original, mode)
        _step("restored")
    warning = _refresh_bytecode(path)
    os.unlink(bpath)
    _fsync_dir(os.path.dirname(path) or ".")
    return {"file": path, "changed": changed, "sha256": bsha, "backup": bpath,
            "warning": warning, "stale_removed": stale}


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


OPS = {"inspect": op_inspect, "apply": _locked(op_apply), "rollback": _locked(op_rollback)}


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

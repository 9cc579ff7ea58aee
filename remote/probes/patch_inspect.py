"""What the patch helper reads of a package without importing it (its __init__ may pull in
vLLM): where it lives (find_package, or under an explicit site-packages), its installed
version, and how vLLM's SchedulerConfig takes `is_encoder_decoder` (read from the source with
ast).

Box side: stdlib only, Python >= 3.8, uploaded beside the patch helper.
"""

import ast
import os
import sys

try:  # imported as remote.probes.patch_inspect (the console's tests)
    from . import find_package, patch_files
except ImportError:  # run on the box from its uploaded directory, its siblings beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import find_package
    import patch_files


def dist_version(package, site_packages):
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


def package_dir(package, site_packages):
    """Where the package lives, found without importing it (its __init__ may pull in vLLM)."""
    if site_packages:
        candidate = os.path.join(site_packages, package)
        return candidate if os.path.isdir(candidate) else None
    return find_package.package_dir(package)


def scheduler_is_encoder_decoder(vllm_dir):
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
            tree = ast.parse(patch_files.read(source).decode("utf-8"), source)
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

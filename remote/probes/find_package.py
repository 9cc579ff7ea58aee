"""Where an installed package lives and which version it is, found without importing it (its
__init__ may pull in vLLM, CUDA or a GPU library): shared by the env probe, the model probe and
the patch helper.

Box side: stdlib only, Python >= 3.8, uploaded beside each of them (upload_probe).
"""

import ast
import contextlib
import importlib.util
import os


def package_dir(name, site_packages=None):
    """The directory of package `name` (under `site_packages` when given), or None when it is
    not installed or not a package."""
    if site_packages:
        candidate = os.path.join(site_packages, name)
        return candidate if os.path.isdir(candidate) else None
    try:
        spec = importlib.util.find_spec(name)  # locates the package without executing it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))


def dist_version(name, site_packages=None):
    """The installed version of distribution `name` (only one installed under `site_packages`
    when given), or None."""
    try:
        import importlib.metadata as md  # 3.8+, the oldest python a box may have

        if site_packages:
            for dist in md.distributions(path=[site_packages]):
                found = (dist.metadata.get("Name") or "").lower().replace("_", "-")
                if found == name.lower().replace("_", "-"):
                    return dist.version
            return None
        return md.version(name)
    except Exception:
        return None


def parse_file(path):
    """The module's syntax tree, or None when the file is missing or not Python this python
    reads."""
    try:
        with open(path, "rb") as fh:
            return ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None


def name_assignments(nodes):
    """(name, value node) of each `name = value` and `name: T = value` among `nodes`."""
    for node in nodes:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        for t in targets:
            if isinstance(t, ast.Name):
                yield t.id, node.value


def read_assignments(path):
    """Top-level `name = <literal>` of a generated file like torch/version.py, without running it."""
    out = {}
    tree = parse_file(path)
    for name, value in name_assignments(tree.body if tree is not None else ()):
        with contextlib.suppress(ValueError):
            out[name] = ast.literal_eval(value)
    return out

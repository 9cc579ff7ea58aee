"""Where an installed package lives, found without importing it (its __init__ may pull in vLLM,
CUDA or a GPU library): shared by the env probe, the model probe and the patch helper.

Box side: stdlib only, Python >= 3.8, uploaded beside each of them (upload_probe).
"""

import importlib.util


def package_dir(name):
    """The directory of package `name`, or None when it is not installed or not a package."""
    try:
        spec = importlib.util.find_spec(name)  # locates the package without executing it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))

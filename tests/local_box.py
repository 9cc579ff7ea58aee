"""The console.toml most tests need: only the built-in `local` host, on a workdir of the test's
own. The default workdir (~/.local/share/eagle3-console/local-box) holds what other tests and the
operator left there (a run found there once changed what the TUI showed in a test)."""

from __future__ import annotations

from pathlib import Path


def local_console_toml(root: Path, workdir: Path | str | None = None, **more: str) -> Path:
    """Writes root/console.toml: `[hosts.local]` with workdir (root/box unless given) and any
    further string keys (python, vllm_url, ...); returns its path."""
    lines = ["[hosts.local]", f'workdir = "{workdir if workdir is not None else root / "box"}"']
    lines += [f'{key} = "{value}"' for key, value in more.items()]
    path = root / "console.toml"
    path.write_text("\n".join(lines) + "\n")
    return path

"""Stage manifests: what a finished stage produced, from which config and inputs.

A manifest is written last, atomically, after every output is in its final place; a stage that
starts again removes its manifest first. So a stage killed at any point leaves no manifest, and
nothing downstream (or a second `console run`) mistakes its half-written outputs for complete.

A stage is up to date when its manifest exists, its key (the config sections the stage reads
plus the digests of its input stages' manifests, both from its row in pipeline/stages) is
unchanged, and every recorded output still exists with its recorded size. Output hashes: full
sha256 for files up to 16 MB; above that, the sha256 of size + first and last MiB ("sampled"),
because hashing terabytes of hidden states on every run would cost more than the stage.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import stages as stage_table
from pipeline.config_types import PipelineConfig
from pipeline.formats import installed

FORMAT = 1
FULL_HASH_LIMIT = 16 << 20


def manifest_path(cfg: PipelineConfig, stage: str) -> Path:
    return cfg.output_dir / "manifests" / f"{stage}.json"


def stage_dir(cfg: PipelineConfig, stage: str) -> Path:
    return cfg.output_dir / stage


def read(cfg: PipelineConfig, stage: str) -> dict[str, Any] | None:
    try:
        data = json.loads(manifest_path(cfg, stage).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def stage_key(cfg: PipelineConfig, stage: str) -> str | None:
    """The key a matching manifest must carry; None when an input stage is not complete."""
    row = stage_table.get(stage)
    parts: dict[str, Any] = {"config": cfg.section_digest(*row.sections), "inputs": {}}
    for up in row.inputs:
        m = read(cfg, up)
        if m is None:
            return None
        parts["inputs"][up] = m["digest"]
    if stage == stage_table.EXTRACT and cfg.train.mode == "online":
        parts["online"] = True  # rows only, no states: not an offline extraction's output
    if row.reads_dataset:
        ds = cfg.dataset_path()
        if ds is not None:
            st = ds.stat()
            parts["dataset"] = [st.st_size, int(st.st_mtime)]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Status:
    stage: str
    complete: bool
    reason: str


def status(cfg: PipelineConfig, stage: str) -> Status:
    m = read(cfg, stage)
    if m is None:
        return Status(stage, False, "no manifest")
    key = stage_key(cfg, stage)
    if key is None:
        return Status(stage, False, "an input stage is not complete")
    if m.get("key") != key:
        return Status(stage, False, "config or inputs changed since the manifest")
    base = cfg.output_dir
    for out in m.get("outputs", []):
        p = base / out["path"]
        try:
            size = p.stat().st_size
        except OSError:
            return Status(stage, False, f"output {out['path']} is missing")
        if size != out["size"]:
            return Status(stage, False, f"output {out['path']} changed size")
    return Status(stage, True, f"manifest matches ({len(m.get('outputs', []))} outputs)")


def facts(cfg: PipelineConfig, stage: str) -> dict[str, Any]:
    """What the stage's manifest says about its last finished run, for a console that was not
    watching it: how long it took, when it finished, how many outputs and bytes. Empty when
    there is no manifest."""
    m = read(cfg, stage)
    if m is None:
        return {}
    outputs = [o for o in m.get("outputs", []) if isinstance(o, dict)]
    return {"seconds": m.get("seconds"), "completed": m.get("completed"),
            "outputs": len(outputs), "bytes": sum(int(o.get("size") or 0) for o in outputs)}


def sha256_file(path: Path) -> str:
    """The whole file's sha256, read a MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_digest(path: Path) -> tuple[str, str]:
    size = path.stat().st_size
    if size <= FULL_HASH_LIMIT:
        return sha256_file(path), "full"
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(str(size).encode())
        h.update(fh.read(1 << 20))
        fh.seek(size - (1 << 20))
        h.update(fh.read(1 << 20))
        return h.hexdigest(), "sampled"


def package_versions() -> dict[str, str]:
    names = ("torch", "transformers", "speculators", "vllm", "datasets", "safetensors")
    return {name: v for name in names if (v := installed(name)) is not None}


def invalidate(cfg: PipelineConfig, stage: str) -> None:
    """First thing a stage does when it starts work: it is no longer complete."""
    manifest_path(cfg, stage).unlink(missing_ok=True)


def write(cfg: PipelineConfig, stage: str, outputs: list[Path], *, key: str,
          summary: dict[str, Any], seconds: float) -> dict[str, Any]:
    base = cfg.output_dir
    row = stage_table.get(stage)
    rows = []
    for p in sorted(outputs):
        digest, how = file_digest(p)
        rows.append({"path": str(p.relative_to(base)), "size": p.stat().st_size,
                     "sha256": digest, "hash": how})
    manifest = {
        "format": FORMAT,
        "stage": stage,
        "key": key,
        "config": str(cfg.path),
        "config_digest": cfg.section_digest(*row.sections),
        "inputs": {up: (read(cfg, up) or {}).get("digest") for up in row.inputs},
        "outputs": rows,
        "packages": package_versions(),
        "summary": summary,
        "seconds": round(seconds, 3),
        "completed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    manifest["digest"] = hashlib.sha256(
        json.dumps([key, rows], sort_keys=True).encode()).hexdigest()
    write_json_atomic(manifest_path(cfg, stage), manifest)
    return manifest


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a manifest cut short (a full disk) is never left behind
        raise

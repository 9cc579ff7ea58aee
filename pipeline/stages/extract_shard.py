"""Sharded extraction, the box side (docs/pipeline.md, "Sharded extraction"): three commands the
console runs while `[extract] hosts` spreads extract over several boxes.

    shard-plan --config C [--force]         on the training box, after prepare: the shards
                                            (pipeline.shards.split), which are gathered already
    shard-extract --config C --rows R --dir D [--force]
                                            on a shard box (a detached job): the shard's samples
                                            (R, a slice of prepare's train.jsonl) extracted into
                                            D by the stage's own route (extract.extract_todo),
                                            resumable, then D/shard.json written last
    shard-gather --config C --dir D --start S [--move]
                                            on the training box: D's files checked (sha256
                                            against shard.json, the shard's key against the
                                            samples S.. of train.jsonl here) and placed as
                                            extract/hidden_states/<name of S+j>

After every shard is gathered, the extract stage itself runs on the training box: it finds
every sample on disk (its resume rule), extracts nothing and writes meta.json, the Arrow dataset
(0.9) and its manifest, so vocab and train read a sharded extraction exactly as a one-box one.

With `[train] data = "local-shards"` nothing is gathered: `shard-extract --local --start S`
runs prepare on the box (the same dataset and config give the same samples: checked against
the rows the console sent), extracts the shard into the box's own
`<output_dir>/extract-local/shard-K-of-N/`, then the box's extract stage (`place_local`: its
shard's files linked to their global numbers, the Arrow dataset of every row, meta.json naming
the shards and the one this box holds) and vocab (prepare's token counts only). Each box then
holds what its ranks train on and nothing else.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from pipeline import manifest
from pipeline.config_types import PipelineConfig
from pipeline.errors import CopyRefused, PipelineError
from pipeline.formats import sample_name, speculators_path
from pipeline.progress import emit
from pipeline.runner import StageContext
from pipeline.shard_copy import check_manifest
from pipeline.shards import SHARD_MANIFEST, rows_digest, shard_key, split
from pipeline.stages import EXTRACT, PREPARE, VOCAB
from pipeline.stages.extract import (
    KEY_FILE,
    complete_shard,
    extract_todo,
    local_shard_dir,
    prepare_resume,
    read_samples,
    shard_config_digest,
)
from pipeline.state_size import bytes_per_token


def plan(cfg: PipelineConfig, *, force: bool = False) -> dict[str, Any]:
    """The shards of this config's prepared samples, one per extract.hosts entry, and which of
    them the training box holds already. Starting (not complete, or forced) resets the extract
    directory as the stage would (a changed key or --force wipes it) and removes the stage's
    manifest: extract is under way until the stage itself writes it again."""
    hosts = list(cfg.extract.hosts)
    if not hosts:
        raise PipelineError("shard-plan: extract.hosts is empty in this config (nothing to shard)")
    st = manifest.status(cfg, EXTRACT)
    key = manifest.stage_key(cfg, EXTRACT)
    if key is None:
        raise PipelineError("shard-plan: prepare is not complete: run it first")
    fmt = speculators_path(cfg)
    samples = read_samples(manifest.stage_dir(cfg, PREPARE))
    shards = split([len(s["input_ids"]) for s in samples], len(hosts))
    out: dict[str, Any] = {"complete": st.complete and not force, "format": fmt,
                           "samples": len(samples), "hosts": hosts,
                           # what a shard weighs before it exists: a relay's estimate
                           "bytes_per_token": bytes_per_token(cfg, fmt),
                           "train_jsonl": str(manifest.stage_dir(cfg, PREPARE) / "train.jsonl"),
                           "extract_dir": str(manifest.stage_dir(cfg, EXTRACT))}
    if out["complete"]:
        out["shards"] = [{**s.to_dict(), "gathered": True} for s in shards]
        return out
    manifest.invalidate(cfg, EXTRACT)
    work = manifest.stage_dir(cfg, EXTRACT)
    work.mkdir(parents=True, exist_ok=True)
    prepare_resume(StageContext(cfg, EXTRACT, key, work, force=force))
    hs = work / "hidden_states"
    out["shards"] = [{**s.to_dict(), "gathered": all(
        (hs / sample_name(fmt, i)).exists() for i in range(s.start, s.end))} for s in shards]
    return out


def _read_rows(path: Path) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except (OSError, ValueError) as exc:
        raise PipelineError(f"shard-extract: cannot read the shard's samples {path}: {exc}") \
            from None


def extract(cfg: PipelineConfig, rows_path: Path, shard_dir: Path, *,
            force: bool = False) -> dict[str, Any]:
    """One shard: its samples through the stage's extraction route into `shard_dir`, resumable
    sample by sample (the stage's .key rule), its manifest written last."""
    rows = _read_rows(rows_path)
    fmt = speculators_path(cfg)
    key = shard_key(shard_config_digest(cfg), fmt, rows)
    shard_dir.mkdir(parents=True, exist_ok=True)
    done = None if force else complete_shard(shard_dir, key)
    if done is not None:
        emit("skipped", EXTRACT, reason=f"shard complete ({done['count']} samples, "
             f"{shard_dir / SHARD_MANIFEST})", shard_dir=str(shard_dir))
        return done
    t0 = time.monotonic()
    emit("start", EXTRACT, reason=f"shard of {len(rows)} samples into {shard_dir}",
         shard_dir=str(shard_dir))
    (shard_dir / SHARD_MANIFEST).unlink(missing_ok=True)
    # The shard's disk is the one to check, not the training box's output_dir.
    local = dataclasses.replace(cfg, output_dir=shard_dir)
    ctx = StageContext(local, EXTRACT, key, shard_dir, force=force)
    prepare_resume(ctx)
    hs = shard_dir / "hidden_states"
    todo = [i for i in range(len(rows)) if not (hs / sample_name(fmt, i)).exists()]
    if cfg.cpu_threads:
        import torch

        torch.set_num_threads(cfg.cpu_threads)
    extract_todo(ctx, fmt, rows, todo, hs)
    files = []
    for i in range(len(rows)):
        p = hs / sample_name(fmt, i)
        if not p.exists():
            raise PipelineError(f"shard-extract: sample {i} missing after extraction ({p})")
        files.append({"name": p.name, "size": p.stat().st_size, "sha256": manifest.sha256_file(p)})
    m = {"key": key, "format": fmt, "count": len(rows),
         "packages": manifest.package_versions(),
         "tokens": sum(len(r["input_ids"]) for r in rows), "files": files,
         "completed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    manifest.write_json_atomic(shard_dir / SHARD_MANIFEST, m)
    emit("end", EXTRACT, ok=True, seconds=round(time.monotonic() - t0, 3),
         summary={"samples": len(rows), "tokens": m["tokens"], "shard_dir": str(shard_dir)})
    return m


def gather(cfg: PipelineConfig, shard_dir: Path, start: int, *, move: bool = False,
           hashed: bool = False) -> dict[str, Any]:
    """A finished shard's files into the extract directory here, renumbered from `start`,
    each checked against the shard's manifest first; nothing is placed unless all match.
    `hashed`: the files' sha256 was checked as they arrived (pipeline/shard_copy.py), so only
    their sizes are checked again (a second read of terabytes proves nothing more)."""
    key = manifest.stage_key(cfg, EXTRACT)
    work = manifest.stage_dir(cfg, EXTRACT)
    held = (work / KEY_FILE).read_text().strip() if (work / KEY_FILE).exists() else None
    if key is None or held != key:
        raise PipelineError("shard-gather: the extract directory here is not prepared for this "
                            "config (run shard-plan first)")
    try:
        m = json.loads((shard_dir / SHARD_MANIFEST).read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise PipelineError(f"shard-gather: no shard manifest in {shard_dir}: "
                            f"{str(exc)[:200]}") from None
    # Its shape, names and sizes, and as many files as samples, each the name shard-extract
    # gives sample j: the files are placed by position (issue 48 row 2).
    files = check_manifest(m, f"shard-gather: {shard_dir}")
    fmt = speculators_path(cfg)
    expected = [sample_name(fmt, j) for j in range(len(files))]
    if [f["name"] for f in files] != expected:
        raise CopyRefused(f"shard-gather: {shard_dir}: the shard manifest's files are not "
                          f"{expected[0] if expected else 'the samples'}... in sample order: "
                          "refused, nothing placed")
    samples = read_samples(manifest.stage_dir(cfg, PREPARE))
    rows = samples[start:start + int(m["count"])]
    if len(rows) != m["count"] or m.get("key") != shard_key(shard_config_digest(cfg), fmt, rows):
        raise PipelineError(f"shard-gather: {shard_dir} does not hold samples {start}.."
                            f"{start + int(m['count']) - 1} of this config's prepared data "
                            "(its key differs): rerun that shard")
    src = shard_dir / "hidden_states"
    for f in files:
        p = src / f["name"]
        if p.is_symlink() or not p.is_file() or p.stat().st_size != f["size"] or (
                not hashed and manifest.sha256_file(p) != f["sha256"]):
            raise PipelineError(f"shard-gather: {p} does not match the shard's manifest "
                                "(size or sha256): not placed; rerun that shard")
    hs = work / "hidden_states"
    hs.mkdir(exist_ok=True)
    size = 0
    for j, f in enumerate(files):
        p, dest = src / f["name"], hs / sample_name(fmt, start + j)
        tmp = dest.with_name(dest.name + ".part")
        if move:
            os.replace(p, tmp)
        else:  # the shard ran here: a second name for the same bytes, not a second copy
            try:
                os.link(p, tmp)
            except OSError:
                shutil.copyfile(p, tmp)
        os.replace(tmp, dest)
        size += int(f["size"])
    if move:
        shutil.rmtree(shard_dir, ignore_errors=True)
    return {"gathered": len(files), "start": start, "bytes": size,
            "packages": m.get("packages") or {}}


def extract_local(cfg: PipelineConfig, rows_path: Path, start: int, *,
                  force: bool = False) -> dict[str, Any]:
    """`shard-extract --local`: prepare here, the shard into this box's own output_dir, then
    this box's extract and vocab stages (train.data = local-shards)."""
    from pipeline.runner import run_stage

    run_stage(cfg, PREPARE)
    rows = _read_rows(rows_path)
    samples = read_samples(manifest.stage_dir(cfg, PREPARE))
    shards = split([len(s["input_ids"]) for s in samples], len(cfg.extract.hosts))
    mine = [s for s in shards if s.start == start and s.count == len(rows)]
    if not mine or rows_digest(samples[start:start + len(rows)]) != rows_digest(rows):
        raise PipelineError(
            f"shard-extract: this box's prepared samples {start}..{start + len(rows) - 1} "
            "differ from the training box's (same dataset file, tokenizer and [data] config on "
            "every box: data.dataset and target.model as absolute paths valid here)")
    out = extract(cfg, rows_path, local_shard_dir(cfg, mine[0], len(shards)), force=force)
    run_stage(cfg, EXTRACT, force=True)  # links and the rows' dataset: cheap, always fresh
    run_stage(cfg, VOCAB)
    return out

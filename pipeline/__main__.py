"""`python -m pipeline STAGE --config FILE` on the box.

    validate            check the config (and the disk floor); print what it resolved to
    plan                which stages are complete; nothing runs
    STAGE               one stage of the table in pipeline/stages/__init__.py (skipped
                        when its manifest matches)
    all                 every stage in order, in this process
    run                 every remaining stage in order, each in its own process: what the
                        console launches as one detached job (pipeline/sequence.py)
    demo-setup --dir D  build the tiny local demo (target, tokenizer, conversations, config)
    serve --port P [--bind H] [--baseline] [--draft D] [--k K] [-- VLLM_ARGS]   vLLM's
                        OpenAI server for the target with train's head, or another draft
                        (none, ngram, a head directory), or without (--baseline);
                        pipeline/serve.py
    shard-plan|shard-extract --rows R --dir D|shard-gather --dir D --start S
                        sharded extraction (extract.hosts): pipeline/stages/extract_shard.py
    shard-serve [--dir D] --bind A --port P | shard-fetch --url U [--dir D --start S
                        --manifest-sha256 H | --probe]
                        box-to-box copy of a finished shard (token on stdin):
                        pipeline/shard_copy.py

--force runs a stage even when its manifest matches; --from STAGE (with all or run) forces STAGE
and every stage after it; --rerun STAGE (with run) forces that stage only; --demo-dir D (with
run) builds the demo in D first and runs its config.
Exit codes: 0 ok, 1 a stage failed, 2 bad config or input (run: 143 when cancelled).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline import stages as stage_table
from pipeline import state_size
from pipeline.errors import PipelineError
from pipeline.progress import emit

if TYPE_CHECKING:
    from pipeline.config_types import PipelineConfig


def build_parser() -> argparse.ArgumentParser:
    stages = stage_table.names()
    p = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=[*stages, "all", "run", "plan", "validate", "demo-setup",
                                       "serve", "shard-plan", "shard-extract", "shard-gather",
                                       "shard-serve", "shard-fetch"])
    p.add_argument("--config", help="pipeline TOML")
    p.add_argument("--force", action="store_true", help="run even when the manifest matches")
    p.add_argument("--from", dest="start", choices=stages,
                   help="with all or run: force from STAGE on")
    p.add_argument("--rerun", choices=stages, help="with run: force this stage only")
    p.add_argument("--demo-dir", help="with run: build the demo here and run its config")
    p.add_argument("--dir", help="demo-setup: directory to build the demo in")
    p.add_argument("--port", type=int, help="serve: the server's port")
    p.add_argument("--bind", default="127.0.0.1", help="serve: address to listen on")
    p.add_argument("--baseline", action="store_true", help="serve: without speculation")
    p.add_argument("--draft", default="pipeline", help="serve: pipeline (train's head, the "
                   "default), none, ngram, or a head directory on this box")
    p.add_argument("--k", type=int, help="serve: num_speculative_tokens (default: the draft's)")
    p.add_argument("--rows", help="shard-extract: the shard's samples (JSON lines)")
    p.add_argument("--local", action="store_true",
                   help="shard-extract --start S: train.data = local-shards: prepare, the shard, "
                   "extract and vocab in this box's own output_dir")
    p.add_argument("--start", type=int, help="shard-gather: the shard's first sample")
    p.add_argument("--move", action="store_true",
                   help="shard-gather: move the files (a staging copy) instead of copying")
    p.add_argument("--until", choices=stages, help="with run: stop after this stage")
    p.add_argument("--url", help="shard-fetch: the shard box's server (http://ADDRESS:PORT)")
    p.add_argument("--manifest-sha256", help="shard-fetch: the shard manifest's sha256, as the "
                   "console read it on the shard box")
    p.add_argument("--probe", action="store_true",
                   help="shard-fetch: only check that the server answers with the token")
    return p


def advisor_inputs(cfg: PipelineConfig) -> dict[str, Any]:
    """What the console's compat advisor needs to predict training-stage failures without vLLM:
    config.json, the embedding tensors' names (not all names: a large model has 100k+), the
    trust_remote_code setting and the installed speculators version."""
    from pipeline.formats import installed
    from pipeline.verifier_view import weight_names

    raw = json.loads((cfg.model_path / "config.json").read_text())
    try:
        names = list(weight_names(cfg.model_path))
    except (ImportError, OSError, ValueError, KeyError, TypeError, PipelineError):
        names = []  # the advisor goes without them
    return {"hf_config": raw, "embed_names": [n for n in names if n.endswith("embed_tokens.weight")],
            "trust_remote_code": cfg.target.trust_remote_code,
            "packages": {"speculators": installed()}}


def _shard(args: argparse.Namespace, stage: str) -> int:
    """The sharded-extraction commands (pipeline/stages/extract_shard.py); each prints one JSON
    line for the console. A shard box need not hold the dataset: its samples come with --rows."""
    from pipeline import config as config_mod
    from pipeline import shard_copy
    from pipeline.stages import extract_shard

    if stage == "shard-serve":  # no config: the shard's own manifest says what it serves
        token = shard_copy.read_token()
        print(json.dumps(shard_copy.serve(Path(args.dir) if args.dir else None, args.bind,
                                          args.port or 0, token)))
        return 0
    if stage == "shard-fetch" and args.probe:
        if not args.url:
            raise PipelineError("shard-fetch needs --url")
        print(json.dumps(shard_copy.probe(args.url, shard_copy.read_token())))
        return 0
    if not args.config:
        raise PipelineError("--config FILE is required")
    cfg = config_mod.load(args.config, check_disk=False, check_data=(stage != "shard-extract"
                           or args.local))
    if stage == "shard-fetch":
        if not (args.url and args.dir and args.manifest_sha256) or args.start is None \
                or args.start < 0:
            raise PipelineError("shard-fetch needs --url, --dir, --manifest-sha256 and --start")
        token = shard_copy.read_token()
        got = shard_copy.fetch(args.url, token, Path(args.dir), args.manifest_sha256)
        out = {**extract_shard.gather(cfg, Path(args.dir), args.start, move=True, hashed=True),
               "copied": got["copied"]}
    elif stage == "shard-plan":
        out = extract_shard.plan(cfg, force=args.force)
    elif stage == "shard-extract" and args.local:
        if not args.rows or args.start is None or args.start < 0:
            raise PipelineError("shard-extract --local needs --rows FILE and --start N")
        out = extract_shard.extract_local(cfg, Path(args.rows), args.start, force=args.force)
        out = {k: out[k] for k in ("key", "format", "count", "tokens")}
    elif stage == "shard-extract":
        if not args.rows or not args.dir:
            raise PipelineError("shard-extract needs --rows FILE and --dir DIR")
        out = extract_shard.extract(cfg, Path(args.rows), Path(args.dir), force=args.force)
        out = {k: out[k] for k in ("key", "format", "count", "tokens")}
    else:
        if not args.dir or args.start is None or args.start < 0:
            raise PipelineError("shard-gather needs --dir DIR and --start N (>= 0)")
        out = extract_shard.gather(cfg, Path(args.dir), args.start, move=args.move)
    print(json.dumps(out))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after `--` goes to vLLM untouched (argparse would read it as our options).
    vllm_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, vllm_args = argv[:cut], argv[cut + 1:]
    if argv[:1] == ["train-node"]:  # a box other than the first, in training across boxes
        from pipeline import nodes

        try:
            return nodes.node_main(nodes.node_parser().parse_args(argv[1:]))
        except PipelineError as exc:
            emit("error", stage_table.TRAIN, message=str(exc), exit_code=exc.exit_code)
            return exc.exit_code
    args = build_parser().parse_args(argv)
    stage = args.command
    if vllm_args and stage != "serve":
        build_parser().error(f"arguments after -- are for serve only: {' '.join(vllm_args)}")
    try:
        if stage == "demo-setup":
            if not args.dir:
                raise PipelineError("demo-setup needs --dir")
            from pipeline.demo import build_demo

            path = build_demo(args.dir)
            emit("info", "demo-setup", message=f"demo config: {path}", config=str(path))
            return 0
        if stage == "run":
            from pipeline import sequence

            return sequence.run(args.config, start=args.start, force=args.force,
                                rerun=args.rerun, demo_dir=args.demo_dir, until=args.until)
        if stage.startswith("shard-"):
            return _shard(args, stage)
        if not args.config:
            raise PipelineError("--config FILE is required")
        from pipeline import config as config_mod
        from pipeline.runner import plan, run_stage

        cfg = config_mod.load(args.config, check_disk=stage in ("validate", "all", stage_table.EXTRACT))
        if stage == "validate":
            print(json.dumps({"ok": True, "model": str(cfg.model_path),
                              "num_layers": cfg.num_layers, "hidden_size": cfg.hidden_size,
                              "vocab_size": cfg.vocab_size, "layer_ids": cfg.all_layer_ids,
                              "bytes_per_token": state_size.bytes_per_token(cfg),
                              "output_dir": str(cfg.output_dir),
                              "max_new_tokens": cfg.evaluate.max_new_tokens,
                              "train_hosts": list(cfg.train.hosts),
                              "train_addresses": list(cfg.train.addresses),
                              "extract_hosts": list(cfg.extract.hosts),
                              "extract_addresses": list(cfg.extract.addresses),
                              "extract_copy_port": cfg.extract.copy_port,
                              "train_data": cfg.train.data,
                              **advisor_inputs(cfg)}))
            return 0
        if stage == "serve":
            from pipeline import serve

            if args.port is None or not 0 < args.port < 65536:
                raise PipelineError("serve needs --port (1..65535)")
            return serve.main(cfg, host=args.bind, port=args.port, baseline=args.baseline,
                              extra=vllm_args, draft=args.draft, k=args.k)
        if stage == "plan":
            for row in plan(cfg, start=args.start, force=args.force):
                print(json.dumps(row))
            return 0
        if stage == "all":  # plan's rows say which stages --from or --force forces
            for row in plan(cfg, start=args.start, force=args.force):
                run_stage(cfg, row["stage"], force=row["force"])
            return 0
        run_stage(cfg, stage, force=args.force)
        return 0
    except PipelineError as exc:
        emit("error", stage, message=str(exc), exit_code=exc.exit_code)
        if not os.environ.get("EAGLE3_STAGE_RECORDS_READ"):  # the console prints the record
            print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except BaseException as exc:  # a stage crashing must still leave one clear line
        from pipeline.tracebacks import print_for_log

        print_for_log(exc)
        emit("error", stage, message=f"{type(exc).__name__}: {exc}", exit_code=1)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())

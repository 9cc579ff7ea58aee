"""Run by the box environment's python (vLLM CPU build): build tiny models of many registered
architectures the way vLLM's loader does, and report each one's module tree facts.

Why the meta device: `initialize_model(vllm_config=...)` is the call vLLM's model loader makes
inside the engine (same registry lookup, same class, same constructor arguments from the same
VllmConfig); only the device differs, and a module tree does not depend on the device. Under
`torch.device("meta")` no weights are allocated, so hundreds of architectures build in one
process in minutes, where an engine per model costs 30-60 s. The test that uses this also builds
one real engine and checks that its module tree equals the meta one.

Input (argv[1]): a JSON file, a list of {"arch": ..., "config": {...}}, or `--registry`: every
architecture in the installed vLLM's registry that transformers maps to a model_type, with a tiny
config built from transformers' own defaults for that model_type (text decoder: 3 layers; every
other nested config: 2, so the text decoder's list is the one of length 3).
Output (stdout): one JSON line per entry: {"arch", "config", "loaded": bool, "error"?,
"layer_lists": {path: length}, "supports_eagle3", "class", "seconds"}.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from typing import Any


def layer_lists(model: Any) -> dict[str, int]:
    """Every ModuleList/ModuleDict in the tree with its length (repeated blocks live there)."""
    import torch.nn as nn

    return {name: len(m) for name, m in model.named_modules()
            if isinstance(m, (nn.ModuleList, nn.ModuleDict)) and name}


def build(arch: str, config: dict[str, Any], workdir: str) -> dict[str, Any]:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.model_executor.models.interfaces import supports_eagle3

    inspect_in_process(arch)
    d = tempfile.mkdtemp(dir=workdir)
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(config, fh)
    args = EngineArgs(model=d, skip_tokenizer_init=True, load_format="dummy", dtype="float32",
                      max_model_len=128, enforce_eager=True, trust_remote_code=False)
    vc = args.create_engine_config()
    with set_current_vllm_config(vc):
        if not _groups:
            init_single_process_groups()  # needs a current config; once per process
            _groups.append(True)
        with torch.device("meta"):
            model = initialize_model(vllm_config=vc)
    return {"loaded": True, "class": type(model).__name__, "layer_lists": layer_lists(model),
            "supports_eagle3": bool(supports_eagle3(model))}


_groups: list[bool] = []


def inspect_in_process(arch: str) -> None:
    """vLLM inspects a lazily registered class in a fresh subprocess (an import of vLLM: tens
    of seconds here) unless its model-info cache has it. The same class, inspected in this
    process: same registry entry, same class, same answers; only where the inspection runs."""
    from vllm.model_executor.models.registry import ModelRegistry, _LazyRegisteredModel, _RegisteredModel

    entry = ModelRegistry.models.get(arch)
    if isinstance(entry, _LazyRegisteredModel):
        cls = entry.load_model_cls()
        ModelRegistry.models[arch] = _RegisteredModel.from_model_cls(cls)


def init_single_process_groups() -> None:
    """What a one-rank engine worker sets up before it builds the model (TP/PP groups of 1)."""
    import socket

    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                 distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
    ensure_model_parallel_initialized(1, 1)


TEXT_LAYERS = 3
OTHER_LAYERS = 2
SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1,
         "head_dim": 32, "vocab_size": 512, "max_position_embeddings": 512, "moe_intermediate_size": 64,
         "shared_expert_intermediate_size": 64, "n_routed_experts": 4, "num_experts": 4, "num_local_experts": 4,
         "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
         "kv_lora_rank": 32, "q_lora_rank": 32, "qk_rope_head_dim": 32, "qk_nope_head_dim": 32, "v_head_dim": 32,
         "n_embd": 64, "n_head": 2, "n_positions": 512, "n_inner": 128}
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


def shrink(cfg: dict[str, Any], text: bool) -> None:
    for k, v in SIZES.items():
        if k in cfg and isinstance(cfg[k], int):
            cfg[k] = v
    for k in LAYER_KEYS:
        if isinstance(cfg.get(k), int):
            cfg[k] = TEXT_LAYERS if text else OTHER_LAYERS
    for k in ("layer_types", "mlp_only_layers"):
        cfg.pop(k, None)
    for k, v in list(cfg.items()):
        if isinstance(v, dict) and k.endswith("_config") and k != "quantization_config":
            shrink(v, text=k in ("text_config", "llm_config", "language_config"))


def registry_entries() -> list[dict[str, Any]]:
    """Every registered architecture transformers knows a model_type for, with a tiny config."""
    from transformers import AutoConfig
    from transformers.models.auto import modeling_auto
    from vllm.model_executor.models import ModelRegistry

    types: dict[str, str] = {}
    for name in dir(modeling_auto):
        table = getattr(modeling_auto, name)
        if name.endswith("_MAPPING_NAMES") and isinstance(table, dict):
            for mt, cls in table.items():
                for c in cls if isinstance(cls, (tuple, list)) else [cls]:
                    types.setdefault(c, mt)
    out = []
    for arch in sorted(ModelRegistry.get_supported_archs()):
        mt = types.get(arch)
        if mt is None:
            continue
        try:
            cfg = AutoConfig.for_model(mt).to_dict()
        except Exception:
            continue
        has_text = isinstance(cfg.get("text_config"), dict)
        shrink(cfg, text=not has_text)
        cfg["architectures"] = [arch]
        for k in ("torch_dtype", "dtype", "transformers_version", "_name_or_path"):
            cfg.pop(k, None)
        out.append({"arch": arch, "config": cfg})
    return out


def module_tree(model: Any) -> list[list[Any]]:
    return [[name, type(m).__name__] for name, m in model.named_modules()]


def engine_vs_meta(config: dict[str, Any]) -> dict[str, Any]:
    """The module tree of the model a real engine loads (load_format="dummy": random weights,
    no hub) and of the same model built on the meta device here, and supports_eagle3 of both."""
    import torch
    from vllm import LLM
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.model_executor.models.interfaces import supports_eagle3

    d = tempfile.mkdtemp(prefix="model-tree-engine-")
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(config, fh)
    llm = LLM(model=d, skip_tokenizer_init=True, load_format="dummy", dtype="float32", max_model_len=128,
              enforce_eager=True)
    (engine_tree, engine_eagle3), = llm.apply_model(lambda m: (module_tree(m), bool(supports_eagle3(m))))
    args = EngineArgs(model=d, skip_tokenizer_init=True, load_format="dummy", dtype="float32",
                      max_model_len=128, enforce_eager=True)
    vc = args.create_engine_config()
    with set_current_vllm_config(vc), torch.device("meta"):
        model = initialize_model(vllm_config=vc)
    return {"engine_tree": engine_tree, "meta_tree": module_tree(model), "engine_supports_eagle3": engine_eagle3,
            "meta_supports_eagle3": bool(supports_eagle3(model))}


def main() -> int:
    if sys.argv[1] == "--engine":  # one tiny model: the engine's tree against the meta build
        with open(sys.argv[2]) as fh:
            sys.stdout.write(json.dumps(engine_vs_meta(json.load(fh))) + "\n")
        return 0
    if sys.argv[1] == "--registry":
        entries = registry_entries()
    else:
        with open(sys.argv[1]) as fh:
            entries = json.load(fh)
    workdir = tempfile.mkdtemp(prefix="model-tree-")
    for e in entries:
        t0 = time.perf_counter()
        try:
            out = build(e["arch"], e["config"], workdir)
        except BaseException as exc:  # one architecture that does not build must not end the run
            if isinstance(exc, KeyboardInterrupt):
                raise
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            out = {"loaded": False, "error": f"{type(exc).__name__}: {str(exc)[:300]} "
                                             f"({os.path.basename(tb.filename)}:{tb.lineno})"}
        out.update(arch=e["arch"], config=e["config"], seconds=round(time.perf_counter() - t0, 3))
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

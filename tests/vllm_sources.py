"""Real vLLM sources for the probe tests: the wheel members the model probe reads, unpacked once,
and parsed once per test session (the cached Source keeps every module it parsed).

Only the model sources (both layouts: `model_executor/models` and 0.33's `vllm/models`), the
config package (the eagle3 gate), the config loader (the keys vLLM renames on load) and the
version file are unpacked.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from remote.probes import model_probe
from tests.wheels import unpacked

VLLM_MEMBERS = [
    "vllm/model_executor/models/*",
    "vllm/models/*",
    "vllm/config/*",
    "vllm/transformers_utils/config.py",
    "vllm/_version.py",
]


def vllm_root(version: str) -> Path:
    """The `vllm` package directory of that release (what the probe's --vllm-root takes)."""
    return unpacked("vllm", version, VLLM_MEMBERS) / "vllm"


def speculators_root(version: str = "0.3.0") -> Path:
    members = {"0.3.0": ["speculators/data_generation/*", "speculators/models/eagle3/*"],
               "0.9.0": ["speculators/models/utils.py"]}[version]
    return unpacked("speculators", version, members) / "speculators"


@functools.cache
def source(version: str) -> Any:
    return model_probe.Source(str(vllm_root(version)))


@functools.cache
def sweep(version: str) -> tuple[dict[str, Any], ...]:
    src = source(version)
    return tuple(model_probe.describe(src, arch) for arch in sorted(src.registry()))


# Kimi-K2.5's config.json, reduced to what the probe reads (text_config is a DeepseekV3Config).
KIMI_K25_CONFIG: dict[str, Any] = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "auto_map": {
        "AutoConfig": "configuration_kimi_k25.KimiK25Config",
        "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
    },
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "num_hidden_layers": 61,
        "hidden_size": 7168,
    },
    "vision_config": {"model_type": "moonvit"},
}
LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
}
DEEPSEEK_V3_CONFIG: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "num_hidden_layers": 61,
    "hidden_size": 7168,
}

"""The target model through transformers, and its hidden states in the pipeline's convention.

transformers' `output_hidden_states=True` returns hidden_states[k] = the state entering layer k
(k = 0: the embeddings) for k < N, which is exactly our layer id k. Its last entry is *after* the
final norm, so id N (the last layer's output before the norm) comes from a forward pre-hook on
the final norm module instead.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

from pipeline.config_types import PipelineConfig
from pipeline.errors import PipelineError

# The auto classes tried in order: text models first, then transformers' built-in multimodal
# wrappers (Llava-style: language_model + vision tower), which AutoModelForCausalLM does not map.
_AUTO_CLASSES = ("AutoModelForCausalLM", "AutoModelForImageTextToText", "AutoModelForVision2Seq")


def load_target(cfg: PipelineConfig, device: str, dtype: Any) -> Any:
    import transformers

    kw = {"torch_dtype": dtype, "trust_remote_code": cfg.target.trust_remote_code}
    unmapped = []
    for name in _AUTO_CLASSES:
        auto = getattr(transformers, name, None)
        if auto is None:
            continue
        try:
            model = auto.from_pretrained(str(cfg.model_path), **kw)
        except ValueError as exc:
            # "Unrecognized configuration class ... for this kind of AutoModel": try the next.
            if "Unrecognized configuration class" not in str(exc):
                raise
            unmapped.append(name)
            continue
        model.to(device)
        model.eval()
        return model
    raise PipelineError(f"{cfg.model_path}: no transformers auto class maps this model's config "
                        f"(tried {', '.join(unmapped)}); is target.trust_remote_code needed?")


def final_norm(model: Any) -> Any:
    """The final norm of a causal LM, for the usual layouts (model.norm, language_model...)."""
    for path in ("model.norm", "model.language_model.norm", "language_model.model.norm",
                 "language_model.norm",
                 "model.final_layernorm", "transformer.ln_f"):
        obj = reduce(lambda o, part: getattr(o, part, None), path.split("."), model)
        if obj is not None:
            return obj
    raise PipelineError(f"cannot find the final norm of {type(model).__name__}")


class HiddenStateCapture:
    """Runs the target and returns {layer_id: [seq, H]} for the requested ids (id N included),
    plus the logits, from one forward pass."""

    def __init__(self, model: Any, num_layers: int) -> None:
        self.model = model
        self.num_layers = num_layers
        self._pre_norm: Any = None
        final_norm(model).register_forward_pre_hook(self._hook)

    def _hook(self, _module: Any, args: tuple[Any, ...]) -> None:
        self._pre_norm = args[0]

    def __call__(self, input_ids: Any, layer_ids: list[int]) -> tuple[dict[int, Any], Any]:
        import torch

        with torch.no_grad():
            out = self.model(input_ids=input_ids, output_hidden_states=True, use_cache=False)
        hs = out.hidden_states
        if len(hs) != self.num_layers + 1:
            raise PipelineError(f"expected {self.num_layers + 1} hidden states, got {len(hs)}")
        states = {lid: (self._pre_norm if lid == self.num_layers else hs[lid])[0]
                  for lid in layer_ids}
        return states, out.logits[0]

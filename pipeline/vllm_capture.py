"""Hidden states through a real vLLM engine: `LLM(..., worker_extension_cls=...)` plus
`LLM.collective_rpc`, one request at a time, replacing speculators 0.3's generator.

Why not speculators 0.3's VllmHiddenStatesGenerator: it drives vLLM's internals (EngineCore
pieces built by hand) as they were in vLLM 0.11. On vLLM 0.16 it breaks five more times after
the worker is fixed (docs/design.md §6: `kv_cache_specs=`, Scheduler `block_size`, prefix caching
without a block hasher, `sample_tokens`, `collective_rpc(unique_reply_rank=0)` no longer a
list), and past those its "abort every request after one step" silently truncates samples
longer than a prefill chunk and shifts the rest of the batch. The public `LLM` API has none of
those dependencies: the engine schedules the prompt as it likes (chunked or not), the worker
extension appends every forward's captured rows, and since one request runs at a time with
`max_tokens=1`, the rows are exactly that prompt's tokens in order. The count is checked, so a
truncation can never pass silently.

The worker extension is speculators 0.3's HiddenStatesWorkerExtension (the one the founding
report failed in; the patcher's resolve-text-decoder / embed-input-ids recipes make it work on
multimodal wrappers and vLLM >= 0.16), named by dotted path so it can be swapped.

Runs on the box (vLLM installed); `if __name__ == "__main__":` is the caller's duty (spawn).
"""

from __future__ import annotations

from typing import Any

from pipeline.errors import PipelineError
from pipeline.vllm_engine_kw import capture_engine_kwargs, shutdown_engine

# speculators 0.3's HiddenStatesWorkerExtension plus a bytes getter (pipeline.vllm_worker_ext).
SPECULATORS_03_EXTENSION = "pipeline.vllm_worker_ext.CaptureExtension"


class VllmCapture:
    """One engine, set up once to capture the *outputs of* `capture_layers` (worker indices);
    `capture(ids)` returns one [len(ids), H] CPU tensor per index, ascending."""

    def __init__(self, model_path: str, capture_layers: list[int], *, max_model_len: int,
                 tensor_parallel_size: int = 1, dtype: str = "bfloat16",
                 trust_remote_code: bool = False, extension: str = SPECULATORS_03_EXTENSION,
                 max_num_batched_tokens: int | None = None, **engine_kw: Any) -> None:
        if any(i < 0 for i in capture_layers):
            raise PipelineError(f"worker layer indices must be >= 0, got {capture_layers} "
                                "(layer id 0, the embeddings, has no worker capture)")
        from vllm import LLM

        self.layers = sorted(set(capture_layers))
        kw = capture_engine_kwargs(
            model_path, extension=extension, tensor_parallel_size=tensor_parallel_size,
            dtype=dtype, max_model_len=max_model_len, trust_remote_code=trust_remote_code)
        if max_num_batched_tokens is not None:
            kw["max_num_batched_tokens"] = max_num_batched_tokens
        kw.update(engine_kw)
        self.llm = LLM(**kw)
        self._rpc("_setup_hidden_states_capture", self.layers)

    def _rpc(self, method: str, *args: Any) -> Any:
        replies = self.llm.collective_rpc(method, args=args)
        return replies[0]  # TP rank 0 is the one that captures (speculators' worker)

    def capture(self, input_ids: list[int]) -> list[Any]:
        from vllm import SamplingParams, TokensPrompt

        self._rpc("_reset_capture")
        self.llm.generate([TokensPrompt(prompt_token_ids=list(input_ids))],
                          SamplingParams(max_tokens=1, temperature=0.0, detokenize=False),
                          use_tqdm=False)
        states = self._rpc("_captured_states_raw")
        if states is None or len(states) != len(self.layers):
            got = "nothing" if states is None else f"{len(states)} layers"
            raise PipelineError(f"the worker captured {got} for layers {self.layers}: is the "
                                "worker extension set up (patch resolve-text-decoder applied)?")
        import torch

        out = []
        for layer, t in zip(self.layers, states, strict=True):
            shape, raw = t
            t = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shape)
            if t.shape[0] != len(input_ids):
                raise PipelineError(
                    f"layer {layer}: captured {t.shape[0]} rows for a {len(input_ids)}-token "
                    "prompt (truncated or mixed with another request)")
            out.append(t.detach().to("cpu"))
        return out

    def close(self) -> None:
        shutdown_engine(self.llm)

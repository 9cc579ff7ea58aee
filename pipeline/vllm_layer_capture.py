"""Hidden states at our layer ids through a plain `vllm.LLM` with the worker extension of
`pipeline.vllm_layer_hooks`: whole batches of prompts in flight together, chunked prefill
allowed, every prompt's rows checked.

Why this route on a box without CUDA: speculators 0.9's own route (the extract_hidden_states
server plus vLLM's ExampleHiddenStatesConnector) orders its copies with CUDA streams and events
and pinned memory, so on a CPU build of vLLM 0.32 it cannot run. The public `LLM` API plus
`collective_rpc` can: the engine schedules the batch as it likes, the extension files each step's
rows under their request at their positions, and `max_tokens=1` ends every request right after
its prompt. A prompt whose rows do not number its tokens (truncated, shifted) raises.

Layer ids are the pipeline's (id L = the state entering layer L = the output of layer L-1;
id N = the last layer's output before the final norm), so the extension hooks layers L-1.
Runs on the box (vLLM installed); `if __name__ == "__main__":` is the caller's duty (spawn).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from pipeline.errors import PipelineError
from pipeline.vllm_engine_kw import capture_engine_kwargs, shutdown_engine

EXTENSION = "pipeline.vllm_layer_hooks.LayerCaptureExtension"


def _drop_warmup_alarm(record: logging.LogRecord) -> bool:
    return record.msg != "Chat template warmup failed"


class LayerCapture:
    """One engine, set up once; `capture(prompts)` returns, per prompt, one [len, H] CPU tensor
    per layer id (in the order given), in the engine's dtype."""

    def __init__(self, model_path: str, layer_ids: list[int], *, max_model_len: int,
                 tensor_parallel_size: int = 1, dtype: str = "bfloat16",
                 trust_remote_code: bool = False, max_num_batched_tokens: int = 0,
                 **engine_kw: Any) -> None:
        if any(lid < 1 for lid in layer_ids):
            raise PipelineError(f"layer ids must be >= 1 for vLLM extraction, got {layer_ids} "
                                "(id 0, the embeddings, is no decoder layer's output)")
        # The extension reads the V1 model runner's batch layout (pipeline.vllm_layer_hooks);
        # set before the engine spawns its workers, which inherit the environment.
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        from vllm import LLM

        self.layer_ids = list(layer_ids)
        self._hooked = sorted({lid - 1 for lid in layer_ids})
        kw = capture_engine_kwargs(
            model_path, extension=EXTENSION, tensor_parallel_size=tensor_parallel_size,
            dtype=dtype, max_model_len=max_model_len, trust_remote_code=trust_remote_code)
        if max_num_batched_tokens:
            kw["max_num_batched_tokens"] = max_num_batched_tokens
            if max_num_batched_tokens < 256:  # vLLM refuses a chunk below max_num_seqs
                kw["max_num_seqs"] = max_num_batched_tokens
        kw.update(engine_kw)
        # vLLM warms its chat template up at start and, with no tokenizer loaded (token ids in,
        # states out: none is needed), logs that as a failure with a traceback. A false alarm
        # for this engine: that one record is dropped while it starts. (A filter, not a level:
        # vLLM's logging dictConfig resets its child loggers' levels.)
        renderer_log = logging.getLogger("vllm.renderers.base")
        renderer_log.addFilter(_drop_warmup_alarm)
        try:
            self.llm = LLM(**kw)
        finally:
            renderer_log.removeFilter(_drop_warmup_alarm)
        replies = self.llm.collective_rpc("_capture_setup", args=(self._hooked,))
        info = replies[0]
        # One reply per worker (TP rank): which of them hooked the layers (rank 0 only).
        self.capturing_ranks = [r for r, rep in enumerate(replies) if rep.get("capturing")]
        self.workers = len(replies)
        self.layers_path = str(info["path"])
        self.num_layers = int(info["num_layers"])
        self.not_built = [str(n) for n in info.get("not_built", [])]
        if max(layer_ids) > self.num_layers:
            raise PipelineError(f"layer id {max(layer_ids)} > the model's {self.num_layers} "
                                f"layers ({self.layers_path})")

    def capture(self, prompts: list[list[int]]) -> list[list[Any]]:
        import torch
        from vllm import SamplingParams, TokensPrompt

        self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                          SamplingParams(max_tokens=1, temperature=0.0, detokenize=False),
                          use_tqdm=False)
        taken = self.llm.collective_rpc("_capture_take")[0]  # TP rank 0 captures
        pool: dict[tuple[int, ...], list[list[Any]]] = {}
        for prompt, wire in taken:
            states = [torch.frombuffer(bytearray(raw), dtype=getattr(torch, dt)).reshape(shape)
                      if raw else torch.empty(shape) for dt, shape, raw in wire]
            pool.setdefault(tuple(prompt), []).append(states)
        out = []
        for i, p in enumerate(prompts):
            found = pool.get(tuple(p))
            if not found:
                raise PipelineError(f"prompt {i} ({len(p)} tokens): the engine's worker captured "
                                    f"nothing for it ({len(taken)} requests captured)")
            states = found.pop()
            by_hooked = dict(zip(self._hooked, states, strict=True))
            rows = by_hooked[self._hooked[0]].shape[0]
            if rows != len(p):
                raise PipelineError(f"prompt {i}: captured {rows} rows for {len(p)} tokens "
                                    "(truncated or mixed with another request)")
            out.append([by_hooked[lid - 1] for lid in self.layer_ids])
        return out

    def close(self) -> None:
        shutdown_engine(self.llm)

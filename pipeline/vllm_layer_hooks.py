"""The worker extension behind `pipeline.vllm_layer_capture`: forward hooks on the target's
decoder layers inside vLLM's own worker, rows split per request by the step's batch layout.

Why our own and not speculators': speculators 0.9 has no worker extension (it extracts through
vLLM's ExampleHiddenStatesConnector, CUDA-only in vLLM 0.32: streams, events, pinned memory),
and 0.3's extension refuses models without SupportsEagle3 and patches `model.model.forward`.
Hooks on the decoder layer modules need neither: they work on any model whose decoder layers
return `(hidden_states, residual)` (vLLM's Llama, Qwen, DeepSeek-V2/V3 with MLA and MoE, ...)
or a plain tensor, under any wrapper (`language_model.model.layers` for Kimi-K2.5 and other
multimodal wrappers).

Why the batch layout comes from the V1 model runner: a step's hidden states are the scheduled
tokens of every running request, concatenated in the order of `model_runner.input_batch.req_ids`,
`scheduler_output.num_scheduled_tokens[req_id]` rows each, starting at the request's
`num_computed_tokens`. That is all it takes to put each chunk of a chunked prefill back in its
request at its position, with many requests of mixed lengths in flight. (`pipeline.vllm_layer_capture`
forces the V1 runner; a runner without `input_batch` is refused here with that explanation.)

The states are what vLLM's own aux-hidden-state capture takes: the output of layer i is
`hidden_states + residual` (the next layer's fused add-norm would update both in place, so the
sum is taken in the hook, before that). Rows of tokens past the prompt (a decode step) are not
kept. Only TP rank 0 captures: after a layer every rank holds the same full rows.

Runs inside vLLM's worker process (loaded by dotted path); needs torch and vLLM only.
"""

from __future__ import annotations

import contextlib
from typing import Any

WireState = tuple[str, list[int], bytes]  # dtype name, shape, raw bytes


def find_decoder_layers(model: Any, num_layers: int) -> tuple[str, Any]:
    """(dotted path, ModuleList) of the text decoder's layers: the language model of a
    multimodal wrapper first, then `model.layers`, then the one ModuleList named `*layers` with
    `num_layers` entries."""
    import torch.nn as nn

    roots: list[tuple[str, Any]] = []
    get_lm = getattr(model, "get_language_model", None)
    if callable(get_lm):
        with contextlib.suppress(Exception):  # some wrappers raise: no language model split off
            roots.append(("get_language_model()", get_lm()))
    for name in ("language_model", ""):
        sub = getattr(model, name, None) if name else model
        if sub is not None:
            roots.append((name, sub))
    for name, root in roots:
        inner = getattr(root, "model", None)
        layers = getattr(inner, "layers", None)
        if isinstance(layers, nn.ModuleList) and len(layers) == num_layers:
            return (f"{name}.model.layers" if name else "model.layers"), layers
    found = [(n, m) for n, m in model.named_modules()
             if isinstance(m, nn.ModuleList) and n.split(".")[-1] == "layers"
             and len(m) == num_layers and "vision" not in n]
    if len(found) == 1:
        return found[0]
    names = ", ".join(f"{n} ({len(m)})" for n, m in model.named_modules()
                      if isinstance(m, nn.ModuleList) and n.endswith("layers")) or "none"
    raise RuntimeError(f"cannot tell the decoder layers of {type(model).__name__} "
                       f"({num_layers} expected); ModuleLists named *layers: {names}")


def _layer_output(out: Any) -> Any:
    if isinstance(out, tuple):
        hidden, residual = out[0], (out[1] if len(out) > 1 else None)
        return hidden + residual if residual is not None else hidden.clone()
    return out.clone()


class LayerCaptureExtension:
    """Mixed into vLLM's Worker (`LLM(worker_extension_cls=...)`); driven by collective_rpc."""

    def _capture_setup(self, layer_indices: list[int]) -> dict[str, Any]:
        """Hook the outputs of `layer_indices` (0-based decoder layers); returns where the layers
        were found and how many there are, so the caller can check its layer ids."""
        worker: Any = self
        runner = worker.model_runner
        model = runner.get_model()
        num_layers = int(runner.model_config.hf_text_config.num_hidden_layers)
        path, layers = find_decoder_layers(model, num_layers)
        bad = [i for i in layer_indices if not 0 <= i < len(layers)]
        if bad:
            raise ValueError(f"layer indices {bad} outside 0..{len(layers) - 1} ({path})")
        if not hasattr(getattr(runner, "input_batch", None), "req_ids"):
            raise RuntimeError(f"{type(runner).__name__} has no input_batch.req_ids: the capture "
                               "reads the V1 model runner's batch layout "
                               "(VLLM_USE_V2_MODEL_RUNNER=0)")
        self._cap_layers = sorted(set(layer_indices))
        self._cap_step: dict[int, Any] = {}
        self._cap_order: list[str] | None = None
        self._cap_requests: dict[str, dict[str, Any]] = {}
        self._cap_active = False
        self._cap_paused = False
        self._cap_restarts = 0
        # Modules vLLM left out (a tower of a modality limited to 0 is a StageMissingLayer):
        # said in the stage's log, so a text-only capture shows it built no vision tower.
        not_built = [name for name, child in model.named_children()
                     if type(child).__name__ == "StageMissingLayer"]
        if int(getattr(worker, "rank", 0)) != 0:
            return {"path": path, "num_layers": len(layers), "capturing": False,
                    "not_built": not_built}
        for i in self._cap_layers:
            layers[i].register_forward_hook(self._cap_hook(i))
        original = runner.execute_model

        def execute_model(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            if self._cap_paused:
                return original(scheduler_output, *args, **kwargs)
            self._cap_step, self._cap_order, self._cap_active = {}, None, True
            try:
                return original(scheduler_output, *args, **kwargs)
            finally:
                self._cap_active = False
                self._cap_file_step(scheduler_output)

        runner.execute_model = execute_model
        return {"path": path, "num_layers": len(layers), "capturing": True,
                "not_built": not_built}

    def _cap_hook(self, index: int) -> Any:
        def hook(_module: Any, _args: Any, out: Any) -> None:
            if not self._cap_active:
                return  # a warm-up or profiling forward, not a scheduled step
            if self._cap_order is None:
                worker: Any = self
                batch = worker.model_runner.input_batch
                self._cap_order = list(batch.req_ids[:batch.num_reqs])
            self._cap_step[index] = _layer_output(out).detach().to("cpu")
        return hook

    def _cap_file_step(self, sched: Any) -> None:
        """Put this step's rows into their requests, at their token positions."""
        if not self._cap_step:
            return
        starts: dict[str, int] = {}
        for new in sched.scheduled_new_reqs:
            starts[new.req_id] = int(new.num_computed_tokens)
            self._cap_requests[new.req_id] = {"prompt": list(new.prompt_token_ids or []),
                                              "chunks": []}
        cached = sched.scheduled_cached_reqs
        for rid, done in zip(cached.req_ids, cached.num_computed_tokens, strict=True):
            starts[rid] = int(done)
        order = self._cap_order or []
        counts = [int(sched.num_scheduled_tokens[r]) for r in order]
        total = sum(counts)
        if total != int(sched.total_num_scheduled_tokens):
            raise RuntimeError(f"batch layout: {total} rows over {len(order)} requests, the "
                               f"scheduler says {sched.total_num_scheduled_tokens}")
        for i, t in self._cap_step.items():
            if t.shape[0] < total:
                raise RuntimeError(f"layer {i}: {t.shape[0]} rows for {total} scheduled tokens "
                                   "(sequence-parallel rows are not gathered)")
        offset = 0
        for rid, n in zip(order, counts, strict=True):
            req = self._cap_requests.get(rid)
            if req is not None:
                start = starts[rid]
                keep = max(0, min(n, len(req["prompt"]) - start))  # no rows past the prompt
                # A recomputed request (after preemption) starts over: drop what it replaces.
                kept = [c for c in req["chunks"] if c[0] < start]
                if len(kept) < len(req["chunks"]):
                    self._cap_restarts += 1
                req["chunks"] = kept
                if keep:
                    req["chunks"].append((start, [self._cap_step[i][offset:offset + keep]
                                                  for i in self._cap_layers]))
            offset += n
        self._cap_step = {}

    def _capture_pause(self, paused: bool) -> None:
        """Steps run as plain vLLM while paused (the hooks return at once): the same engine's own
        prefill, the baseline of benchmarks/extract_throughput.py."""
        self._cap_paused = bool(paused)

    def _capture_restarts(self) -> int:
        """How many times a request started over at a position it had already been captured
        at (a preempted request recomputed): evidence that the recompute path ran."""
        return int(getattr(self, "_cap_restarts", 0))

    def _capture_take(self) -> list[tuple[list[int], list[WireState]]]:
        """Every request captured since the last call: (prompt token ids, one state per hooked
        layer, ascending), as bytes (a collective_rpc reply goes through msgpack), then forget
        them. A request whose chunks do not tile its prompt is returned with what it has; the
        caller checks the row count."""
        import torch

        out = []
        for req in self._cap_requests.values():
            chunks = sorted(req["chunks"], key=lambda c: c[0])
            pos, parts = 0, []
            for start, states in chunks:
                if start != pos:
                    break  # a gap: the caller sees too few rows
                parts.append(states)
                pos += states[0].shape[0]
            wire = []
            for k in range(len(self._cap_layers)):
                t = (torch.cat([p[k] for p in parts]) if parts
                     else torch.empty(0, dtype=torch.float32)).contiguous()
                wire.append((str(t.dtype).removeprefix("torch."), list(t.shape),
                             t.view(torch.uint8).numpy().tobytes()))
            out.append((req["prompt"], wire))
        self._cap_requests = {}
        return out

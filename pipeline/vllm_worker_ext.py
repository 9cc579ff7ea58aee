"""The worker extension the extraction engine loads: speculators 0.3's HiddenStatesWorkerExtension
(imported as installed, patched or not) plus one method that hands the captured states back as
bytes.

Why: vLLM 0.16 returns a `collective_rpc` reply through msgpack without type hints, so tensors
arrive as their raw encoding (["float32", shape, buffer]) rather than as tensors. Bytes and
lists survive the trip unchanged. Runs inside vLLM's worker process (imported by dotted path).
"""

from __future__ import annotations

from typing import Any

from speculators.data_generation.custom_worker import HiddenStatesWorkerExtension


class CaptureExtension(HiddenStatesWorkerExtension):
    def _captured_states_raw(self) -> list[tuple[list[int], bytes]] | None:
        states: Any = self._get_captured_states()
        if states is None:
            return None
        return [(list(t.shape), t.detach().float().cpu().contiguous().numpy().tobytes())
                for t in states]

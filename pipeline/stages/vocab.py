"""vocab: the draft vocabulary (d2t / t2d) from the assistant-token frequencies of prepare.

The draft predicts over the `draft_vocab_size` most frequent target tokens. d2t[i] is the offset
with target_id = i + d2t[i]; t2d is a bool mask over the target vocabulary. Built with the
installed speculators' own function, so the files are exactly what its trainer expects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.progress import Progress, emit
from pipeline.runner import StageContext


def run(ctx: StageContext) -> tuple[list[Path], dict[str, Any]]:
    import numpy as np
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    cfg = ctx.cfg
    freq_raw = json.loads((ctx.input_dir("prepare") / "token_freq.json").read_text())
    freq = {int(k): int(v) for k, v in freq_raw.items()}
    size = cfg.vocab.draft_vocab_size
    Progress("vocab", len(freq), "tokens").update(len(freq), force=True)
    d2t, t2d = build_vocab_mappings_from_distribution(freq, size, cfg.vocab_size)
    total = sum(freq.values())
    covered = sum(v for k, v in freq.items() if bool(t2d[k]))
    d2t_path, t2d_path = ctx.workdir / "d2t.npy", ctx.workdir / "t2d.npy"
    np.save(d2t_path, d2t.numpy())
    np.save(t2d_path, t2d.numpy())
    coverage = covered / total if total else 0.0
    emit("info", "vocab", message=f"draft vocab {size} of {cfg.vocab_size}: covers "
         f"{coverage:.1%} of {total} assistant tokens ({len(freq)} distinct)")
    return [d2t_path, t2d_path], {"draft_vocab_size": size, "target_vocab_size": cfg.vocab_size,
                                  "coverage": round(coverage, 6), "distinct_tokens": len(freq)}

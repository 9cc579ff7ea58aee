"""A failed stage's one line keeps what the operator acts on: the exception's sentence with its
numbers, not a cut in its middle, and the fix when the advisor knows the error.

The data is a real job log (tests/data/vllm032_max_model_len.log) of `console run --host local`
(the host python: the vllm032 box env) with `max_seq_len = 512` on the demo target (256 positions),
backend `vllm`: vLLM 0.32's pydantic ValidationError, traceback and stage error record as written.
Before, the console showed "... (max_position_embeddings=256.0 or model […] ounds error. [type=
value_error, input_value=...] For further information visit https://errors.pydantic.dev/...".
"""

from __future__ import annotations

from pathlib import Path

from pipeline.progress import parse as parse_record
from remote.compat import fix_for_error
from remote.jobs.stage_records import stage_event
from remote.spine import events as ev
from remote.spine.traceback_fold import MESSAGE_CHARS, TracebackFolder, readable_message

LOG = Path(__file__).parents[1] / "data" / "vllm032_max_model_len.log"
WHAT_FAILED = "User-specified max_model_len (513) is greater than the derived max_model_len"
NUMBERS = "(max_position_embeddings=256.0 or model_max_length=None in model's config.json)."


def _shown(text: str) -> list[str]:
    """The log's lines as a job tail shows them: tracebacks folded, stage errors as their line."""
    folder = TracebackFolder("LOG")
    texts, ends, pos = [], [], 0
    for line in text.splitlines(keepends=True):
        pos += len(line.encode())
        texts.append(line.rstrip("\n"))
        ends.append(pos)
    lines, _ = folder.feed(texts, ends)
    lines += folder.flush()[0]
    shown = []
    for line in lines:
        rec = parse_record(line)
        if rec is None:
            shown.append(line)
            continue
        got = stage_event(rec, "run-1", "extract")
        if got is not None and got[0] == ev.CONSOLE_ERROR:
            shown.append("error: " + str(got[1]["message"]))
    return shown


def test_the_real_vllm_max_model_len_error_keeps_its_numbers_and_gets_the_fix() -> None:
    shown = _shown(LOG.read_text())
    errors = [s for s in shown if s.startswith("error: ")]
    assert len(errors) == 1, shown  # said once
    line = errors[0]
    assert line.startswith("error: extract: extract failed: ValidationError: ")
    assert WHAT_FAILED in line and NUMBERS in line, line  # whole, not cut in the middle
    assert "errors.pydantic.dev" not in line and "input_value=" not in line, line
    said, _, fix = line.partition(" — fix: ")
    assert "max_seq_len" in fix and "[data]" in fix, line
    assert len(said) <= len("error: extract: ") + 400
    # The folded traceback before it names the raise and leaves the message to the record.
    folded = [s for s in shown if "[traceback folded:" in s]
    assert len(folded) == 1 and "ValidationError raised" in folded[0], shown
    assert WHAT_FAILED not in folded[0]


def test_the_same_traceback_without_a_record_carries_the_message_readably() -> None:
    """An engine's or a library's traceback (no stage error record after it): the folded line
    is the only place the error is said."""
    text = "".join(ln for ln in LOG.read_text().splitlines(keepends=True)
                   if not ln.startswith("@@eagle3 "))
    folded = [s for s in _shown(text) if "[traceback folded:" in s]
    assert len(folded) == 1, folded
    message = folded[0].split("]: ", 1)[1]
    assert WHAT_FAILED in message and NUMBERS in message, message
    assert "errors.pydantic.dev" not in message and len(message) <= MESSAGE_CHARS


def test_readable_message_keeps_short_ones_and_cuts_endless_ones_by_characters() -> None:
    assert readable_message("ValueError: bad\n   value", 400) == "ValueError: bad value"
    names = "Model type should be one of " + ", ".join(f"Config{i}" for i in range(300))
    cut = readable_message(names, 200)
    assert len(cut) <= 200 and cut.startswith("Model type") and cut.endswith("Config299")
    # sentences: the first ones that fit and the last, whole; the middle left out
    text = ("Loading failed for shard 3 of 8. " + "Some detail follows here. " * 30
            + "Free 2 GiB and retry.")
    short = readable_message(text, 120)
    assert short.startswith("Loading failed for shard 3 of 8.") and short.endswith(
        " […] Free 2 GiB and retry."), short
    assert len(short) <= 120


def test_the_advisor_knows_the_max_model_len_error_only() -> None:
    known = fix_for_error(LOG.read_text())
    assert known is not None and known.rule == "max-model-len"
    other = fix_for_error("ValueError: max_num_batched_tokens (8) is smaller than max_num_seqs")
    assert other is None or other.rule != "max-model-len"

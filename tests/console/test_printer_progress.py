"""The extract stage's progress line (console/printer.py `_progress`) shows the writer's rate
beside the capture's and the captures that waited on the writer (pipeline/write_pool.py), where
a record has them; records of other stages and of older boxes read exactly as before."""

from __future__ import annotations

from datetime import UTC, datetime

from console.printer import human_line
from remote.spine import events as ev
from remote.spine.events import Event

TS = datetime(2026, 12, 7, 1, 2, 3, tzinfo=UTC)


def _line(**payload: object) -> str | None:
    return human_line(Event(ev.STAGE_PROGRESS, "box", payload, ts=TS))


def test_the_writer_and_capture_rates_and_the_waits_are_shown() -> None:
    line = _line(stage="extract", done=12, total=40, unit="samples", rate=2.5, tokens=24576,
                 capture_tok_s=5100.0, write_tok_s=3900.5, write_mb_s=223.7, writer_waits=3,
                 writer_wait_s=4.25)
    assert line == ("01:02:03 [box] extract: 12/40 samples  30.0% 2.5 samples/s; capture "
                    "5,100 tok/s, write 3,900 tok/s (213.3 MiB/s), waited on the writer 3x 4.25 s")


def test_a_writer_that_kept_up_and_an_old_record_read_as_before() -> None:
    kept_up = _line(stage="extract", done=1, total=4, unit="samples", capture_tok_s=900.0,
                    writer_waits=0, writer_wait_s=0.0)
    assert kept_up == "01:02:03 [box] extract: 1/4 samples  25.0%; capture 900 tok/s"
    old = _line(stage="extract", done=3, total=10, unit="samples", rate=1.5, tokens=300)
    assert old == "01:02:03 [box] extract: 3/10 samples  30.0% 1.5 samples/s"
    odd = _line(stage="extract", done=3, total=10, unit="samples", write_tok_s="fast",
                writer_waits=True, capture_tok_s=None)
    assert odd == "01:02:03 [box] extract: 3/10 samples  30.0%"

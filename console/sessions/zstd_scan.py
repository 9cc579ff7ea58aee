"""Scanning a `.jsonl.zst` session: its frames as segments, counted while they decompress.

Apart from the segments themselves (console/sessions/source.py: the Segment, the frame walker,
reading one segment back) because this is the one pass over a compressed file that an open
without an index makes: every frame decompressed once in bounded pieces, its events counted and
shown to the marker search, a damaged frame dropped whole and the scan resumed at the next.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from console.errors import FrameError
from console.sessions.source import TS_LEN, TS_PREFIX, ZSTD_MAGIC, BlankLines, Segment, first_ts, frame_end, skippable


class FrameCounter:
    """Counts the events in decompressed output as it comes, keeping only what a segment needs
    (header line, first timestamp, where the last whole line ends): memory stays bounded
    whatever a frame expands to."""

    MAX_HEADER = 1 << 20
    # A line longer than this is not shown to `visit` (a seek marker is a few hundred bytes):
    # the carried part of a line is what keeps memory bounded here.
    MAX_CARRY = 16 << 20

    def __init__(self, want_header: bool, visit: Callable[[int, bytes], None] | None = None,
                 first: int = 0) -> None:
        self.want_header = want_header
        self._visit = visit
        self._first = first
        self._carry = bytearray()  # the start of a line not yet ended
        self._long = False  # inside a line over MAX_CARRY
        self.header: bytes | None = None
        self._head = bytearray()
        self.skip = 0
        self.size = 0  # bytes seen
        self.whole = 0  # bytes up to the end of the last whole line
        self.count = 0
        self.ts = ""
        self._ts_buf = bytearray()  # the start of the first event's line
        self._blanks = BlankLines()

    def feed(self, raw: bytes) -> None:
        piece = self._blanks.feed(raw)
        if not piece:
            return
        base = self.size
        self.size += len(piece)
        if self.want_header and self.header is None:
            nl = piece.find(b"\n")
            self._head += piece[: nl if nl >= 0 else len(piece)]
            if len(self._head) > self.MAX_HEADER:
                raise FrameError("first line too long for a session header")
            if nl < 0:
                return
            self.header = bytes(self._head)
            self.skip = base + nl + 1
            self.whole = self.skip
            piece = piece[nl + 1 :]
            base = self.skip
            if not piece:
                return
        if not self.ts:
            self._track_ts(piece)
        if self._visit is not None:
            self._see_lines(piece)
        nl_count = piece.count(b"\n")  # no blank lines left: one per event
        if nl_count:
            self.count += nl_count
            self.whole = base + piece.rfind(b"\n") + 1

    def _see_lines(self, piece: bytes) -> None:
        """The whole lines completed by `piece`, with the index of the first, to `visit`: the
        scan's one decompression serves the marker search too (a second pass over every
        frame was 60 % of a compressed cold open)."""
        cut = piece.rfind(b"\n") + 1
        if not cut:
            if not self._long:
                self._carry += piece
                if len(self._carry) > self.MAX_CARRY:
                    self._carry, self._long = bytearray(), True
            return
        index = self._first + self.count
        if self._long:
            start = piece.find(b"\n") + 1
            data, index, self._long = piece[start:cut], index + 1, False
        else:
            data = bytes(self._carry) + piece[:cut] if self._carry else piece[:cut]
        self._carry = bytearray(piece[cut:])
        if data:
            self._visit(index, data)  # type: ignore[misc]

    def _track_ts(self, piece: bytes) -> None:
        """`piece` never starts with a newline here: BlankLines drops those at a line start,
        and the header's own newline is cut off with it."""
        want = len(TS_PREFIX) + TS_LEN
        self._ts_buf += piece[: want - len(self._ts_buf)]
        if len(self._ts_buf) >= want or b"\n" in self._ts_buf:
            self.ts = first_ts(bytes(self._ts_buf)) or "?"
            if self.ts == "?":
                self.ts = ""
                self._ts_buf = bytearray(b"x")  # stop looking: its first line has no ts


def scan_zstd(mm: Any, size: int, warnings: list[str],
              visit: Callable[[int, bytes], None] | None = None,
              forget: Callable[[int], None] | None = None, *,
              start: int = 0, first: int = 0, header: bytes | None = None
              ) -> tuple[bytes | None, list[Segment]]:
    """The header line and the segments, one per readable frame. `visit(first event, bytes)`
    sees whole lines as they are decompressed; `forget(index)` is told when the events from
    `index` on, already visited, turn out to be in a frame that is not kept. A scan that
    resumes past what an index covers starts at the frame at `start`, whose first event is
    number `first`, with the `header` already known."""
    import zstandard

    segments: list[Segment] = []
    pos = start
    while pos < size:
        if pos + 8 <= size and skippable(mm, pos):
            pos += 8 + int.from_bytes(mm[pos + 4 : pos + 8], "little")
            continue
        frame_start = pos
        problem = ""
        counter = FrameCounter(header is None, visit, first)
        try:
            end, complete, block_ends = frame_end(mm, pos, size)
        except FrameError as exc:
            end, complete, block_ends, problem = size, False, [], str(exc)
        if not problem:
            dobj = zstandard.ZstdDecompressor().decompressobj()
            fed = frame_start
            stops = [*block_ends, end] if complete else block_ends
            try:
                for stop in stops:
                    if stop > fed:
                        counter.feed(dobj.decompress(mm[fed:stop]))
                        fed = stop
            except (zstandard.ZstdError, FrameError) as exc:
                problem = f"corrupt zstd data ({exc})"
        if counter.header is not None and header is None:
            header = counter.header
        if problem:
            if frame_start == 0 and header is None:
                raise FrameError(problem)
            trusted = not _checksummed(mm, frame_start)
            resume = mm.find(ZSTD_MAGIC, frame_start + 1, size)
            kept = counter.count if trusted else 0
            if forget is not None:
                forget(first + kept)
            warnings.append(
                f"compressed data is damaged in the frame at byte {frame_start:,} ({problem}); "
                f"the events it held from event {first + kept:,} on are lost"
                + (f"; reading resumed at byte {resume:,}" if resume >= 0 else
                   "; nothing after it could be read"))
            if kept:
                segments.append(Segment(frame_start, resume if resume >= 0 else size, first, kept,
                                        counter.ts, counter.whole, counter.skip))
                first += kept
            if resume < 0:
                break
            pos = resume
            continue
        if counter.whole != counter.size:
            if complete:
                warnings.append(f"the frame at byte {frame_start:,} ends inside a line; that "
                                "line is skipped")
            else:
                warnings.append(f"last line is incomplete ({counter.size - counter.whole} bytes, "
                                "cut mid-write); ignored")
        elif not complete and (block_ends[-1] if block_ends else frame_start) < size:
            warnings.append("compressed stream is cut mid-block (recorder killed while "
                            "writing); the events being written are lost")
        if counter.count:
            segments.append(Segment(frame_start, end, first, counter.count, counter.ts,
                                    counter.whole, counter.skip))
            first += counter.count
        pos = end
        if not complete:
            break
    return header, segments



def _checksummed(mm: Any, pos: int) -> bool:
    return len(mm) > pos + 4 and bool(mm[pos + 4] & 0x04)

"""The bytes of a session, plain or zstd, cut into segments that can be read on their own.

A segment is a run of whole lines: for a plain file about 1 MiB of the file itself, for a
`.jsonl.zst` file one zstd frame (the recorder closes a frame every ~1 MiB, see SessionWriter;
the frames are scanned by console/sessions/zstd_scan.py).
Knowing where every segment starts, how many events it holds and the time of its first event is
all that opening, seeking and replaying need, so a session of any length opens without parsing
JSON, and a compressed one without a temporary copy: a frame is decompressed when it is read.

Damage is found here, once: a zstd frame that fails to decode or whose checksum does not match
is dropped whole (its bytes cannot be trusted) and the scan resumes at the next frame, so one bad
byte loses one frame, never the session. Every scan works in bounded pieces, so a small file that
expands to gigabytes of newlines costs time in proportion, not memory.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from console.errors import FrameError

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PLAIN_SEGMENT = 1 << 20
TS_PREFIX = b'{"ts":"'
TS_LEN = 24
_BLANK_RUN = re.compile(rb"\n\n+")
_CACHE_FRAMES = 4


@dataclass(slots=True)
class Segment:
    src_start: int  # byte range in the file as stored (compressed for .zst)
    src_end: int
    first: int  # index of its first event in the session
    count: int  # events (non-blank lines) it holds
    ts: str  # timestamp text of its first event ("" when that line has none)
    size: int  # decompressed bytes up to the end of its last whole line
    skip: int = 0  # leading decompressed bytes that are not events (the header line)

    def as_list(self) -> list[Any]:
        return [self.src_start, self.src_end, self.first, self.count, self.ts, self.size,
                self.skip]

    @classmethod
    def from_list(cls, row: list[Any]) -> Segment:
        a, b, first, count, ts, size, skip = row
        for v in (a, b, first, count, size, skip):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError("bad segment")
        if not isinstance(ts, str) or b < a or skip > size or count == 0:
            raise ValueError("bad segment")
        return cls(a, b, first, count, ts, size, skip)


def count_events(data: bytes) -> int:
    """Non-blank lines in `data`, which starts at a line start and ends with a newline.

    One split rather than a newline count plus a search for blank lines: bytes' search for a
    two-byte needle crawls, and this was most of the cost of opening a session without its
    index. A plain segment is at most 1 MiB (or one line), so the list stays bounded."""
    lines = data.split(b"\n")
    lines.pop()  # what follows the final newline
    n = len(lines)
    if b"" in lines:
        n -= lines.count(b"")
    return n


def split_events(data: bytes) -> list[bytes]:
    if data[:1] == b"\n" or b"\n\n" in data:
        data = _BLANK_RUN.sub(b"\n", data).lstrip(b"\n")
    lines = data.split(b"\n")
    lines.pop()  # data ends with a newline: the last piece is empty
    return lines


class BlankLines:
    """Drops blank lines from decompressed output as it comes, so what a frame expands to is
    held (and counted) without them: 300 MB of newlines become nothing, not 300 M lines."""

    def __init__(self) -> None:
        self._at_line_start = True

    def feed(self, piece: bytes) -> bytes:
        if self._at_line_start:
            piece = piece.lstrip(b"\n")
        if b"\n\n" in piece:
            piece = _BLANK_RUN.sub(b"\n", piece)
        if piece:
            self._at_line_start = piece[-1:] == b"\n"
        return piece


# The longest line a session may hold: an event is kilobytes (a log block a few MiB at most),
# and a longer line is damage, never held whole (issue 48 row 8: a 33 KB `.jsonl.zst` that
# expands to one 1 GiB line took 5.2 GB of memory to replay). Reading a segment puts LONG_LINE
# in its place, which the decoder reports as the one warning of a damaged record.
MAX_LINE = 64 << 20
LONG_LINE = b"<a line longer than 64 MiB: not read>"


class LineBound:
    """Output with every line longer than MAX_LINE replaced by LONG_LINE as it comes, so such a
    line is never held whole. Fed pieces of at most MAX_LINE bytes (zstd blocks are 128 KiB,
    plain files are fed 1 MiB at a time): only the line that spans pieces can be long, so each
    piece costs two searches, not one per line."""

    def __init__(self) -> None:
        self.out = bytearray()
        self._start = 0  # where the line being written began in `out`
        self._dropping = False  # inside a long line, after its LONG_LINE

    def feed(self, piece: bytes) -> None:
        if self._dropping:
            nl = piece.find(b"\n")
            if nl < 0:
                return
            self.out += b"\n"
            self._dropping, self._start, piece = False, len(self.out), piece[nl + 1:]
        nl = piece.find(b"\n")
        if len(self.out) - self._start + (len(piece) if nl < 0 else nl + 1) > MAX_LINE:
            del self.out[self._start:]
            self.out += LONG_LINE
            if nl < 0:
                self._dropping = True
                return
            self.out += b"\n"
            piece = piece[nl + 1:]
        self.out += piece
        last = piece.rfind(b"\n")
        if last >= 0:
            self._start = len(self.out) - (len(piece) - last - 1)


def first_ts(data: bytes) -> str:
    start = 0
    while start < len(data) and data[start : start + 1] == b"\n":
        start += 1
    head = data[start : start + len(TS_PREFIX) + TS_LEN]
    if head.startswith(TS_PREFIX) and len(head) == len(TS_PREFIX) + TS_LEN:
        return head[len(TS_PREFIX) :].decode("ascii", "replace")
    return ""


def frame_end(mm: Any, pos: int, size: int) -> tuple[int, bool, list[int]]:
    """Walk one zstd frame's block headers (RFC 8878) from `pos`: where it ends, whether it is
    complete, and where each complete block ends (so the decompressor can be fed whole blocks
    and whatever decoded before a cut or damage is kept). Raises FrameError on a bad header."""
    if mm[pos : pos + 4] != ZSTD_MAGIC:
        raise FrameError("no zstd frame magic")
    if pos + 5 > size:
        return size, False, []
    fhd = mm[pos + 4]
    fcs_flag, single, reserved, checksum, dict_flag = (
        fhd >> 6, (fhd >> 5) & 1, (fhd >> 3) & 1, (fhd >> 2) & 1, fhd & 3)
    if reserved:
        raise FrameError("reserved bit set in the frame header")
    p = pos + 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag] + (1 if single else 0, 2, 4, 8)[fcs_flag]
    ends: list[int] = []
    while True:
        if p + 3 > size:
            return size, False, ends
        header = int.from_bytes(mm[p : p + 3], "little")
        last, btype, bsize = header & 1, (header >> 1) & 3, header >> 3
        if btype == 3:
            raise FrameError("reserved block type")
        if bsize > 128 * 1024:
            raise FrameError("block larger than the format allows")
        p += 3 + (1 if btype == 1 else bsize)
        if p > size:
            return size, False, ends
        ends.append(p)
        if last:
            if checksum:
                p += 4
                if p > size:
                    return size, False, ends
            return p, True, ends


def skippable(mm: Any, pos: int) -> bool:
    return mm[pos + 1 : pos + 4] == b"\x2a\x4d\x18" and (mm[pos] & 0xF0) == 0x50


class Source:
    """Read access to the decompressed bytes of one segment, with a small cache for zstd."""

    def __init__(self, mm: Any, compressed: bool) -> None:
        self.mm = mm
        self.compressed = compressed
        self._cache: OrderedDict[int, bytes] = OrderedDict()

    def data(self, seg: Segment) -> bytes:
        """The segment's event lines (whole lines, each ending with a newline)."""
        if not self.compressed:
            if seg.src_end - seg.src_start <= MAX_LINE:
                return self.mm[seg.src_start : seg.src_end]  # type: ignore[no-any-return]
            bound = LineBound()  # a plain segment this long is one long line
            for at in range(seg.src_start, seg.src_end, 1 << 20):
                bound.feed(self.mm[at : min(at + (1 << 20), seg.src_end)])
            return bytes(bound.out)
        hit = self._cache.get(seg.src_start)
        if hit is not None:
            self._cache.move_to_end(seg.src_start)
            return hit
        data = self._decompress(seg)[seg.skip :]
        self._cache[seg.src_start] = data
        if len(self._cache) > _CACHE_FRAMES:
            self._cache.popitem(last=False)
        return data

    def _decompress(self, seg: Segment) -> bytes:
        """Whole blocks fed one at a time, up to the indexed size: the same bytes the scan
        trusted, with output bounded by the index whatever the data claims to expand to."""
        import zstandard

        try:
            end, complete, block_ends = frame_end(self.mm, seg.src_start, seg.src_end)
        except FrameError as exc:
            raise FrameError(f"compressed data changed since it was indexed: {exc}") from None
        dobj = zstandard.ZstdDecompressor().decompressobj()
        blanks = BlankLines()
        out: list[bytes] = []
        bound: LineBound | None = None  # only once a line passes MAX_LINE (rare: damage)
        line = 0  # bytes of the line not yet ended
        got = 0
        fed = seg.src_start
        try:
            for stop in [*block_ends, end] if complete else block_ends:
                if got >= seg.size:
                    break
                if stop > fed:
                    piece = blanks.feed(dobj.decompress(self.mm[fed:stop]))
                    if bound is None:
                        nl = piece.find(b"\n")
                        if line + (len(piece) if nl < 0 else nl) > MAX_LINE:
                            bound = LineBound()
                            for held in out:
                                bound.feed(held)
                            out = []
                        else:
                            line = line + len(piece) if nl < 0 else \
                                len(piece) - piece.rfind(b"\n") - 1
                    if bound is not None:
                        bound.feed(piece[: seg.size - got])  # whole lines, the indexed size
                    else:
                        out.append(piece)
                    got += len(piece)
                    fed = stop
        except zstandard.ZstdError as exc:
            if got < seg.size:
                raise FrameError(f"compressed data changed since it was indexed: {exc}") from None
        if got < seg.size:
            raise FrameError("compressed data changed since it was indexed")
        return bytes(bound.out) if bound is not None else b"".join(out)[: seg.size]


def scan_plain(mm: Any, start: int, size: int, first: int, warnings: list[str],
               visit: Callable[[int, bytes], None] | None = None) -> tuple[list[Segment], int]:
    """Segments of whole lines from `start`; returns them and where the complete lines end.
    `visit(first event, bytes)` sees each segment's bytes while they are in hand."""
    segments: list[Segment] = []
    pos = start
    while pos < size:
        end = mm.rfind(b"\n", pos, min(pos + PLAIN_SEGMENT, size))
        if end < 0:
            end = mm.find(b"\n", pos + PLAIN_SEGMENT, size) if pos + PLAIN_SEGMENT < size else -1
        if end < 0:
            warnings.append(f"last line is incomplete ({size - pos} bytes, cut mid-write); ignored")
            return segments, pos
        if end + 1 - pos > MAX_LINE:  # one line past the bound: counted, never copied
            segments.append(Segment(pos, end + 1, first, 1, "", end + 1 - pos))
            first += 1
            pos = end + 1
            continue
        data = mm[pos : end + 1]
        n = count_events(data)
        if n:
            segments.append(Segment(pos, end + 1, first, n, first_ts(data), end + 1 - pos))
            if visit is not None:
                visit(first, data)
            first += n
        pos = end + 1
    return segments, pos

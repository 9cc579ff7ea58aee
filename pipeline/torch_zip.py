"""torch.save's file, written without torch.save's slow CRC: the 0.3 format's writer.

Why: speculators 0.3 trains from torch.save'd `data_{i}.pt` files. torch.save's zip writer
(miniz inside PyTorchStreamWriter) checksums every record with a table-driven CRC32 that runs at
~1.5-3 GB per CPU second: about half the writer's CPU, the reason the 0.3 writer reached only
0.42-0.62 of a plain write of the same bytes (docs/measurements.md, issue #54). Turning the CRC
off (`torch.serialization.set_crc32_options(False)`) writes zeros, which zip tools and older
loaders refuse. This module writes the same file itself: torch's own `_save` pickles the object
and hands over its records (so data.pkl, the record names and order are torch's), and the zip
around them is laid out as miniz lays it out for torch (each record's local header with a data
descriptor after the data, the "FB" extra field that pads every record's data to the storage
alignment, the central directory, the zip64 end records), each record's CRC computed with
zlib-ng's CRC32 (carry-less multiply: ~10 GB per CPU second here, `zlib.crc32` where zlib-ng is
not installed, correct but no faster than torch's) over 256 KiB pieces right after each is
written: the kernel's copy into the page cache has just read the piece into the CPU's cache, so
the CRC does not read the sample from memory a second time (0.91 of a plain write's CPU here
against 0.81 checksumming first). The tensors are written from their own memory: no copy of the
sample.

One record differs from torch.save's bytes: `.data/serialization_id`, which torch derives from
a hash of an unordered set of record names (std::hash, the C++ library's own) and the records'
CRCs; torch.load only reports it. Ours has the same 40-digit form (tests/pipeline/
test_torch_zip.py compares every other byte with torch.save's file). Where this torch lays the
file out otherwise (checked once per process against torch.save on a small object) or the file
would need zip64 (4 GiB), `save` returns False and the caller uses torch.save.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.writev import writev_all

_PIECE = 256 << 10  # bytes written, then checksummed while still in the CPU's L2 cache
_SMALL = 4096  # a record up to this size is checksummed, then written with the others
_LIMIT = 0xFFFFFFFF  # at or past it miniz writes zip64 fields: torch.save's path then
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_DESCRIPTOR = struct.Struct("<IIII")
_FLAGS = 0x0808  # bit 3: sizes and CRC in a data descriptor after the data; bit 11: UTF-8
_VERSION_RECORD = b"3\n"  # the C++ writer's `version` record (kMinProducedFileFormatVersion)


def fast_crc32() -> tuple[str, Callable[..., int]]:
    """The CRC32 function to use and its name: zlib-ng's where installed, else zlib's."""
    try:
        from zlib_ng import zlib_ng
    except ImportError:
        return "zlib", zlib.crc32
    return "zlib-ng", zlib_ng.crc32


class _Records:
    """What torch.serialization._save writes into its zip writer, kept instead of written:
    (name, bytes-like) in torch's order, a storage as a uint8 view of its own memory."""

    def __init__(self) -> None:
        self.records: list[tuple[str, memoryview]] = []

    def write_record(self, name: str, data: Any, nbytes: int) -> None:
        import torch

        if isinstance(data, str):
            view = memoryview(data.encode())
        elif isinstance(data, bytes | bytearray):
            view = memoryview(data)
        else:  # an UntypedStorage on the CPU
            t = torch.empty(0, dtype=torch.uint8)
            t.set_(data, 0, (nbytes,), (1,))
            view = t.numpy().data.cast("B") if nbytes else memoryview(b"")
        if len(view) != nbytes:
            raise ValueError(f"record {name}: {len(view)} bytes, torch said {nbytes}")
        self.records.append((name, view))


def archive_name(path: str | os.PathLike[str]) -> str:
    """The folder torch.save names inside the zip: the file's name less its last extension
    (PyTorchStreamWriter's basename), "archive" for a name that is not ASCII."""
    name = os.fspath(path)
    if not name.isascii():
        return "archive"
    return name.replace("\\", "/").rsplit("/", 1)[-1].rsplit(".", 1)[0]


def _padding(offset: int, name_len: int, alignment: int) -> bytes:
    """The "FB" extra field that starts a record's data on `alignment` (torch's getPadding)."""
    start = offset + _LOCAL.size + name_len + 4
    pad = -start % alignment
    return b"FB" + struct.pack("<H", pad) + b"Z" * pad


def _hash_combine(seed: int, value: int) -> int:
    """c10::hash_combine on uint64."""
    return (seed ^ (value + 0x9E3779B9 + (seed << 6) + (seed >> 2))) & 0xFFFFFFFFFFFFFFFF


class _Zip:
    """miniz's layout for torch, written to `fd` as it goes (or collected, `fd` None)."""

    def __init__(self, fd: int | None, archive: str, alignment: int,
                 crc: Callable[..., int]) -> None:
        self.fd, self.archive, self.alignment, self.crc = fd, archive, alignment, crc
        self.offset = 0
        self.pending: list[memoryview] = []
        self.out: list[bytes] = []
        self.central: list[bytes] = []
        self.combined = 0  # c10::hash_combine of the records' CRCs, as the C++ writer keeps
        self.count = 0

    def _emit(self, buf: memoryview, flush: bool = False) -> None:
        self.pending.append(buf)
        self.offset += len(buf)
        if flush or len(self.pending) >= 64:
            if self.fd is None:
                self.out.extend(bytes(b) for b in self.pending)
            elif self.pending:
                writev_all(self.fd, self.pending, sum(len(b) for b in self.pending))
            self.pending = []

    def _pieces(self, data: memoryview) -> int:
        """`data` written in pieces, each checksummed right after its write (the kernel's copy
        into the page cache has just read it into the CPU's cache: the CRC does not read the
        sample from memory a second time); its CRC. The pieces end where the file's offset is
        a multiple of _PIECE (the first one up to a _PIECE longer or shorter): every write
        but a record's last fills whole pages. One write call a piece, no list work: this
        loop runs 450 times a 117 MB sample."""
        crc32, fd = self.crc, self.fd
        size = len(data)
        at = -(self.offset + _SMALL) % _PIECE + _SMALL  # _SMALL to _PIECE + _SMALL bytes
        first = data[:at]
        self._emit(first, flush=True)  # with the record's header
        crc = crc32(first)
        while at < size:
            piece = data[at:at + _PIECE]
            if fd is None:
                self.out.append(bytes(piece))
            else:
                n = os.write(fd, piece)
                if n != len(piece):  # a signal, a full disk: the rest, or the error
                    writev_all(fd, [piece[n:]], len(piece) - n)
            crc = crc32(piece, crc)
            at += _PIECE
        self.offset += max(0, size - len(first))
        return crc

    def record(self, name: str, data: memoryview) -> None:
        full = f"{self.archive}/{name}".encode()
        start = self.offset
        extra = _padding(start, len(full), self.alignment)
        self._emit(memoryview(_LOCAL.pack(0x04034B50, 0, _FLAGS, 0, 0, 0, 0, 0, 0, len(full),
                                          len(extra)) + full + extra))
        crc = 0
        size = len(data)
        if size <= _SMALL:
            crc = self.crc(data)
            self._emit(data)
        else:
            crc = self._pieces(data)
        self._emit(memoryview(_DESCRIPTOR.pack(0x08074B50, crc, size, size)))
        self.combined = _hash_combine(self.combined, crc)
        self.central.append(_CENTRAL.pack(0x02014B50, 0, 0, _FLAGS, 0, 0, 0, crc, size, size,
                                          len(full), 0, 0, 0, 0, 0, start) + full)
        self.count += 1

    def finish(self, names: list[str], serialization_id: bytes | None) -> None:
        self.record("version", memoryview(_VERSION_RECORD))
        if serialization_id is None:
            names_hash = 0
            for n in sorted([*names, "version", ".data/serialization_id"]):
                names_hash = _hash_combine(names_hash, zlib.crc32(n.encode()))
            serialization_id = f"{names_hash:020d}{self.combined:020d}".encode()
        self.record(".data/serialization_id", memoryview(serialization_id))
        cd_start = self.offset
        cd = b"".join(self.central)
        eocd64 = self.offset + len(cd)
        tail = (struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, self.count,
                            self.count, len(cd), cd_start)
                + struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1)
                + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, self.count, self.count, len(cd),
                              cd_start, 0))
        self._emit(memoryview(cd + tail), flush=True)


def _records(obj: Any) -> list[tuple[str, memoryview]]:
    """torch.save's records for `obj`, by torch's own `_save` (the same in torch 2.10 and
    2.13): data.pkl, .format_version, .storage_alignment, byteorder, data/0..."""
    from torch import serialization

    rec = _Records()
    serialization._save(obj, rec, pickle, serialization.DEFAULT_PROTOCOL, False)
    return rec.records


def _alignment() -> int:
    from torch import serialization

    get = getattr(serialization, "_get_storage_alignment", None)
    return int(get()) if get else 64


def to_bytes(obj: Any, archive: str, serialization_id: bytes | None = None) -> bytes:
    """The whole file in memory (the layout check: a small object)."""
    z = _Zip(None, archive, _alignment(), fast_crc32()[1])
    records = _records(obj)
    for name, data in records:
        z.record(name, data)
    z.finish([n for n, _ in records], serialization_id)
    return b"".join(z.out)


_LAYOUT_OK: bool | None = None


def layout_matches() -> bool:
    """Whether this torch's torch.save lays a file out as this module does (every byte but
    the serialization id): checked once per process on a small object."""
    global _LAYOUT_OK
    if _LAYOUT_OK is None:
        import torch

        try:
            obj = {"input_ids": torch.arange(3), "hidden_states": [torch.ones(2, 3).bfloat16()],
                   "loss_mask": torch.ones(3, dtype=torch.long)}
            buf = io.BytesIO()
            torch.save(obj, buf)
            ref = buf.getvalue()
            sid = zipfile.ZipFile(buf).read("archive/.data/serialization_id")
            _LAYOUT_OK = to_bytes(obj, "archive", sid) == ref
        except Exception:  # any surprise in torch's internals: torch.save's path
            _LAYOUT_OK = False
    return _LAYOUT_OK


def save(obj: Any, path: Path) -> bool:
    """`obj` written to `path` as torch.save would write it (see the module's docstring);
    False, and nothing written, where torch.save must do it (the layout check failed, the
    file would need zip64)."""
    if not layout_matches():
        return False
    records = _records(obj)
    headers = 256 + _alignment()  # a record's headers and padding, at most
    if sum(len(d) + headers for _, d in records) + 2 * headers >= _LIMIT:
        return False
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        z = _Zip(fd, archive_name(path), _alignment(), fast_crc32()[1])
        for name, data in records:
            z.record(name, data)
        z.finish([n for n, _ in records], None)
    finally:
        os.close(fd)
    return True

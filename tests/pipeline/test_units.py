"""pipeline/units.py: the one byte formatter, IEC units (1 KiB = 1024 B) at every size."""

from __future__ import annotations

from pipeline.units import fmt_bytes


def test_sizes_read_in_binary_units() -> None:
    assert fmt_bytes(None) == "-"
    assert fmt_bytes(0) == "0 B"
    assert fmt_bytes(1023) == "1023 B"
    assert fmt_bytes(1024) == "1.0 KiB"
    assert fmt_bytes(1000 * 1000) == "976.6 KiB"  # a decimal megabyte is not a MiB
    assert fmt_bytes(3 * 2**20 + 2**19) == "3.5 MiB"
    assert fmt_bytes(1.5 * 2**30) == "1.5 GiB"
    assert fmt_bytes(2 * 2**40) == "2.0 TiB"
    assert fmt_bytes(5 * 2**50) == "5.0 PiB"
    assert fmt_bytes(2**60) == "1024.0 PiB"  # the largest unit holds what is past it
    assert fmt_bytes(-2048) == "-2.0 KiB"


def test_a_pinned_unit_writes_the_number_alone() -> None:
    assert fmt_bytes(64 * 2**30, "GiB") == "64.0"
    assert fmt_bytes(3 * 2**29, "GiB", 0) == "2"
    assert fmt_bytes(2**20 + 2**19, "MiB", 2) == "1.50"
    assert fmt_bytes(None, "GiB") == "-"

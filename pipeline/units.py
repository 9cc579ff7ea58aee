"""Byte sizes as every screen, line and report writes them, in one convention: IEC binary units,
1 KiB = 1024 B, 1 MiB = 1024 KiB, 1 GiB = 1024 MiB (then TiB, PiB), so one size reads the same
everywhere (six formatters once disagreed: KB = 1000 in one, KiB in the next). A rate is a size
per second: `fmt_bytes(rate) + "/s"`. It lives in pipeline/, the lowest layer (the box's stages
write sizes too), so remote/ and console/ import it and pipeline imports neither.
"""

from __future__ import annotations

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def fmt_bytes(n: float | None, unit: str | None = None, digits: int = 1) -> str:
    """`512 B`, `4.1 MiB`, `1.5 GiB`: the largest unit the size reaches, `digits` decimals; "-"
    for no value. With `unit` (one of UNITS), the number alone in that unit, for a column or a
    pair that writes the unit once ("12.3" of "12.3/80.0 GiB")."""
    if n is None:
        return "-"
    if unit is not None:
        return f"{n / 1024 ** UNITS.index(unit):.{digits}f}"
    power = 0
    while abs(n) >= 1024 and power < len(UNITS) - 1:
        n /= 1024
        power += 1
    return f"{n:.0f} B" if power == 0 else f"{n:.{digits}f} {UNITS[power]}"

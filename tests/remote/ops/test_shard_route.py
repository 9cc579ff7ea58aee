"""remote/ops/shard_route.py on this machine's own transport (the `local` host): the shared-storage
marker seen where it was written and not elsewhere, removed after; the relay's link measure and
estimate; the refusal line. The fleet test (tests/e2e/test_sharded_extract.py) runs the same
over SSH between boxes that do and do not share the disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote.errors import EXIT_USAGE, StageFailed
from remote.link.transport import LocalTransport
from remote.ops import shard_route
from remote.ops.shard_route import LinkRate


async def test_the_marker_is_seen_at_its_path_only_and_removed(tmp_path: Path) -> None:
    home = LocalTransport()
    await home.connect()
    out = tmp_path / "out"
    path, token = await shard_route.write_marker(home, str(out))
    assert Path(path).read_text() == token and Path(path).parent.parent == out
    assert await shard_route.sees_marker(home, path, token)
    assert not await shard_route.sees_marker(home, path, "0" * 32)  # another run's token
    elsewhere = str(tmp_path / "other" / Path(path).relative_to(tmp_path))
    assert not await shard_route.sees_marker(home, elsewhere, token)  # another disk's path
    again, token2 = await shard_route.write_marker(home, str(out))
    assert token2 != token  # fresh every run: a stale marker cannot pass
    await shard_route.remove_marker(home, path)
    await shard_route.remove_marker(home, again)
    assert not (out / shard_route.MARKER_DIR).exists()


async def test_a_marker_that_cannot_be_written_is_one_error(tmp_path: Path) -> None:
    home = LocalTransport()
    await home.connect()
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StageFailed, match=r"cannot write under the output directory"):
        await shard_route.write_marker(home, str(tmp_path / "file"))


async def test_the_link_is_measured_with_random_bytes_and_cleaned_up(tmp_path: Path) -> None:
    t = LocalTransport()
    await t.connect()
    rate = await shard_route.measure(t, t, str(tmp_path / "box"), str(tmp_path / "home"),
                                     size=1 << 20)
    assert rate.down > 0 and rate.up > 0
    assert list((tmp_path / "box").iterdir()) == [] and list((tmp_path / "home").iterdir()) == []


def test_the_estimate_and_its_words() -> None:
    rates = {"b2": LinkRate(down=100e6, up=50e6), "b3": LinkRate(down=10e6, up=50e6)}
    # b3's pull is the slowest (10 s); both pushes share the training box's link (4 s).
    assert shard_route.estimate_seconds({"b2": 100_000_000, "b3": 100_000_000}, rates) == 14.0
    assert [shard_route.duration(s) for s in (14.0, 95, 7380, 200_000)] == \
        ["14 s", "1 min 35 s", "2 h 3 min", "2 d 7 h"]
    err = shard_route.refuse_relay("box1", "/data/out", ["box2", "box3"])
    assert err.exit_code == EXIT_USAGE
    assert str(err).startswith("extract hosts box2, box3 do not share box1's output storage "
                               "(/data/out): nothing started;")
    assert "--relay-through-console" in str(err) and "\n" not in str(err)

"""One rollback of two files is all-or-nothing, like one apply: real SIGKILLs of the box-side
helper after each of its steps (locally) and of the helper or the console over the real sshd;
after each, the next command finds both files in one state, and no hand edit is ever lost."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from remote.errors import EXIT_OK
from remote.patcher.runner import rollback_request
from tests import patch_kill_harness as harness
from tests.patchbox import GENERATOR, WORKER, make_site_packages, sha256
from tests.sshd_harness import Sshd

EDIT = "# hand edit on the box\n"


def _state(path: Path, original: str, patched: str) -> str:
    text = path.read_text()
    return ("original" if text == original else "patched" if text == patched else
            "edited" if text == patched + EDIT else "torn")


async def test_kill_between_the_files_of_a_rollback_is_completed_next(tmp_path: Path) -> None:
    """SIGKILL after every step of a two-file rollback --force, the first file edited by hand
    after apply (so the edit is kept beside it). After each kill the pair may be split, but
    only with the journal there; the next command (verify, or rollback) completes the rollback,
    and the edit survives, in place or in exactly one kept copy."""
    sp = make_site_packages(tmp_path)
    worker, gen = sp / WORKER, sp / GENERATOR
    originals = {worker: worker.read_text(), gen: gen.read_text()}
    digests = {worker: sha256(worker), gen: sha256(gen)}
    await harness.local_patcher(sp, tmp_path / "box")[0].apply()
    patched = {worker: worker.read_text(), gen: gen.read_text()}
    assert patched[worker] != originals[worker] and patched[gen] != originals[gen]
    worker.write_text(patched[worker] + EDIT)
    edited = patched[worker] + EDIT
    # The applied state (both files and their backups, as the real apply left them), put back
    # before each kill; the request is what `patch rollback --force` sends for that state.
    applied = {p: p.read_bytes() for p in sp.rglob("*")
               if (p.is_file() and "eagle3-" in p.name) or p in (worker, gen)}
    assert len(applied) == 4
    plans = await harness.local_patcher(sp, tmp_path / "box")[0].plan(emit=False, recover=True)
    entries, _ = rollback_request(plans, None)
    assert [e["action"] for e in entries] == ["restore", "restore"]
    assert [e["keep_edited"] for e in entries] == [True, False]
    split_seen = 0
    steps_seen: set[str] = set()
    # checked, journal tmp-written, journal-written, kept tmp-written, kept-edited, then per
    # file tmp-written, restored; then journal-removed: 11. One more lets a run finish.
    for step in range(0, 13):
        for path, data in applied.items():
            path.write_bytes(data)
        seen = harness.kill_after({"op": "rollback_all", "files": entries}, step)
        steps_seen.update(seen)

        states = {p: _state(p, originals[p], patched[p]) for p in (worker, gen)}
        assert "torn" not in states.values(), (step, seen, states)  # each file whole ...
        kept = list(worker.parent.glob("custom_worker.py.eagle3-edited-*"))
        # ... the edit always somewhere: still in place, or kept beside it
        assert states[worker] == "edited" or [k.read_text() for k in kept] == [edited], seen
        journal = (worker.parent / harness.JOURNAL).is_file()
        split = len({s == "original" for s in states.values()}) > 1
        if split:  # ... and a split pair only with the journal that completes it
            split_seen += 1
            assert journal, (step, seen, states)

        patcher, events = harness.local_patcher(sp, tmp_path / "box")
        if step % 2 == 0:
            plans = await patcher.verify()
            effects = {p.rel: p.in_effect for p in plans}
            if journal:  # completed: both original, the edit kept
                assert all(v == frozenset() for v in effects.values()), (step, seen, effects)
                harness.assert_completed(events, "rollback", originals, (step, seen))
            else:  # untouched, or finished: the pair is one of the two states it started from
                assert states in ({worker: "edited", gen: "patched"},
                                  {worker: "original", gen: "original"}), (step, seen)
        await patcher.rollback(force=True)  # completes what is pending, then the rest
        kept = list(worker.parent.glob("custom_worker.py.eagle3-edited-*"))
        assert [k.read_text() for k in kept] == [edited], (step, seen)
        kept[0].unlink()  # the one thing meant to stay: the operator's edit
        harness.assert_restored(digests, (step, seen))
    harness.assert_sweep_landed(split_seen, 2, steps_seen,
                                {"journal-written", "kept-edited", "restored", "journal-removed"})


@pytest.mark.ssh
@pytest.mark.slow
def test_kills_of_a_rollback_over_ssh_never_leave_the_pair_split(
        sshd: Sshd, tmp_path: Path) -> None:
    """`console patch rollback` over the real sshd, its helper on the box SIGKILLed after the
    first file is restored, then after its journal is written. After each, the next
    `patch verify` over SSH completes the rollback and exits 0. (A SIGKILLed console leaves the
    helper running to its end on the box: the apply test covers that path once.)"""
    box, worker, gen, originals = harness.pair_box(sshd, tmp_path)
    console, finish, helper_pids = box.console, box.finish, box.helper_pids

    split_seen = 0
    for how in ("helper-between-files", "helper-after-journal"):
        finish(console("patch", "apply", "--yes"))
        assert sha256(worker) != originals[worker] and sha256(gen) != originals[gen]
        rollback = console("patch", "rollback", slow=True)  # killed below
        if how == "helper-between-files":
            harness.until(lambda: sha256(worker) == originals[worker])
            assert sha256(gen) != originals[gen]
            split_seen += 1
        else:
            harness.until(lambda: (worker.parent / harness.JOURNAL).exists())
        for pid in helper_pids():
            os.kill(pid, signal.SIGKILL)
        rollback.communicate(timeout=120)
        assert rollback.returncode != EXIT_OK
        harness.until(lambda: not helper_pids())
        assert (worker.parent / harness.JOURNAL).exists()
        out = finish(console("patch", "verify"))
        assert "inconsistent" not in out
        assert "completed an interrupted rollback" in out, out
        harness.assert_restored(originals, out)
    assert split_seen == 1

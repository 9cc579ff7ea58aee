"""The patcher under hand edits and kills: rollback never discards an edit silently, verify says
"inconsistent" in words, and one apply of two files is all-or-nothing (a journal on the box that
the next verify / apply / rollback completes), with real SIGKILLs locally and over real sshd."""

from __future__ import annotations

import base64
import os
import signal
from pathlib import Path

import pytest

from console.cli import main
from remote.errors import EXIT_OK, EXIT_REFUSED
from remote.patcher.plan import compose, recipes_for
from tests import patch_kill_harness as harness
from tests.local_box import local_console_toml
from tests.patchbox import GENERATOR, WORKER, make_site_packages, sha256, wheel_file
from tests.sshd_harness import Sshd


def _cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sp: Path) -> list[str]:
    monkeypatch.chdir(tmp_path)
    local_console_toml(tmp_path)
    return ["--host", "local", "--site-packages", str(sp), "--no-record"]


def test_rollback_refuses_a_hand_edit_and_force_keeps_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    sp = make_site_packages(tmp_path)
    worker, gen = sp / WORKER, sp / GENERATOR
    common = _cli(tmp_path, monkeypatch, sp)
    assert main(["patch", "apply", "--yes", *common]) == EXIT_OK
    patched_gen = gen.read_bytes()
    edited = worker.read_text() + "# hand edit on the box\n"
    worker.write_text(edited)
    capsys.readouterr()

    assert main(["patch", "verify", *common]) == EXIT_REFUSED
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "custom_worker.py" in x)
    assert "inconsistent" in line and "verified: in effect" not in line, out

    assert main(["patch", "rollback", *common]) == EXIT_REFUSED
    out = capsys.readouterr()
    text = out.out + out.err
    assert "differs from both its original and the patched text" in text
    assert "--force" in text
    # Nothing touched, in either file: the refusal comes before any write.
    assert worker.read_text() == edited and gen.read_bytes() == patched_gen

    assert main(["patch", "rollback", "--force", *common]) == EXIT_OK
    assert sha256(worker) == sha256(wheel_file(WORKER))
    assert sha256(gen) == sha256(wheel_file(GENERATOR))
    kept = list(worker.parent.glob("custom_worker.py.eagle3-edited-*"))
    assert len(kept) == 1 and kept[0].read_text() == edited
    assert "kept as" in capsys.readouterr().out


def _apply_all_request(sp: Path) -> tuple[dict, dict[Path, str]]:
    files = []
    patched: dict[Path, str] = {}
    for rel, recipes in recipes_for("speculators").items():
        path = sp / "speculators" / rel
        text = compose(path.read_text(), recipes)
        patched[path] = text
        sha = sha256(path)
        files.append({"file": str(path), "expect_sha256": sha, "original_sha256": sha,
                      "content_b64": base64.b64encode(text.encode()).decode()})
    return {"op": "apply_all", "files": files}, patched


async def test_kill_between_files_is_completed_by_the_next_command(tmp_path: Path) -> None:
    """SIGKILL after every step of a two-file apply; after each, the next command (verify,
    then rollback, alternating) never sees one file patched and the other original."""
    sp = make_site_packages(tmp_path)
    worker, gen = sp / WORKER, sp / GENERATOR
    originals = {worker: sha256(worker), gen: sha256(gen)}
    torn_seen = 0
    steps_seen: set[str] = set()
    # checked, tmp-written (journal), journal-written, then per file: tmp-written, backed-up,
    # tmp-written, replaced; then journal-removed: 12 steps. 13 lets one run finish.
    for step in range(0, 14):
        request, patched = _apply_all_request(sp)
        seen = harness.kill_after(request, step)
        steps_seen.update(seen)
        states = {p: ("patched" if p.read_text() == patched[p] else
                      "original" if sha256(p) == originals[p] else "torn") for p in (worker, gen)}
        assert "torn" not in states.values(), (step, seen)  # each file whole ...
        if len(set(states.values())) > 1:
            torn_seen += 1  # ... but the pair can be split until the next command runs
            assert (worker.parent / harness.JOURNAL).is_file()
        patcher, events = harness.local_patcher(sp, tmp_path / "box")
        if step % 2 == 0:
            plans = await patcher.verify()
            assert all(p.in_effect is not None for p in plans)
            kinds = {p.rel: p.in_effect for p in plans}
            assert len({bool(v) for v in kinds.values()}) == 1, (step, seen, kinds)
            if len(set(states.values())) > 1:
                harness.assert_completed(events, "apply", patched, (step, seen))
            await patcher.rollback()
        else:
            await patcher.rollback()  # completes, then undoes
        harness.assert_restored(originals, (step, seen))
    harness.assert_sweep_landed(torn_seen, 3, steps_seen,
                                {"journal-written", "replaced", "backed-up", "journal-removed"})


@pytest.mark.ssh
@pytest.mark.slow
def test_kills_of_an_apply_over_ssh_never_leave_the_pair_split(
        sshd: Sshd, tmp_path: Path) -> None:
    """`console patch apply --yes` over the real sshd: the helper on the box SIGKILLed after its
    first file, or after its journal, or the console SIGKILLed mid-apply. After each, the next
    `patch verify` over SSH finds both files in one state and exits 0."""
    box, worker, gen, originals = harness.pair_box(sshd, tmp_path)
    console, helper_pids = box.console, box.helper_pids

    split_seen = 0
    for how in ("helper-between-files", "helper-after-journal", "console-mid-apply"):
        apply = console("patch", "apply", "--yes", slow=True)  # killed below
        if how == "helper-between-files":
            harness.until(lambda: sha256(worker) != originals[worker])
            assert sha256(gen) == originals[gen]
            for pid in helper_pids():
                os.kill(pid, signal.SIGKILL)
            split_seen += 1
        elif how == "helper-after-journal":
            harness.until(lambda: (worker.parent / harness.JOURNAL).exists())
            for pid in helper_pids():
                os.kill(pid, signal.SIGKILL)
        else:
            harness.until(lambda: bool(helper_pids()))
            os.kill(apply.pid, signal.SIGKILL)
        apply.communicate(timeout=120)
        harness.until(lambda: not helper_pids())
        verify = console("patch", "verify")
        out, _ = verify.communicate(timeout=120)
        assert verify.returncode == EXIT_OK, (how, out)
        assert "inconsistent" not in out
        states = {sha256(worker) == originals[worker], sha256(gen) == originals[gen]}
        assert len(states) == 1, (how, out)  # both original or both patched
        assert not (worker.parent / harness.JOURNAL).exists()
        rollback = console("patch", "rollback")
        out, _ = rollback.communicate(timeout=120)
        assert rollback.returncode == EXIT_OK, (how, out)
        assert sha256(worker) == originals[worker] and sha256(gen) == originals[gen]
    assert split_seen == 1

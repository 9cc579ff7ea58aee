"""Crash safety: the box-side helper SIGKILLed between any two of its steps, in a loop of apply and
rollback, never leaves the target half-written and never loses the way back."""

from __future__ import annotations

import base64
import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from remote.patcher.plan import compose, recipes_for
from remote.patcher.recipes import CUSTOM_WORKER
from remote.patcher.runner import HELPER
from tests.patch_kill_harness import JOURNAL, kill_at_step, spawn_helper
from tests.patchbox import WORKER, make_site_packages, sha256


def _apply(target: Path, current: str, orig_sha: str, content_b64: str) -> dict:
    return {"op": "apply_all", "files": [{"file": str(target), "expect_sha256": current,
                                          "original_sha256": orig_sha, "content_b64": content_b64}]}


def _rollback(target: Path, current: str) -> dict:
    return {"op": "rollback_all", "files": [{"file": str(target), "action": "restore",
                                             "expect_sha256": current}]}


def _run(request: dict) -> dict:
    done = subprocess.run([sys.executable, str(HELPER)], input=json.dumps(request).encode(),
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["ok"], answer
    return answer


@pytest.mark.slow
def test_sigkill_at_every_step_keeps_target_whole_and_rollback_possible(tmp_path: Path) -> None:
    sp = make_site_packages(tmp_path, vllm=False)
    target = sp / WORKER
    original = target.read_text()
    patched = compose(original, recipes_for("speculators")[CUSTOM_WORKER])
    orig_sha, patched_sha = sha256(target), None
    patched_b64 = base64.b64encode(patched.encode()).decode()
    backup = target.with_name(f"{target.name}.eagle3-orig-{orig_sha}")
    rng = random.Random(1234)
    killed_after: set[tuple[str, str]] = set()

    for _ in range(40):
        current = sha256(target)
        if current == orig_sha:
            op = "apply"
            request = _apply(target, current, orig_sha, patched_b64)
        else:
            op = "rollback"
            request = _rollback(target, current)
        # apply announces 7 steps, rollback 5 (a journal a kill left is completed first, its
        # steps announced before them); a step past the last lets the run finish.
        step = rng.randint(0, 8 if op == "apply" else 6)
        rc, seen = kill_at_step(request, step, rng)
        if rc == -signal.SIGKILL:
            killed_after.add((op, seen[-1] if seen else "start-up"))

        # Invariants after every kill: the target is one of the two whole files ...
        state = sha256(target)
        if patched_sha is None and state != orig_sha:
            patched_sha = state
        assert state in {orig_sha, patched_sha}, f"torn target after {op} killed at {seen}"
        assert target.read_text() in (original, patched)
        # ... and whenever it is patched, the intact original is there to go back to.
        if state != orig_sha:
            assert backup.is_file() and sha256(backup) == orig_sha
        assert len(list(target.parent.glob(f"{target.name}.eagle3-orig-*"))) <= 1

    # Kills landed between real steps of both operations, not only at start-up.
    assert {("apply", "backed-up"), ("apply", "tmp-written"), ("apply", "replaced"),
            ("rollback", "tmp-written"), ("rollback", "restored")} <= killed_after

    # A clean rollback from whatever state the loop ended in (an interrupted one completed
    # first, as the console does) restores the wheel's bytes and leaves nothing behind.
    _run({"op": "recover", "journal": str(target.parent / JOURNAL)})
    _run(_rollback(target, sha256(target)))
    assert sha256(target) == orig_sha
    leftovers = [p.name for p in target.parent.iterdir() if "eagle3-" in p.name]
    assert leftovers == []
    # And a clean apply after all that still works.
    answer = _run(_apply(target, orig_sha, orig_sha, patched_b64))
    assert answer["files"][0]["changed"] and target.read_text() == patched


def test_two_concurrent_applies_take_turns(tmp_path: Path) -> None:
    """A second patcher waits for the first (directory flock), then sees the file changed
    under its plan and refuses instead of interleaving its steps."""
    sp = make_site_packages(tmp_path, vllm=False)
    target = sp / WORKER
    orig_sha = sha256(target)
    patched = compose(target.read_text(), recipes_for("speculators")[CUSTOM_WORKER])
    request = _apply(target, orig_sha, orig_sha, base64.b64encode(patched.encode()).decode())
    first = spawn_helper(request, 0.1)
    assert first.stderr is not None
    assert first.stderr.readline().decode().startswith("step checked")  # first holds the lock
    second = subprocess.run([sys.executable, str(HELPER)], input=json.dumps(request).encode(),
                            capture_output=True, timeout=60, check=True)
    assert first.wait(timeout=60) == 0
    assert first.stdout is not None
    assert json.loads(first.stdout.read())["files"][0]["changed"] is True
    first.stdout.close()
    first.stderr.close()
    answer = json.loads(second.stdout)
    assert answer["ok"] is False and "changed since it was planned" in answer["error"]
    assert target.read_text() == patched
    assert len(list(target.parent.glob(f"{target.name}.eagle3-orig-*"))) == 1

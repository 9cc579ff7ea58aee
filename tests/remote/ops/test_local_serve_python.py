"""Serving on `local` (issue 42, point 5): vLLM from the box environment `make demo` built,
found and never built by the console, or local's own python when it has vLLM; where neither
is there, the one command that builds it."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from remote.errors import UsageError
from remote.link.hosts import HostConfig
from remote.link.transport import LocalTransport
from remote.ops import serve as serve_ops
from tests.box_env import REPO, ensure

LOCAL = HostConfig(name="local", ssh=None, python=sys.executable, workdir="/tmp/unused")


async def test_local_serves_with_the_box_environment_make_demo_built(
        local_transport: LocalTransport) -> None:
    box_python = ensure("vllm032")  # what `make demo` builds (scripts/box_env.py)
    assert await serve_ops.local_python(local_transport, LOCAL) == str(box_python)
    # a python with vLLM set for local ([hosts.local] python) is used as it is
    own = dataclasses.replace(LOCAL, python=str(box_python))
    assert await serve_ops.local_python(local_transport, own) == str(box_python)


async def test_without_a_box_environment_the_error_names_the_command_that_builds_it(
        local_transport: LocalTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAGLE3_TEST_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(UsageError) as raised:
        await serve_ops.local_python(local_transport, LOCAL)
    message = str(raised.value)
    assert f"`python3 {REPO / 'scripts' / 'box_env.py'} vllm032`" in message, message
    assert "[hosts.local]" in message and sys.executable in message
    assert not (tmp_path / "empty-cache").exists()  # looked for, nothing built or made

"""A fleet of three real boxes (sshd on 127.0.0.2-4, tests/fleet_fixture.py): probe, patch,
stats and jobs over `--host a,b,c` and `--host fleet`, with box3 on the vLLM 0.16 environment;
a box taken off the network; bad groups. The commands run in-process (console.cli.main), as a
shell would run them, against the fleet's own console.toml written by scripts/box_fleet.py."""

from __future__ import annotations

import hashlib
import json
import socket
import tomllib
from pathlib import Path

import pytest

from console.cli import main
from console.fleet import table, worst
from remote.errors import ConfigError, UsageError
from remote.link.groups import resolve
from remote.link.hosts import parse_config
from tests.fleet_fixture import Fleet
from tests.patchbox import WORKER

BOXES = ["box1", "box2", "box3"]


def run(capsys: pytest.CaptureFixture[str], fleet: Fleet, *argv: str,
        config: Path | None = None) -> tuple[int, str, str]:
    # After the command and its verb (probe's are verbs), before any `--` (a job's own argv).
    cut = argv.index("--") if "--" in argv else len(argv)
    code = main([*argv[:cut], "--config", str(config or fleet.config), "--no-record",
                 *argv[cut:]])
    out, err = capsys.readouterr()
    return code, out, err


def events(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the fleet itself ----------------------------------------------------------------------------


def test_box_fleet_gives_boxes_of_their_own(fleet: Fleet) -> None:
    """scripts/box_fleet.py: one sshd per loopback address, each with its own host key, pid
    file and workdir, and a console.toml naming them all in the group `fleet`."""
    addresses = [b["address"] for b in fleet.boxes]
    assert addresses == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    keys = {(fleet.box_dir(n) / "ssh_host_ed25519_key.pub").read_text().split()[1] for n in BOXES}
    assert len(keys) == 3
    assert len({fleet.sshd_pid(n) for n in BOXES}) == 3
    for b in fleet.boxes:
        with socket.create_connection((str(b["address"]), int(str(b["port"]))), timeout=5) as s:
            assert s.recv(64).startswith(b"SSH-")
    cfg = tomllib.loads(fleet.config.read_text())
    assert cfg["groups"]["fleet"] == BOXES
    assert len({cfg["hosts"][n]["workdir"] for n in BOXES}) == 3


# -- probe -----------------------------------------------------------------------------------


def test_probe_env_over_the_group_is_one_table_naming_the_different_box(
        fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, fleet, "probe", "env", "--host", "fleet")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("box")}
    assert set(rows) == set(BOXES)
    assert "0.16.0" in rows["box3"] and rows["box3"].split()[1:3] == ["0.16.0+cpu", "*"]
    assert "0.32.0" in rows["box1"] and "*" not in rows["box1"]
    assert all("unpatched" in r for r in rows.values())  # speculators 0.3.0's worker, as shipped
    assert "* differs from the other hosts: VLLM, TORCH, TRANSFORMERS" in out


def test_probe_json_events_carry_their_host(fleet: Fleet,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, fleet, "probe", "env", "--host", "box1,box3", "--json")
    assert code == 0
    results = [e for e in events(out) if e["kind"] == "probe.result"]
    assert {e["host"] for e in results} == {"box1", "box3"}
    closing = events(out)[-1]
    assert closing["kind"] == "console.info" and closing["payload"]["hosts"] == {
        "box1": 0, "box3": 0}


def test_an_unreachable_box_is_one_line_and_the_others_answer(
        fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    fleet.stop_box("box2")
    try:
        code, out, _ = run(capsys, fleet, "probe", "env", "--host", "fleet")
    finally:
        fleet.start_box("box2")
    assert code == 3  # the worst host's: box2 could not be reached
    errors = [line for line in out.splitlines() if "[box2] error:" in line]
    assert len(errors) == 1
    rows = [line.split()[0] for line in out.splitlines() if line.startswith("box")]
    assert rows == ["box1", "box3"]
    assert "box1 ok, box2 unreachable, box3 ok" in out


# -- patch -----------------------------------------------------------------------------------


def test_patch_across_the_fleet_is_all_or_nothing(fleet: Fleet,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    workers = {n: fleet.site_packages(n) / WORKER for n in BOXES}
    shipped = {n: sha(w) for n, w in workers.items()}
    code, out, _ = run(capsys, fleet, "patch", "plan", "--host", "fleet")
    assert code == 0 and out.count("would apply") >= 3
    # box3's worker edited by hand: its plan is refused, so nothing is written anywhere
    edited = workers["box3"].read_text() + "\n# a local edit\n"
    original = workers["box3"].read_text()
    workers["box3"].write_text(edited)
    try:
        code, out, _ = run(capsys, fleet, "patch", "apply", "--host", "fleet", "--yes")
        assert code == 4
        assert "nothing applied on any host: box3" in out
        assert {n: sha(workers[n]) for n in ("box1", "box2")} == {
            n: shipped[n] for n in ("box1", "box2")}
        assert "not applied (another host failed its plan)" in out
    finally:
        workers["box3"].write_text(original)
    code, out, _ = run(capsys, fleet, "patch", "apply", "--host", "fleet", "--yes")
    assert code == 0, out
    assert all(sha(w) != shipped[n] for n, w in workers.items())
    code, out, _ = run(capsys, fleet, "patch", "verify", "--host", "box1,box2,box3")
    rows = [line for line in out.splitlines() if line.startswith("box")]
    assert code == 0 and len(rows) == 3 and all("in effect: " in r for r in rows)
    code, out, _ = run(capsys, fleet, "patch", "rollback", "--host", "fleet")
    assert code == 0
    assert {n: sha(w) for n, w in workers.items()} == shipped


def test_patch_apply_with_a_box_down_writes_nothing(fleet: Fleet,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    workers = {n: fleet.site_packages(n) / WORKER for n in BOXES}
    shipped = {n: sha(w) for n, w in workers.items()}
    fleet.stop_box("box1")
    try:
        code, out, _ = run(capsys, fleet, "patch", "apply", "--host", "fleet", "--yes")
    finally:
        fleet.start_box("box1")
    assert code == 3
    assert {n: sha(w) for n, w in workers.items()} == shipped
    assert "nothing applied on any host: box1" in out


# -- stats and jobs --------------------------------------------------------------------------


def test_stats_once_is_a_row_per_host_and_totals(fleet: Fleet,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, fleet, "stats", "--host", "fleet", "--once")
    assert code == 0
    firsts = [line.split()[0] for line in out.splitlines() if line[:1] and line[0] in "bTH"]
    assert firsts[:5] == ["HOST", *BOXES, "TOTAL"]
    code, out, _ = run(capsys, fleet, "stats", "--host", "fleet", "--count", "2", "--json",
                       "--interval", "0.1")
    samples = [e for e in events(out) if e["kind"] == "stats.sample"]
    assert code == 0 and {e["host"] for e in samples} == set(BOXES)


def test_jobs_list_over_the_fleet(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, fleet, "jobs", "launch", "--host", "box2", "--name", "fleet-job",
                       "--", "true")
    assert code == 0
    code, out, _ = run(capsys, fleet, "jobs", "--host", "fleet")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines() if "fleet-job" in line] == ["box2"]
    code, _, err = run(capsys, fleet, "jobs", "status", "x", "--host", "fleet")
    assert code == 2 and "give one --host" in err


# -- groups: bad input ------------------------------------------------------------------------


def test_a_bad_group_member_is_one_line_and_the_others_answer(
        fleet: Fleet, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "console.toml"
    cfg.write_text(fleet.config.read_text() + 'bad = ["box1", "nosuch", "bad", "box3"]\n')
    code, out, _ = run(capsys, fleet, "probe", "env", "--host", "bad", config=cfg)
    assert code == 2
    assert "[nosuch] error: group bad: no such host 'nosuch'" in out
    assert "[bad] error: group bad names itself (ignored)" in out
    assert [line.split()[0] for line in out.splitlines() if line.startswith("box")] == [
        "box1", "box3"]


def test_group_config_errors() -> None:
    host = '[hosts.a]\nssh = "a"\n[hosts.b]\nssh = "b"\n'
    cfg = parse_config(host + '[groups]\ng = ["a", "b"]\nall = ["g", "a"]\n', "<string>")
    assert resolve(cfg, "all").names == ["a", "b"]
    assert resolve(cfg, "b,a,b").names == ["b", "a"]
    with pytest.raises(ConfigError, match="a group and a host cannot share a name"):
        parse_config(host + '[groups]\na = ["b"]\n', "<string>")
    with pytest.raises(ConfigError, match="non-empty list"):
        parse_config(host + '[groups]\ng = "a"\n', "<string>")
    with pytest.raises(ConfigError, match="no such host"):
        resolve(cfg, "a,nosuch")  # typed on the command line: refused before anything runs
    with pytest.raises(UsageError):
        resolve(cfg, "a,,b")
    cyc = parse_config(host + '[groups]\ng = ["a", "h"]\nh = ["g", "b"]\n', "<string>")
    got = resolve(cyc, "g")
    assert got.names == ["a", "b"] and "a cycle" in got.problems[0][1]


def test_worst_code_and_marked_table() -> None:
    assert worst([0, 3, 1]) == 3 and worst([4, 3]) == 4 and worst([130, 4]) == 130
    assert worst([]) == 0
    text = table(("HOST", "V"), [["a", "1"], ["b", "1"], ["c", "2"]])
    assert text.splitlines()[3].split() == ["c", "2", "*"]
    assert text.splitlines()[-1] == "* differs from the other hosts: V"

"""Issue 41 at the edges, as a hostile user tries them: one row per case (the input, the one
line expected, the exit code, and what must be left as it was).

Named outputs (case 1): every writer of a file the operator names refuses to overwrite a
session or a file the console did not write unless --force, judging the resolved path
(symlinks included), and leaves the file byte for byte as it was.
Host keys (case 4): known_hosts `@revoked` and `@cert-authority` as OpenSSH reads them, over a
real loopback sshd; a key refused on reconnect is an event of the session.
Secrets (case 5): each credential shape as a row; a run named after a secret leaks it nowhere.
The runner's process group (case 3): tests/remote/jobs/test_job_group.py and
tests/pipeline/test_runner_kill.py. Damaged records (cases 2 and 6): tests/test_hostile_inputs.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from console.cli import main
from remote.errors import EXIT_OK, EXIT_USAGE, OutputRefused
from remote.link.out_files import claim, write_claimed
from remote.spine.redact import Redactor
from tests.local_box import local_console_toml
from tests.sshd_harness import Sshd, sshd_available, start_sshd
from tests.tui_sessions import demo_session

NOTES = b"operator's notes, not the console's\n"


@dataclass(frozen=True)
class OutRow:
    """`console ARGV` in a folder holding s.jsonl (the session), other.jsonl (a second
    session), notes.txt (the operator's own file) and the links `links` names."""

    argv: list[str]
    line: str  # a fragment of the one stderr line (exit 2) or of stdout (exit 0)
    exit: int
    links: dict[str, str] = field(default_factory=dict)  # link name -> what it points at
    kept: tuple[str, ...] = ("s.jsonl", "other.jsonl", "notes.txt")  # byte for byte after


# What `report --out` must refuse, named directly and through a link (r.html) to it alike.
REFUSED = {"its own session": ("s.jsonl", "is the session being read"),
           "another session": ("other.jsonl", "is a recorded session"),
           "the operator's file": ("notes.txt", "the console did not write it")}
OUT_ROWS = {
    **{f"report over {what}": OutRow(["report", "s.jsonl", "--out", name], line, EXIT_USAGE)
       for what, (name, line) in REFUSED.items()},
    **{f"report through a link to {what}": OutRow(["report", "s.jsonl", "--out", "r.html"], line,
                                                  EXIT_USAGE, links={"r.html": name})
       for what, (name, line) in REFUSED.items()},
    "report through a link to its own session, --force": OutRow(
        ["report", "s.jsonl", "--out", "r.html", "--force"], "is the session being read",
        EXIT_USAGE, links={"r.html": "s.jsonl"}),
    "report over the operator's file, --force": OutRow(
        ["report", "s.jsonl", "--out", "notes.txt", "--force"], "report written", EXIT_OK,
        kept=("s.jsonl", "other.jsonl")),
    "report into a folder": OutRow(
        ["report", "s.jsonl", "--out", "."], "is a directory", EXIT_USAGE),
    "bench result over the operator's file": OutRow(
        ["bench", "run", "--host", "local", "--no-record", "--out", "notes.txt"],
        "the console did not write it", EXIT_USAGE),
    "bench result through a link to a session": OutRow(
        ["bench", "run", "--host", "local", "--no-record", "--out", "b.json"],
        "is a recorded session", EXIT_USAGE, links={"b.json": "s.jsonl"}),
}


def _folder(tmp: Path, links: dict[str, str]) -> dict[str, bytes]:
    demo_session(tmp / "s.jsonl")
    demo_session(tmp / "other.jsonl")
    (tmp / "notes.txt").write_bytes(NOTES)
    for name, target in links.items():
        (tmp / name).symlink_to(target)
    return {p.name: p.read_bytes() for p in tmp.iterdir() if p.is_file() and not p.is_symlink()}


@pytest.mark.parametrize("row", OUT_ROWS.values(), ids=list(OUT_ROWS))
def test_named_outputs(row: OutRow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    before = _folder(tmp_path, row.links)
    monkeypatch.chdir(tmp_path)
    assert main(row.argv) == row.exit
    out, err = capsys.readouterr()
    if row.exit == EXIT_OK:
        assert row.line in out
    else:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and row.line in lines[0], err
        assert "Traceback" not in err
    for name in row.kept:  # nothing lost: the files it refused are as they were
        assert (tmp_path / name).read_bytes() == before[name], name
    for name, target in row.links.items():  # a link stays a link to what it pointed at
        assert os.readlink(tmp_path / name) == target
    assert not [p for p in tmp_path.iterdir() if ".part-" in p.name]  # no temp left behind


def test_report_rewrites_its_own_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second `console report S` rewrites the page the first wrote (no --force needed)."""
    session = demo_session(tmp_path / "s.jsonl")
    assert main(["report", str(session)]) == EXIT_OK
    page = tmp_path / "s.html"
    first = page.read_bytes()
    page.write_bytes(first.replace(b"</body>", b"<!-- older --></body>"))
    assert main(["report", str(session)]) == EXIT_OK
    assert page.read_bytes() == first
    assert "report written" in capsys.readouterr().out


def test_trace_names_refused_before_any_fetch(tmp_path: Path) -> None:
    """`allreduce capture --out DIR`'s files go through the same claim (remote/allreduce/
    capture.py judges every name before the first fetch): an existing trace of the same name is
    the operator's, a --force replaces it, a new name is created whole."""
    existing = tmp_path / "w0.pt.trace.json.gz"
    existing.write_bytes(NOTES)
    with pytest.raises(OutputRefused, match="did not write it"):
        claim(existing, what="trace")
    assert existing.read_bytes() == NOTES
    write_claimed(claim(existing, force=True, what="trace"), b"trace")
    assert existing.read_bytes() == b"trace"
    new = claim(tmp_path / "w1.pt.trace.json.gz", what="trace")
    (tmp_path / "w1.pt.trace.json.gz").write_bytes(NOTES)  # appears between claim and write
    with pytest.raises(OutputRefused, match="appeared while it was being written"):
        write_claimed(new, b"trace")
    assert new.path.read_bytes() == NOTES


# Host keys (case 4): known_hosts markers honoured as OpenSSH does, over the real loopback sshd.


@dataclass(frozen=True)
class KeyRow:
    """known_hosts holds `lines` ({port}, {key}: the server's host key, {ca}: the CA that
    signed its certificate); `console jobs list` with `flags`."""

    lines: list[str]
    flags: list[str]
    line: str  # a fragment of the one stderr line, or "" for a connection that succeeds
    exit: int
    cert: bool = False  # the server presents a host certificate signed by {ca}


KEY_ROWS = {
    "revoked for its port": KeyRow(["@revoked [127.0.0.1]:{port} {key}"], [],
                                   "HOST KEY REVOKED", 3),
    "revoked for its port, --accept-new-host-key": KeyRow(
        ["@revoked [127.0.0.1]:{port} {key}"], ["--accept-new-host-key"], "HOST KEY REVOKED", 3),
    "revoked for every host, --accept-new-host-key": KeyRow(
        ["@revoked * {key}"], ["--accept-new-host-key"], "HOST KEY REVOKED", 3),
    "revoked for the host without its port": KeyRow(
        ["@revoked 127.0.0.1 {key}"], ["--accept-new-host-key"], "HOST KEY REVOKED", 3),
    "revoked for its port, trusted without it": KeyRow(
        ["127.0.0.1 {key}", "@revoked [127.0.0.1]:{port} {key}"], [], "HOST KEY REVOKED", 3),
    "revoked beside a trusted line": KeyRow(
        ["[127.0.0.1]:{port} {key}", "@revoked * {key}"], [], "HOST KEY REVOKED", 3),
    "certificate from a trusted CA": KeyRow(
        ["@cert-authority [127.0.0.1]:{port} {ca}"], [], "", 0, cert=True),
    "certificate from a revoked CA": KeyRow(
        ["@cert-authority [127.0.0.1]:{port} {ca}", "@revoked * {ca}"], ["--accept-new-host-key"],
        "HOST KEY REVOKED", 3, cert=True),
    "a CA line is not a host key": KeyRow(
        ["@cert-authority [127.0.0.1]:{port} {ca}"], [], "unknown host key", 3),
}


@pytest.fixture(scope="module")
def cert_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sshd, str]]:
    """A second loopback sshd whose host key comes with a certificate signed by its own CA
    (ssh-keygen -s ... -h), the CA's public key returned beside it."""
    reason = sshd_available()
    if reason:
        pytest.fail(reason, pytrace=False)
    root = tmp_path_factory.mktemp("cert-sshd")
    daemon = start_sshd(root)
    ca = root / "host_ca"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ca)], check=True)
    subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-I", "box", "-h", "-n", "127.0.0.1",
                    str(daemon.host_key_pub)], check=True)
    cert = root / "ssh_host_ed25519_key-cert.pub"
    with (root / "sshd_config").open("a") as fh:
        fh.write(f"HostCertificate {cert}\n")
    daemon.restart()
    yield daemon, " ".join(Path(f"{ca}.pub").read_text().split()[:2])
    daemon.stop()


@pytest.mark.ssh
@pytest.mark.parametrize("row", KEY_ROWS.values(), ids=list(KEY_ROWS))
def test_known_hosts_markers(row: KeyRow, sshd: Sshd, cert_sshd: tuple[Sshd, str], tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    box, ca = cert_sshd if row.cert else (sshd, "")
    if not row.cert and "{ca}" in " ".join(row.lines):  # a CA line, a plain-key server
        ca = cert_sshd[1]
    key = " ".join(box.host_key_pub.read_text().split()[:2])
    known = tmp_path / "known_hosts"
    known.write_text("".join(line.format(port=box.port, key=key, ca=ca) + "\n" for line in row.lines))
    before = known.read_bytes()
    config = box.console_toml(tmp_path / "console.toml", workdir=tmp_path / "box")
    config.write_text(config.read_text().replace(str(box.known_hosts), str(known)))
    rc = main(["jobs", "list", "--host", "box", "--config", str(config), "--no-record", *row.flags])
    err = capsys.readouterr().err
    assert rc == row.exit, err
    if row.line:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and row.line in lines[0], err
        if "REVOKED" in row.line:
            assert "@revoked" in lines[0] and "--accept-new-host-key" in lines[0]
    assert known.read_bytes() == before  # a revoked key (or a CA's host) is never stored


# Secrets (case 5): each shape as a row (raw text, what every reader shows, the kind counted).
HF = "hf_" + "aB3dE6gH9jK2mN5pQ8sT1vW4"  # the shape of a hub token, not a real one
SK = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"  # the shape of an OpenAI project key
SHAPES: dict[str, tuple[str, str, str]] = {
    "--password hunter2": ("db --password hunter2 --port 5", "db --password *** --port 5",
                           "secret_flag"),
    "--password=hunter2": ("db --password=hunter2", "db --password=***", "secret_flag"),
    "--hf-token VALUE": ("dl --hf-token abc123", "dl --hf-token ***", "secret_flag"),
    "bare sk-proj-": (f"key is {SK} ok", "key is sk-*** ok", "openai_key"),
    "bare sk-": ("sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2", "sk-***", "openai_key"),
    'JSON "api_key"': ('{"api_key": "k-123", "n": 2}', '{"api_key": "***", "n": 2}',
                       "json_secret"),
    'JSON "password"': ('{"user":"u","password":"p\\"w"}', '{"user":"u","password":"***"}',
                        "json_secret"),
    'JSON "token"': ('{"access_token": "tok"}', '{"access_token": "***"}', "json_secret"),
    "JSON in a quoted argument": ('echo "{\\"api_key\\": \\"k1\\"}"',
                                  'echo "{\\"api_key\\": \\"***\\"}"', "json_secret"),
    "Authorization: Basic": ("-H 'Authorization: Basic dXNlcjpodW50ZXIy'",
                             "-H 'Authorization: Basic ***'", "basic"),
    "x-api-key header": ("-H 'x-api-key: k-777'", "-H 'x-api-key: ***'", "api_key_header"),
    "X-API-KEY header": ("X-API-KEY:k-777", "X-API-KEY:***", "api_key_header"),
    "hf_ token": (f"--name {HF}", "--name hf_***", "hf_token"),
    "--token hf_ (masked once)": (f"--token {HF}", "--token hf_***", "hf_token"),
    # Issue 48 row 7: documented shapes that leaked, and common ones not covered before.
    'MY_API_KEY="quoted"': ('export MY_API_KEY="k-1 2"; run', "export MY_API_KEY=***; run",
                            "assignment"),
    "API_KEY='single'": ("API_KEY='k-3' run", "API_KEY=*** run", "assignment"),
    "PGPASSWORD=": ("PGPASSWORD=hunter2 psql", "PGPASSWORD=*** psql", "password_assignment"),
    "URL password with /": ("git clone https://bob:pa/ss@git.example/r",
                            "git clone https://***@git.example/r", "url_userinfo"),
    "URL password with @": ("https://bob:p@ss@host:8443/x", "https://***@host:8443/x",
                            "url_userinfo"),
    "URL userinfo, @ in the path": ("https://bob:pw@host:8080/x@y",
                                    "https://***@host:8080/x@y", "url_userinfo"),
    "Authorization: Token": ("-H 'Authorization: Token abc123def'",
                             "-H 'Authorization: Token ***'", "authorization"),
    "curl -u user:pw": ("curl -u bob:hunter2 https://h", "curl -u bob:*** https://h",
                        "curl_user"),
    "curl --user=user:pw": ("curl --user=bob:hunter2 x", "curl --user=bob:*** x", "curl_user"),
    "ghp_ token": ("GH ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "GH ghp_***",
                   "github_token"),
    "github_pat_": ("github_pat_11ABCDEFG0abcdefghij_klmnopqrstuvwxyz", "github_pat_***",
                    "github_token"),
    "AKIA": ("aws AKIAIOSFODNN7EXAMPLE x", "aws AKIA*** x", "aws_key"),
}
# What must stay as it is (the same object): prose and the flags' look-alikes.
CLEAN = ["a basic idea", "--max-tokens 256", "--token-file /x", '{"max_tokens": 5}',
         '{"token": ""}', "task-sk-abcdefghijklmnopqrstuvwxyz", "sk-short", "--password --next",
         '{"eos_token": "</s>", "pad_token": "<pad>"}', "--pad-token <pad>",
         "http://h:8000/p?mail=a@b", "https://example.com/@user", "mail a@b.org", "run -u x",
         "the Authorization: header", "AKIA-short", "gh_xyz", "Token embeddings"]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_secret_shapes(shape: str) -> None:
    raw, shown, kind = SHAPES[shape]
    r = Redactor()
    assert r.text(raw) == shown
    assert r.counts == {kind: 1}


def test_clean_text_is_left_alone() -> None:
    r = Redactor()
    for text in CLEAN:
        assert r.text(text) is text, text
    assert r.total == 0


def test_argv_and_payload_secrets() -> None:
    """A flag and its value as two argv elements, a payload's own secret-named keys."""
    r = Redactor()
    argv = ["tool", "--password", "hunter2", "--api-key", "k1", "--token", HF, "-p", "x"]
    assert r.value({"argv": argv}) == {"argv": ["tool", "--password", "***", "--api-key", "***",
                                                "--token", "hf_***", "-p", "x"]}
    assert r.value({"api_key": "k", "max_tokens": 5, "token": 3}) == \
        {"api_key": "***", "max_tokens": 5, "token": 3}


def _jobs(config: Path, *argv: str) -> int:
    return main(["jobs", "--host", "local", "--config", str(config), *argv])


def test_a_secret_run_name_leaks_nowhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--name hf_...`: the run id, the run directory on the box, the session, replay --print
    and --json, the report (the TUI's model, folded), `jobs status --json`, `jobs tail` and
    `jobs list` hold no secret; the id made
    from the masked name is stable (same name, same masked name) and unique (another token,
    another name); the report counts what was masked as replay does."""
    config = local_console_toml(tmp_path)
    session = tmp_path / "s.jsonl"
    line = f'echo "--password hunter2 {SK}"'
    assert _jobs(config, "--session", str(session), "launch", "--name", HF, "--",
                 "sh", "-c", line) == EXIT_OK
    other = HF[:-1] + "Z"
    assert _jobs(config, "--no-record", "launch", "--name", other, "--", "true") == EXIT_OK
    assert _jobs(config, "--no-record", "launch", "--name", HF, "--", "true") == EXIT_OK
    runs = sorted(p.name for p in (tmp_path / "box").rglob("runs/*"))
    assert len(runs) == 3 and not [r for r in runs if HF[3:] in r or other[3:] in r]
    assert main(["replay", str(session), "--print"]) == EXIT_OK
    assert main(["replay", str(session), "--json"]) == EXIT_OK
    assert main(["report", str(session)]) == EXIT_OK
    run_id = next(json.loads(x)["payload"]["run_id"] for x in session.read_text().splitlines()
                  if '"job.started"' in x)
    assert _jobs(config, "--no-record", "--json", "status", run_id) == EXIT_OK
    assert _jobs(config, "--no-record", "tail", run_id, "--from-start", "--no-follow") == EXIT_OK
    shown = capsys.readouterr().out
    assert _jobs(config, "--no-record", "list") == EXIT_OK
    listed = capsys.readouterr().out  # apart: replay's lines start with the hour, 20:xx too
    shown += listed
    page = (tmp_path / "s.html").read_text()
    for secret in (HF[3:], other[3:], "hunter2", SK[8:]):
        assert secret not in session.read_text() and secret not in shown
        assert secret not in page
    names = {json.loads(x)["payload"]["name"] for x in shown.splitlines()
             if x.startswith("{") and '"job.status"' in x}
    (name,) = names
    assert name.startswith("hf_***-") and len(name) == len("hf_***-") + 8
    table = [x.split()[1] for x in listed.splitlines() if x.startswith("20")]
    assert sorted(table).count(name) == 2 and len(set(table)) == 2  # stable, and unique
    note = next(x for x in shown.splitlines() if x.startswith("# session started"))
    count = note.rsplit(", ", 1)[1]
    assert count.endswith("secret(s) masked") and f"<td>{count}</td>" in page


def test_round5_shapes_leak_nowhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 48 row 7: a job echoing the shapes that leaked (a session, replay --print/--json,
    the report, `jobs list --json`), and `console hosts` on a vllm_url with `user:pw@`."""
    config = local_console_toml(tmp_path, vllm_url="http://ops:hunter5@127.0.0.1:8000")
    session = tmp_path / "s.jsonl"
    secrets = ["k-quoted", "k-single", "pa/ss", "pgpw7", "tok-777", "curlpw", "a1B2c3D4e5F6g7H8",
               "IOSFODNN7EXAMPLE"]
    line = ('echo MY_API_KEY=\\"k-quoted\\" API_KEY=\\\'k-single\\\' '
            "https://bob:pa/ss@git.example PGPASSWORD=pgpw7 'Authorization: Token tok-777' "
            "curl -u bob:curlpw ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8 AKIAIOSFODNN7EXAMPLE")
    assert _jobs(config, "--session", str(session), "launch", "--name", "round5", "--",
                 "sh", "-c", line) == EXIT_OK
    log = next((tmp_path / "box").rglob("runs/*/log")).read_text()
    assert all(x in log for x in secrets), log  # the job itself ran with them
    assert main(["replay", str(session), "--print"]) == EXIT_OK
    assert main(["replay", str(session), "--json"]) == EXIT_OK
    assert main(["report", str(session)]) == EXIT_OK
    assert _jobs(config, "--no-record", "--json", "list") == EXIT_OK
    assert main(["hosts", "--config", str(config)]) == EXIT_OK
    assert main(["hosts", "--config", str(config), "--json"]) == EXIT_OK
    shown = capsys.readouterr().out
    page = (tmp_path / "s.html").read_text()
    for secret in [*secrets, "hunter5"]:
        assert secret not in session.read_text() and secret not in shown, secret
        assert secret not in page, secret
    assert "http://***@127.0.0.1:8000" in shown


@pytest.mark.ssh
async def test_a_host_key_refused_on_reconnect_is_an_event(tmp_path: Path) -> None:
    """The box comes back with another key mid-session: the reconnect is refused, and the
    session's last connection event says so (it used to end at "reconnecting")."""
    from remote.errors import HostKeyError
    from remote.link.ssh import SSHTransport
    from remote.spine.bus import EventBus
    from remote.spine.events import Event

    reason = sshd_available()
    if reason:
        pytest.fail(reason, pytrace=False)
    box = start_sshd(tmp_path / "sshd")
    bus = EventBus()
    seen: list[Event] = []
    bus.add_callback(seen.append)
    t = SSHTransport(box.host_config(), bus=bus, backoff_base=0.05)
    try:
        await t.connect()
        assert (await t.run(["echo", "up"])).stdout == "up\n"
        known = box.known_hosts.read_bytes()
        box.restart_with_new_host_key()
        with pytest.raises(HostKeyError, match="HOST KEY CHANGED"):
            for _ in range(50):  # until the drop is noticed and the reconnect meets the key
                await t.run(["true"])
        assert box.known_hosts.read_bytes() == known
    finally:
        await t.close()
        box.stop()
    last = [e for e in seen if e.kind.startswith("connection.")][-1]
    assert last.kind == "connection.down" and last.payload["refused"] == "host key"
    assert "HOST KEY CHANGED" in last.payload["error"] and "refused" in last.payload["summary"]

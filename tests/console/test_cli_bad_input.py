"""Every command `console --help` lists, given bad input: one error line, the documented exit
code, never a traceback. The list of commands is read from the parser, so a new command without
a case here fails this test."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from console.argtypes import command_lines, subcommands
from console.cli import build_parser, main
from remote.errors import EXIT_USAGE


def _leaves(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    return [words for words, p in command_lines(parser) if words and not subcommands(p)]


# (argv after the command, exit code, a fragment of the one error line)
NOHOST = (["--host", "nosuch", "--no-record"], EXIT_USAGE, "hosts.nosuch: no such host")
BROKEN = (["--config", "{broken}", "--host", "box", "--no-record"], EXIT_USAGE,
          "hosts.box.port: 70000 is out of range")
CASES: dict[tuple[str, ...], list[tuple[list[str], int, str]]] = {
    ("run",): [NOHOST, BROKEN,
               (["--host", "local", "--pipeline", "{missing}", "--no-record"], EXIT_USAGE,
                "pipeline config not found"),
               (["--host", "local", "--pipeline", "{garbage}", "--no-record"], EXIT_USAGE,
                "invalid TOML")],
    ("serve", "start"): [(["--host", "local", "--no-record"], EXIT_USAGE, "give --pipeline FILE or --demo"),
                         (["--host", "nosuch", "--demo", "--no-record"], EXIT_USAGE,
                          "hosts.nosuch: no such host")],
    ("serve", "stop"): [NOHOST],
    ("serve", "status"): [NOHOST],
    ("replay",): [(["{missing}", "--print"], EXIT_USAGE, "cannot open"),
                  (["{garbage}", "--print"], EXIT_USAGE, "not a console session file")],
    ("report",): [(["{missing}"], EXIT_USAGE, "cannot open"),
                  (["{garbage}"], EXIT_USAGE, "not a console session file")],
    ("init",): [(["console.toml"], EXIT_USAGE, "already exists; not overwritten")],
    ("hosts",): [(["--config", "{broken}"], EXIT_USAGE, "hosts.box.port"),
                 (["--config", "{missing}"], EXIT_USAGE, "config file not found")],
    ("jobs", "list"): [NOHOST, BROKEN],
    ("jobs", "launch"): [(["--host", "nosuch", "--no-record", "--name", "x", "true"], EXIT_USAGE,
                          "no such host")],
    ("jobs", "status"): [(["--host", "local", "--no-record", "../../etc"], EXIT_USAGE,
                          "not a run id")],
    ("jobs", "tail"): [(["--host", "nosuch", "--no-record", "r1"], EXIT_USAGE, "no such host")],
    ("jobs", "cancel"): [(["--host", "local", "--no-record", "--grace", "nan", "r1"], EXIT_USAGE,
                          "argument --grace"),
                         (["--host", "local", "--no-record", "--grace", "-1", "r1"], EXIT_USAGE,
                          "argument --grace")],
    ("patch",): [(["plan", *NOHOST[0]], EXIT_USAGE, "no such host"),
                 (["plan", "--config", "{broken}", "--host", "box", "--no-record"], EXIT_USAGE,
                  "hosts.box.port"),
                 (["plan", "--host", "local", "--recipe", "nope", "--no-record"], EXIT_USAGE,
                  "unknown recipe nope")],
    ("bench", "run"): [NOHOST, (["--host", "local", "--timeout", "nan", "--no-record"],
                                EXIT_USAGE, "argument --timeout"),
                       (["--host", "local", "--concurrency", "0,abc", "--no-record"],
                        EXIT_USAGE, "--concurrency")],
    ("bench", "compare"): [(["{missing}", "{missing}"], EXIT_USAGE, "No such file")],
    ("bench", "matrix"): [(["--host", "local", "--no-record"], EXIT_USAGE,
                           "give --pipeline FILE or --demo"),
                          (["--host", "nosuch", "--demo", "--no-record"], EXIT_USAGE,
                           "hosts.nosuch: no such host"),
                          (["--host", "local", "--demo", "--k", "0", "--no-record"], EXIT_USAGE,
                           "out of range"),
                          (["--host", "local", "--demo", "--drafts", "none@2", "--no-record"],
                           EXIT_USAGE, "none drafts nothing")],
    ("bench", "watch"): [NOHOST, (["--host", "local", "--interval", "nan", "--no-record"],
                                  EXIT_USAGE, "argument --interval")],
    ("probe", "env"): [NOHOST,
                       (["--host", "local", "--timeout", "nan", "--no-record"], EXIT_USAGE,
                        "argument --timeout"),
                       (["--host", "local", "--timeout", "-1", "--no-record"], EXIT_USAGE,
                        "argument --timeout")],
    ("probe", "model"): [(["--host", "local", "--no-record"], EXIT_USAGE, "needs --model")],
    ("probe", "compat"): [(["--host", "local", "--no-record"], EXIT_USAGE, "needs --model")],
    ("probe", "source"): [(["--host", "local", "--no-record"], EXIT_USAGE, "needs --family")],
    ("probe", "head"): [(["--host", "local", "/h", "--no-record"], EXIT_USAGE,
                         "needs one target"),
                        (["--host", "local", "--target", "/t", "--no-record"], EXIT_USAGE,
                         "needs the head directory"),
                        (["--host", "local", "/h", "--target", "/t", "--demo", "--no-record"],
                         EXIT_USAGE, "(got --target, --demo)"),
                        (["--host", "local", "--pipeline", "{missing}", "--no-record"],
                         EXIT_USAGE, "pipeline config not found")],
    ("stats",): [NOHOST, BROKEN, (["--host", "local", "--interval", "nan", "--no-record"],
                                  EXIT_USAGE, "--interval")],
    ("allreduce", "sweep"): [(["--ranks", "2", *NOHOST[0]], EXIT_USAGE, "no such host"),
                             (["--ranks", "0", "--host", "local", "--no-record"], EXIT_USAGE,
                              "argument --ranks"),
                             (["--ranks", "2", "--timeout", "inf", "--host", "local",
                               "--no-record"], EXIT_USAGE, "argument --timeout")],
    ("allreduce", "trace"): [(["{missing}", "--no-record"], EXIT_USAGE, "no such file"),
                             (["{garbage}", "--no-record"], EXIT_USAGE, "not a Chrome trace")],
    ("allreduce", "capture"): [(["--profiler-dir", "/tmp/p", *NOHOST[0]], EXIT_USAGE,
                                "no such host"),
                               (["--profiler-dir", "/tmp/p", "--seconds", "nan", "--host",
                                 "local", "--no-record"], EXIT_USAGE, "argument --seconds")],
}


def test_every_command_has_bad_input_cases() -> None:
    leaves = set(_leaves(build_parser()))
    assert leaves == set(CASES), f"missing: {leaves - set(CASES)}, stale: {set(CASES) - leaves}"


def bad_files(tmp_path: Path) -> dict[str, str]:
    """A console.toml with host `box`, and the files the cases name: {broken}, {missing}, {garbage}."""
    (tmp_path / "console.toml").write_text('[hosts.box]\nssh = "ops@127.0.0.1"\n')
    (tmp_path / "broken.toml").write_text('[hosts.box]\nssh = "ops@127.0.0.1"\nport = 70000\n')
    (tmp_path / "garbage.json").write_text("garbage {\n")
    return {"broken": str(tmp_path / "broken.toml"), "missing": str(tmp_path / "nope.json"),
            "garbage": str(tmp_path / "garbage.json")}


@pytest.mark.parametrize(("command", "case"), [
    (c, i) for c, cases in CASES.items() for i in range(len(cases))],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else str(v))
def test_bad_input_is_one_error_line_and_its_exit_code(
        command: tuple[str, ...], case: int, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    files = bad_files(tmp_path)
    argv, code, fragment = CASES[command][case]
    argv = [a.format(**files) for a in argv]
    rc = main([*command, *argv])
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text and "internal error" not in text, text
    errors = [line for line in text.splitlines() if "error:" in line]
    assert len(errors) == 1, text
    assert fragment in errors[0], text
    assert rc == code, text


def test_a_bug_is_one_line_with_the_traceback_kept_in_a_file(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The last line of defence: an exception no command handled (a bug, here planted in the
    hosts command) still reaches the operator as one line, exit 1, the traceback in a file."""
    import console.commands.hosts as hosts_cmd

    async def broken(args: argparse.Namespace) -> int:
        raise RuntimeError("planted\nbug")

    monkeypatch.setattr(hosts_cmd, "run", broken)
    assert main(["hosts"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: internal error: RuntimeError: planted bug (traceback in ")
    kept = Path(err.rsplit("traceback in ", 1)[1].rstrip(")\n"))
    assert "Traceback" in kept.read_text() and "planted" in kept.read_text()
    kept.unlink()


RECORDED = [(c, i) for c, cases in CASES.items() for i, (argv, code, _) in enumerate(cases)
            if "--no-record" in argv and code == EXIT_USAGE]


@pytest.mark.parametrize(("command", "case"), RECORDED,
                         ids=lambda v: " ".join(v) if isinstance(v, tuple) else str(v))
def test_a_command_that_fails_on_its_configuration_records_nothing(
        command: tuple[str, ...], case: int, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The same bad input, recorded this time (the default session directory, and --session):
    exit 2 and no session file, no index (`console stats --host nosuch` used to leave one)."""
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    files = bad_files(tmp_path)
    argv, code, _ = CASES[command][case]
    argv = [a.format(**files) for a in argv if a != "--no-record"]
    for extra in ([], ["--session", str(tmp_path / "s" / "explicit.jsonl")]):
        rc = main([*command, *argv, *extra])
        text = capsys.readouterr().err
        assert rc == code, text
        assert "session recorded" not in text, text
        left = [p for p in tmp_path.rglob("*") if ".jsonl" in p.name or p.suffix == ".idx"]
        assert left == [], (extra, left)

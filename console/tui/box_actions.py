"""The app's actions that drive a box: connect, probes, patches, stages, serve and bench.

A mixin of ConsoleApp (console/tui/app.py), apart from it because these are the operator's
commands (each a worker calling the source's Controller, its failure a toast and a note on the
host), while the app itself is the event pump and the screen switching. Textual finds the
`action_*` methods on the app through its class, so bindings and the palette are unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from console.errors import ReadOnlyReplay
from console.tui.controller import Source
from console.tui.dialogs import AskScreen, ConfirmScreen, HostKeyScreen
from console.tui.model import ConsoleState, Note
from console.tui.widgets.common import View
from console.tui.widgets.log_view import LogView
from console.tui.widgets.patch import PatchView
from console.tui.widgets.pipeline import PipelineView
from remote import probe_table
from remote.errors import HostKeyError, RemoteError, StageFailed
from remote.spine.sanitize import visible_lines

if TYPE_CHECKING:
    from textual.app import App

    AppBase = App[int]  # the mixins' base: the app itself for the type checker, nothing at run time
else:
    AppBase = object

DEFAULT_BENCH_OPTIONS = "--concurrency 1,4 --max-tokens 128 --requests 32"
DEFAULT_MATRIX_OPTIONS = ("--demo --drafts none,ngram,pipeline --k 1,3 --temperature 0 "
                          "--concurrency 1,4 --requests 8 --max-tokens 32")


class BoxActions(AppBase):
    """What ConsoleApp's box actions use of the app (declared for the type checker)."""

    if TYPE_CHECKING:
        source: Source
        state: ConsoleState
        current_host: str
        activity: list[str]
        probe_targets: dict[str, str]
        serve_pipelines: dict[str, str]
        bench_options: dict[str, str]
        matrix_options: dict[str, str]

        def view(self, name: str) -> View | None: ...

        def notify(self, message: str, *, title: str = "", severity: Any = "information",
                   timeout: float | None = None, markup: bool = True) -> None: ...

        def _update_chrome(self) -> None: ...

    def _act(self, label: str, work: Callable[[], Awaitable[None]]) -> None:
        """Run an action in a worker; while it runs the top bar says so, and its end says
        which of failed, cancelled or refused it was (not one title for all)."""
        host = self.current_host

        async def run() -> None:
            self.activity.append(label)
            self._update_chrome()
            try:
                await work()
            except ReadOnlyReplay as exc:
                self._failed(host, str(exc), label, "warning")
            except HostKeyError as exc:  # before RemoteError: its own title, with the fix
                self._failed(host, str(exc), f"HOST KEY {exc.verdict.upper()}"
                             if exc.verdict in ("changed", "revoked")
                             else f"{label}: host key refused", "error")
            except StageFailed as exc:
                cancelled = "cancelled" in str(exc)
                self._failed(host, str(exc), f"{label} {'cancelled' if cancelled else 'failed'}",
                             "warning" if cancelled else "error")
            except RemoteError as exc:
                self._failed(host, str(exc), f"{label} failed", "error")
            except Exception as exc:  # a bug or an unexpected remote failure: say so, keep running
                self._failed(host, f"{type(exc).__name__}: {exc}", f"{label} failed", "error")
            finally:
                self.activity.remove(label)
                self._update_chrome()

        self.run_worker(run(), name=label, group="actions", exit_on_error=False)

    def _failed(self, host: str, message: str, title: str, severity: str) -> None:
        """A toast, and a line in the host's notification log (n) that outlives it."""
        message = visible_lines(message)  # an exception's text: often the box's own words
        self.state.host(host).notes.append(Note(datetime.now(UTC), "error" if severity == "error" else "warning",
                                                f"{title}: {message}"))
        self.notify(message, title=title, severity=severity, markup=False)

    def action_connect(self) -> None:
        host = self.current_host
        self._act("connect", lambda: self._connecting(host, self.source.controller.connect(host)))

    async def _connecting(self, host: str, attempt: Awaitable[None]) -> None:
        """A connect; a host key that is not in known_hosts (never a changed one) is shown with
        its fingerprint and offered to the operator (HostKeyScreen) instead of failing."""
        try:
            await attempt
        except HostKeyError as exc:
            if exc.verdict != "unknown" or not exc.fingerprint:
                raise
            self._ask_host_key(host, exc)

    def _ask_host_key(self, host: str, exc: HostKeyError) -> None:
        fingerprint = exc.fingerprint
        self.state.host(host).notes.append(Note(datetime.now(UTC), "warning", visible_lines(str(exc))))

        def answered(yes: bool | None) -> None:
            if not yes:
                self.notify(f"{host}: host key not trusted; not connected", title="connect", timeout=3)
                return
            self._act("accept host key", lambda: self._connecting(
                host, self.source.controller.accept_host_key(host, fingerprint)))

        self.push_screen(HostKeyScreen(host, fingerprint, exc.known_hosts), answered)

    def action_probe(self, probe: str) -> None:
        host = self.current_host
        if not probe_table.get(probe).asks_target:
            self._act("env probe", lambda: self.source.controller.run_probe(host, probe))
            return

        self._ask(f"{probe} probe on {host}: HF model directory or config.json on the box, or an "
                  "architecture name", "/models/Kimi-K2.5 or KimiK25ForConditionalGeneration",
                  self.probe_targets, "", lambda target: self._act(
                      f"{probe} probe", lambda: self.source.controller.run_probe(host, probe, target)))

    def action_patch_plan(self) -> None:
        host = self.current_host
        self._act("patch plan", lambda: self.source.controller.plan_patch(host))

    def action_patch_apply(self) -> None:
        self._patch_action("apply", self.source.controller.apply_patch,
                           "Apply the planned patch to {file} on {host}?")

    def action_patch_rollback(self) -> None:
        self._patch_action("rollback", self.source.controller.rollback_patch,
                           "Roll {file} on {host} back to the original?")

    def action_patch_verify(self) -> None:
        self._patch_action("verify", self.source.controller.verify_patch)

    def _patch_action(self, label: str, call: Callable[[str, str], Awaitable[None]],
                      question: str | None = None) -> None:
        """On the selected file; asking `question` first where there is one."""
        view, host = self.view("patch"), self.current_host
        file = view.selected_file if isinstance(view, PatchView) else None
        if file is None:
            self.notify("plan a patch first (p)", severity="warning")
            return
        if question is None:
            self._act(f"patch {label}", lambda: call(host, file))
        else:
            self._confirm(question.format(file=file, host=host),
                          lambda: self._act(f"patch {label}", lambda: call(host, file)),
                          no=f"patch {label} cancelled")

    def _ask(self, question: str, placeholder: str, kept: dict[str, str], default: str,
             then: Callable[[str], None], no: str | None = None) -> None:
        """Ask one line, offering the host's last answer (`kept`, else `default`); an answer is
        kept for next time and given to `then`, none (blank, escape) says `no` (if any)."""
        host = self.current_host

        def answered(value: str | None) -> None:
            if value is None:
                if no is not None:
                    self.notify(no, timeout=2)
                return
            kept[host] = value
            then(value)

        self.push_screen(AskScreen(question, placeholder, kept.get(host, default)), answered)

    def _confirm(self, question: str, then: Callable[[], None], no: str | None = None) -> None:
        """Ask `question`; on yes do `then`, on no say `no` (if any)."""
        def answered(yes: bool | None) -> None:
            if yes:
                then()
            elif no is not None:
                self.notify(no, timeout=2)

        self.push_screen(ConfirmScreen(question), answered)

    def _pipeline_view(self) -> PipelineView | None:
        view = self.view("pipeline")
        return view if isinstance(view, PipelineView) else None

    def action_stage_start(self) -> None:
        view, host = self._pipeline_view(), self.current_host
        stage = view.selected_stage if view is not None else None
        if stage is None:
            what = "a run no stage claims" if view is not None and view.selected_run else "nothing"
            self.notify(f"{what} is selected: s starts the selected stage (select a stage row)",
                        title="start", severity="warning")
            return
        self._act(f"start {stage}", lambda: self.source.controller.start_stage(host, stage))

    def action_stage_resume(self) -> None:
        host = self.current_host
        self._act("resume pipeline", lambda: self.source.controller.resume_pipeline(host))

    def action_stage_cancel(self) -> None:
        """Cancel the selected run (a stage row: its latest run), on the host it belongs to."""
        view, host = self._pipeline_view(), self.current_host
        run_id = view.selected_run if view is not None else None
        job = self.state.host(host).jobs.get(run_id) if run_id else None
        if job is None or not job.running:
            what = (f"run {job.run_id} already {job.state}" if job is not None
                    else "no run is selected on " + host)
            self.notify(f"nothing to cancel: {what}", title="cancel", severity="warning")
            return
        stage = (view.selected_stage if view is not None else None) or job.name
        self._confirm(f"Cancel {stage} (run {job.run_id}) on {host}?", lambda: self._act(
            f"cancel {stage}", lambda: self.source.controller.cancel_stage(host, stage, job.run_id)))

    # -- serve and bench (the Bench screen) -----------------------------------------------------
    def action_serve_start(self, role: str) -> None:
        """Ask which pipeline (a TOML on this machine, or the demo) as `console serve start`
        does, then start the server in a worker: the top bar says so while the engine loads."""
        host = self.current_host
        srv = self.state.host(host).servers.get(role)
        if srv is not None and srv.state in ("starting", "ready"):
            self.notify(f"the {role} server on {host} is already {srv.state} ({srv.url})",
                        title="serve", severity="warning", markup=False)
            return

        self._ask(f"Start the {role} vLLM server on {host}: pipeline config (TOML) on this machine, "
                  "or 'demo' for the demo built by `console run --demo`", "demo or path/to/pipeline.toml",
                  self.serve_pipelines, "demo", lambda value: self._act(
                      f"serve {role}", lambda: self.source.controller.serve_start(
                          host, role, None if value == "demo" else value)),
                  no=f"{role} server not started")

    def action_serve_stop(self) -> None:
        host = self.current_host
        self._confirm(f"Stop the vLLM servers (speculative and baseline) on {host}?",
                      lambda: self._act("stop servers", lambda: self.source.controller.serve_stop(host)))

    def action_bench_run(self) -> None:
        host = self.current_host
        base = self.state.host(host).servers.get("baseline")
        baseline_url = base.url if base is not None and base.state == "ready" else None

        note = (f"; the baseline server at {baseline_url} is measured first" if baseline_url
                else "; start the baseline server (o) to get speedups")
        self._ask(f"Benchmark the server on {host}: `console bench run` options{note}",
                  "--concurrency 1,4,16 --max-tokens 256 --requests 32", self.bench_options,
                  DEFAULT_BENCH_OPTIONS, lambda options: self._act(
                      "bench", lambda: self.source.controller.run_bench(host, options, baseline_url)))

    def action_bench_matrix(self) -> None:
        host = self.current_host
        self._ask(f"Speculation matrix on {host}: `console bench matrix` options (one engine per "
                  "draft and K in turn, minutes each; progress and ETA on this screen; the same "
                  "options again continue a stopped matrix)",
                  "--demo --drafts none,ngram,pipeline --k 1,3 --temperature 0,0.7 --concurrency 1,4",
                  self.matrix_options, DEFAULT_MATRIX_OPTIONS, lambda options: self._act(
                      "matrix", lambda: self.source.controller.run_matrix(host, options)))

    def _log_view(self) -> LogView | None:
        view = self._pipeline_view()
        return view.query_one(LogView) if view is not None else None

    def action_log_records(self) -> None:
        if (log := self._log_view()) is not None:
            log.set_records(not log.records)

    def action_follow(self) -> None:
        if (log := self._log_view()) is not None:
            log.set_follow(not log.follow)  # the log's border says which

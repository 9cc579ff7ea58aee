"""`console report` on a real recorded demo run, opened in a real headless Chromium (Debian's
`chromium`, installed by scripts/ensure-tools.sh): its DOM has every chart as a decoded image
(no broken one), and its screenshot shows each chart where the DOM puts it, not blank.

The input is the test run's one demo (tests/demo_fixture.py: `console run --host local --demo`,
the real pipeline on CPU, carried by the box runner after its console was killed), recorded as an
operator does once the box has done it: `console jobs tail RUN --from-start` of the runner's log.
It holds the stages, loss, offline acceptance and each stage's command. A demo
run serves nothing, so a second report adds, after that same real session's records, a bench
sweep, bench watch windows and 8-GPU stats (tests/chart_sessions.py, through the event
schemas): the served acceptance, speedup, watch and GPU charts need them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from console.cli import main
from console.sessions.reader import SessionReader
from console.sessions.writer import SessionWriter
from remote.spine import events as ev
from remote.spine.events import Event
from tests.chart_sessions import chart_events
from tests.demo_fixture import Demo, carried_session

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--force-device-scale-factor=1"]
WINDOW = (1280, 5000)
# Run on load: each image's state and where it is on the page, left on <body> for --dump-dom.
CHECK = """<script>window.addEventListener('load', () => {
  const r = [...document.images].map(i => ({id: i.id, complete: i.complete, w: i.naturalWidth,
    h: i.naturalHeight, box: i.getBoundingClientRect().toJSON()}));
  document.body.setAttribute('data-images', JSON.stringify(r));
});</script>"""


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium")
    assert exe, "chromium is not installed (make test installs it: scripts/ensure-tools.sh)"
    with tempfile.TemporaryDirectory(prefix="report-chromium-") as profile:
        return subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}",
                               f"--window-size={WINDOW[0]},{WINDOW[1]}", *args],
                              capture_output=True, text=True, timeout=120, check=False)


class _Body(HTMLParser):
    images: str = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self.images = dict(attrs).get("data-images") or ""


def open_in_chromium(report: Path, tmp: Path) -> tuple[list[dict[str, object]], np.ndarray]:
    """(each image's state and box from the DOM, the screenshot's pixels) of `report`.

    One Chromium start does both (headless runs --dump-dom and --screenshot on the same page
    load; a start costs seconds here): the probe is the report with CHECK added before
    </body>, a script that only writes an attribute, so the page drawn is the report's and the
    boxes the DOM gives are those of the very pixels in the screenshot."""
    probe = tmp / f"{report.stem}-probe.html"
    probe.write_text(report.read_text().replace("</body>", CHECK + "</body>"))
    shot = tmp / f"{report.stem}.png"
    dom = chromium("--virtual-time-budget=10000", "--dump-dom", f"--screenshot={shot}",
                   probe.as_uri())
    parser = _Body()
    parser.feed(dom.stdout)
    assert parser.images, f"no image report in the DOM: {dom.stderr[-2000:]}"
    assert shot.is_file(), dom.stderr[-2000:]
    import matplotlib.image

    return json.loads(parser.images), matplotlib.image.imread(str(shot))


def assert_charts_shown(report: Path, tmp: Path, expected: set[str]) -> None:
    html = report.read_text()
    assert "<script" not in html and "http://" not in html and "https://" not in html  # stands alone
    images, pixels = open_in_chromium(report, tmp)
    ids = {str(i["id"]) for i in images}
    assert ids == {f"chart-{name}" for name in expected}, ids
    for image in images:
        assert image["complete"] and int(str(image["w"])) > 200 and int(str(image["h"])) > 100, image  # decoded
        box = image["box"]
        assert isinstance(box, dict)
        top, left = int(box["top"]), int(box["left"])
        bottom, right = int(box["bottom"]), int(box["right"])
        assert bottom <= pixels.shape[0] and right <= pixels.shape[1], (image, pixels.shape)
        region = pixels[top:bottom, left:right, :3]
        # Drawn: many distinct colours, a good share of them not the page's white.
        not_white = (region < 0.9).any(axis=2).mean()
        colours = len(np.unique((region * 255).astype(np.uint8).reshape(-1, 3), axis=0))
        assert not_white > 0.03 and colours > 20, (image["id"], not_white, colours)


@pytest.mark.slow
def test_report_of_the_real_demo_run_in_chromium(console_demo: Demo, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    session = carried_session(console_demo)
    out = tmp_path / "demo.html"
    assert main(["report", str(session), "--out", str(out)]) == 0
    assert "report written" in capsys.readouterr().out
    text = out.read_text()
    for stage in ("prepare", "extract", "vocab", "train", "evaluate"):
        assert f"<td>{stage}</td>" in text
    assert "-m pipeline train" in text  # the command that produced the head
    assert_charts_shown(out, tmp_path, {"loss", "acceptance"})


@pytest.mark.slow
def test_report_with_bench_and_stats_in_chromium(console_demo: Demo, tmp_path: Path) -> None:
    session = tmp_path / "demo-bench.jsonl"
    with SessionReader(carried_session(console_demo)) as reader:
        demo = list(reader.events())
        header = reader.header
    last = demo[-1].ts
    extra = chart_events(host=demo[-1].host or "local")
    shift = last - extra[0].ts
    with SessionWriter(session, header.hosts, started=header.started) as w:
        for e in demo:
            w.write(e)
        for e in extra:
            if e.kind in (ev.STAGE_START, ev.STAGE_PROGRESS, ev.STAGE_END):
                continue  # the demo's own stages, loss and offline acceptance stay
            w.write(Event(e.kind, e.host, e.payload, e.ts + shift))
    out = tmp_path / "demo-bench.html"
    assert main(["report", str(session), "--out", str(out)]) == 0
    text = out.read_text()
    assert "crossover ≈ concurrency 34.9" in text
    assert_charts_shown(out, tmp_path, {"loss", "acceptance", "speedup", "watch", "gpus"})

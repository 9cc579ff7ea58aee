"""console/tui/quiet.py: a content update re-lays out the screen only when its shape changes,
and what is painted is the new content either way."""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from console.tui.quiet import set_content, text_shape


class _Probe(App[None]):
    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="box")
            yield Static("below", id="below")


async def test_layout_only_when_the_shape_changes_and_the_new_text_is_painted() -> None:
    app = _Probe()
    async with app.run_test(size=(60, 20)) as pilot:
        box = app.query_one("#box", Static)
        layouts: list[bool] = []
        original = box.refresh

        def spy(*regions: Any, **kw: Any) -> Any:
            layouts.append(bool(kw.get("layout")))
            return original(*regions, **kw)

        box.refresh = spy  # type: ignore[method-assign]
        set_content(box, lambda: "a\nb", shape=2)
        await pilot.pause()
        assert layouts[-1] is True and box.size.height == 2  # first update: laid out
        set_content(box, lambda: "c\nd", shape=2)
        await pilot.pause()
        assert layouts[-1] is False and box.size.height == 2
        assert "c" in str(box.render()) and "d" in str(box.render())  # painted, not stale
        set_content(box, lambda: "e\nf\ng", shape=3)
        await pilot.pause()
        assert layouts[-1] is True and box.size.height == 3
        assert app.query_one("#below", Static).region.y == box.region.y + 3  # reflowed


async def test_an_unchanged_key_skips_the_update() -> None:
    app = _Probe()
    async with app.run_test(size=(60, 20)) as pilot:
        box = app.query_one("#box", Static)
        made: list[str] = []

        def make(text: str) -> str:
            made.append(text)
            return text

        set_content(box, lambda: make("one"), shape=1, key="k1")
        set_content(box, lambda: make("two"), shape=1, key="k1")
        set_content(box, lambda: make("three"), shape=1, key="k2")
        await pilot.pause()
        assert made == ["one", "three"]
        assert "three" in str(box.render())


def test_text_shape_is_the_line_count_until_a_line_may_wrap() -> None:
    assert text_shape("abc", 80) == text_shape("xyz", 80) == 1
    assert text_shape("a\nb", 80) == 2
    long = "x" * 90
    assert text_shape(long, 80) == long  # may wrap: any change re-lays out
    assert text_shape("界" * 39, 80) == "界" * 39  # wide characters count double

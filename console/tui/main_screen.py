"""The console's main screen: a focus change repaints what it restyles, not the whole screen.

Textual's `Screen.focused` is a reactive that repaints the entire screen when it changes, and
the console moves focus on every screen switch (off the old view, onto the new one). Profiled
under the 8-GPU day load, that repaint came on top of the layout the switch needs anyway, in the
same tick: the screen was rendered twice per switch (a partial update for the layout, then a
full one for the focus), about a third of a switch's CPU. The widgets whose look depends on
focus (`:focus` rules; the console has no `:focus-within` ones) are restyled and repaint
themselves when Textual sets focus (their Focus and Blur), so the full repaint draws nothing new.
"""

from __future__ import annotations

from textual.reactive import Reactive
from textual.screen import Screen
from textual.widget import Widget


class MainScreen(Screen[None]):
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)

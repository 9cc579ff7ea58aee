"""Messages between the app and its views. Views never reach into the app's state machinery:
they are told what changed and read the (Textual-free) state they are handed."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message

from console.tui.model import ConsoleState


@dataclass
class StateChanged(Message):
    """Events were folded into the state; `domains` says which parts moved (empty: everything)."""

    state: ConsoleState
    host: str
    domains: frozenset[str] = field(default_factory=frozenset)

    def touches(self, *domains: str) -> bool:
        return not self.domains or any(d in self.domains for d in domains)


@dataclass
class HostSelected(Message):
    host: str
    screen: str | None = None  # the screen to open for it (the Fleet screen's Enter: overview)


@dataclass
class MarkerChosen(Message):
    index: int

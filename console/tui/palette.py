"""The command palette: the same registry as the key bindings, filtered to the mode."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from console.tui.registry import Command, commands_for, key_label


class RegistryCommands(Provider):
    def _commands(self) -> list[Command]:
        mode = getattr(self.app, "mode", "live")
        return [c for c in commands_for(mode) if c.id != "palette"]

    async def _run(self, command: Command) -> None:
        run = getattr(self.app, "run_command", None)
        if run is not None:
            await run(command)
        else:
            await self.app.run_action(command.action)

    async def discover(self) -> Hits:
        for c in self._commands():
            yield DiscoveryHit(f"{c.title} ({key_label(c.key)})", partial(self._run, c),
                               help=c.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for c in self._commands():
            label = f"{c.title} ({key_label(c.key)})"
            score = max(matcher.match(label), matcher.match(c.help) * 0.8)
            if score > 0:
                yield Hit(score, matcher.highlight(label), partial(self._run, c), help=c.help)

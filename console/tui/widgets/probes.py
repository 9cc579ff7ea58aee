"""Probes screen: environment, the model structure as a tree (class at each hop, SupportsEagle3
marks, the resolved layers path) and the compat findings with their fixes."""

from __future__ import annotations

import itertools
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static, Tree

from console.tui.model import PROBES, ConsoleState, HostState
from console.tui.shown import plain
from console.tui.widgets.common import View
from console.tui.widgets.hosts import env_summary
from console.tui.widgets.overview import findings_table
from remote import probe_table
from remote.spine.sanitize import visible


def eagle_mark(flag: object) -> Text:
    if flag is True:
        return Text.assemble(" ", ("✓ SupportsEagle3", "green"))
    if flag is False:
        return Text.assemble(" ", ("✗ no SupportsEagle3", "red"))
    return Text("")


def fill_model_tree(tree: Tree[Any], result: dict[str, Any]) -> None:
    """The model probe's hops as nested nodes, top class first: each child is reached through
    its parent hop's `attr`, the last hop owns the layers (`layers_attr`). Each node shows the
    class and its SupportsEagle3 mark. What the probe could not resolve is shown with
    where it stopped; other keys go under "details" so nothing the probe said is hidden.
    Every label is a Text built from parts (`plain`): class names and reasons come from the box
    and are neither markup nor terminal sequences here."""
    tree.clear()
    arch = str(result.get("architecture") or "model")
    hops = [h for h in result.get("hops") or [] if isinstance(h, dict)]

    def label(prefix: str, hop: dict[str, Any]) -> Text:
        return Text.assemble(plain(prefix), plain(hop.get("class", "?"), "bold"),
                             eagle_mark(hop.get("supports_eagle3")))

    if hops:
        tree.root.set_label(label("", hops[0]))
    else:
        tree.root.set_label(Text.assemble(plain(arch, "bold"), eagle_mark(result.get("supports_eagle3"))))
    node = tree.root
    for parent, hop in itertools.pairwise(hops):
        node = node.add(label(f"{parent.get('attr', '?')}: ", hop), expand=True)
    path = result.get("layers_path")
    layers = result.get("num_layers")
    if path:
        attr = hops[-1].get("layers_attr", "layers") if hops else "layers"
        node.add_leaf(Text.assemble(plain(attr, "bold cyan"), " — layers path ", plain(path, "bold"),
                                    plain(f" ({layers} layers)" if layers else "")))
    aux = result.get("default_aux_layers") or result.get("aux_layers")
    if aux:
        tree.root.add_leaf(plain(f"default EAGLE-3 aux layers: {aux}"))
    if result.get("status") not in (None, "resolved"):
        bad = tree.root.add(plain(f"{result.get('status')}: {result.get('reason', '')}", "bold red"),
                            expand=True)
        if result.get("stopped_at"):
            bad.add_leaf(plain(f"stopped at {result['stopped_at']}"))
    known = {"architecture", "supports_eagle3", "hops", "layers_path", "num_layers", "aux_layers",
             "default_aux_layers", "status", "reason", "stopped_at", "summary"}
    extra = {k: v for k, v in result.items() if k not in known}
    if extra:
        details = tree.root.add("details")
        for k, v in extra.items():
            details.add_leaf(plain(f"{k}: {v}"[:200]))
    tree.root.expand()


# The probes this screen draws in panes of its own (the env line, the model tree, the findings).
PANES = frozenset({"env", "model", "compat"})


class ProbesView(View):
    DOMAINS = (PROBES,)

    def compose(self) -> ComposeResult:
        yield Static(id="env")
        # Side by side the tree gets 44 columns at 80, and its class names and SupportsEagle3
        # marks ran off its edge: under 110 columns the tree sits above the findings, full width.
        stacked = self.app.size.width < 110
        with Vertical(id="probe-panes", classes="stacked") if stacked else Horizontal(id="probe-panes"):
            tree: Tree[Any] = Tree("model structure (run the model probe: m)" if self.live
                                   else "model structure: no model probe in this recording", id="model-tree")
            yield tree
            with VerticalScroll(id="findings-pane"):
                yield Static(id="compat")

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        env = host.probes.get("env") or host.probes.get("check") or {}
        text = Text()
        text.append("Environment: ", style="bold")
        text.append(env_summary(env))
        for row in probe_table.TABLE:  # a probe without a pane of its own: its summary line
            result = host.probes.get(row.name)
            if row.name not in PANES and result:
                text.append(f"\n{row.name}: ", style="bold")
                text.append(visible(row.summary(result)))
        for probe, message in sorted(host.probe_errors.items()):
            text.append(f"\n{probe} probe failed: {visible(message)}", style="red")
        self.query_one("#env", Static).update(text)
        model = host.probes.get("model")
        if model:
            fill_model_tree(self.query_one("#model-tree", Tree), model)
        findings = host.compat_findings()
        self.query_one("#compat", Static).update(
            findings_table(findings, narrow=self.app.size.width < 110) if findings
            else Text("No compat findings (k runs the advisor)" if self.live
                      else "No compat findings in this recording", style="dim"))

"""Probes screen: environment, the model structure as a tree (class at each hop, SupportsEagle3
marks, the resolved layers path) and the compat findings with their fixes."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Static, Tree

from console.tui.model import PROBES, ConsoleState, HostState
from console.tui.widgets.common import View
from console.tui.widgets.hosts import env_summary
from console.tui.widgets.overview import findings_table


def eagle_mark(flag: object) -> str:
    if flag is True:
        return " [green]✓ SupportsEagle3[/]"
    if flag is False:
        return " [red]✗ no SupportsEagle3[/]"
    return ""


def fill_model_tree(tree: Tree[Any], result: dict[str, Any]) -> None:
    """Hops as nested nodes: `attr: Class  ✓/✗`, down to the layers. Keys this does not know
    are shown as-is under "details" so nothing the probe said is hidden."""
    tree.clear()
    arch = result.get("architecture") or result.get("class") or "model"
    tree.root.set_label(Text.from_markup(f"[bold]{arch}[/]{eagle_mark(result.get('supports_eagle3'))}"))
    node = tree.root
    hops = result.get("hops")
    if isinstance(hops, list):
        for hop in hops:
            if not isinstance(hop, dict):
                continue
            attr = hop.get("attr") or hop.get("name") or "?"
            cls = hop.get("class") or ""
            where = f" [dim]{hop['module']}[/]" if hop.get("module") else ""
            node = node.add(Text.from_markup(f"{attr}: [bold]{cls}[/]{eagle_mark(hop.get('supports_eagle3'))}{where}"),
                            expand=True)
    path = result.get("layers_path")
    layers = result.get("num_layers")
    if path:
        node.add_leaf(Text.from_markup(f"[bold cyan]layers[/] at [bold]{path}[/]"
                                       + (f" ({layers} layers)" if layers else "")))
    aux = result.get("aux_layers")
    if aux:
        tree.root.add_leaf(f"default EAGLE-3 aux layers: {aux}")
    unresolved = result.get("unresolved")
    if unresolved:
        bad = tree.root.add(Text("unresolved", style="bold red"), expand=True)
        for item in unresolved if isinstance(unresolved, list) else [unresolved]:
            bad.add_leaf(str(item))
    known = {"architecture", "class", "supports_eagle3", "hops", "layers_path", "num_layers",
             "aux_layers", "unresolved", "summary"}
    extra = {k: v for k, v in result.items() if k not in known}
    if extra:
        details = tree.root.add("details")
        for k, v in extra.items():
            details.add_leaf(f"{k}: {v}"[:200])
    tree.root.expand()


class ProbesView(View):
    DOMAINS = (PROBES,)

    def compose(self) -> ComposeResult:
        yield Static(id="env")
        with Horizontal():
            tree: Tree[Any] = Tree("model structure (run the model probe: m)", id="model-tree")
            yield tree
            with VerticalScroll(id="findings-pane"):
                yield Static(id="compat")

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        env = host.probes.get("env") or host.probes.get("check") or {}
        text = Text()
        text.append("Environment: ", style="bold")
        text.append(env_summary(env))
        for probe, message in sorted(host.probe_errors.items()):
            text.append(f"\n{probe} probe failed: {message}", style="red")
        self.query_one("#env", Static).update(text)
        model = host.probes.get("model")
        if model:
            fill_model_tree(self.query_one("#model-tree", Tree), model)
        findings = host.compat_findings()
        self.query_one("#compat", Static).update(
            findings_table(findings) if findings else Text("No compat findings (k runs the advisor)", style="dim"))

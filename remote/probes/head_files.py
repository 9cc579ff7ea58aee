"""An EAGLE-3 head directory read without loading it: its config.json and the headers of its
safetensors files (the 8-byte length and the JSON after it), never a tensor's bytes, so a head
of any size is checked in milliseconds and no weights enter memory (head_probe.py's sibling;
stdlib only, Python >= 3.8).

Two formats are read, the two vLLM serves with method eagle3 (vllm/transformers_utils/configs/
speculators/, vllm/model_executor/models/llama_eagle3.py, 0.32):
- speculators: config.json has `speculators_model_type` ("eagle3"), the draft layer's own
  config under `transformer_layer_config`, and `speculators_config.proposal_methods[0].
  speculative_tokens`;
- the common EAGLE-3 HF format (yuhuili/EAGLE3-*, published heads): a plain HF config with an
  Eagle3 architecture (`LlamaForCausalLMEagle3`, ...) or a `draft_vocab_size`, the aux layer ids
  at the top or under `eagle_config`.
"""

import json
import os
import struct

from .probe_errors import HeadFileError

# safetensors' dtype names, and the torch_dtype spellings a config.json uses for each.
DTYPE_WORDS = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
               "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
               "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
MAX_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit on its JSON header


def read_json(path):
    with open(path, "r", encoding="utf-8") as fh:
        return json.load(fh)


def safetensors_header(path):
    """{tensor name: {"dtype", "shape"}} of one .safetensors file, from its header alone.
    HeadFileError when the file is shorter than its header or its tensors say it is."""
    name = os.path.basename(path)
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise HeadFileError("%s is cut short: %d bytes, not even the 8-byte header length"
                                % (name, size))
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER or 8 + n > size:
            raise HeadFileError("%s is cut short: its header says %d bytes of JSON, the file "
                                "holds %d after the length" % (name, n, size - 8))
        raw = fh.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HeadFileError("%s: its header is not JSON (%s)" % (name, exc)) from None
    if not isinstance(header, dict):
        raise HeadFileError("%s: its header is not a JSON object" % name)
    data = size - 8 - n
    tensors = {}
    end = 0
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            _, hi = info["data_offsets"]
            tensors[key] = {"dtype": str(info["dtype"]), "shape": [int(d) for d in info["shape"]]}
        except (KeyError, TypeError, ValueError):
            raise HeadFileError("%s: tensor %s has no dtype, shape and data_offsets"
                                % (name, key)) from None
        end = max(end, int(hi))
    if end > data:
        raise HeadFileError("%s is cut short: its header places tensors up to byte %d, the file "
                            "holds %d bytes of tensor data" % (name, end, data))
    return tensors


def weight_files(head):
    """The head's .safetensors files (sorted), and the other weight files it has instead."""
    names = sorted(os.listdir(head))
    st = [os.path.join(head, n) for n in names if n.endswith(".safetensors")]
    other = [n for n in names if n.endswith((".bin", ".pt", ".pth")) and not n.startswith(".")]
    return st, other


def head_tensors(head):
    """{name: {"dtype", "shape", "file"}} over every safetensors file of the head."""
    st, _ = weight_files(head)
    out = {}
    for path in st:
        for key, info in safetensors_header(path).items():
            info["file"] = os.path.basename(path)
            out[key] = info
    return out


def head_format(conf):
    """"speculators", "eagle3-hf", or None for a config that is neither."""
    if "speculators_model_type" in conf:
        return "speculators"
    archs = conf.get("architectures") or []
    if any("eagle3" in str(a).lower() for a in archs) or "draft_vocab_size" in conf:
        return "eagle3-hf"
    return None


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def head_facts(conf):
    """What vLLM reads from a head's config.json: the draft layer's sizes, the target hidden
    size it expects, the draft vocabulary, the aux layer ids (with where each came from)."""
    fmt = head_format(conf)
    layer = conf.get("transformer_layer_config") if fmt == "speculators" else conf
    layer = layer if isinstance(layer, dict) else {}
    facts = {"format": fmt, "speculators_model_type": conf.get("speculators_model_type"),
             "architectures": layer.get("architectures") or conf.get("architectures"),
             "hidden_size": _int(layer.get("hidden_size")),
             "vocab_size": _int(layer.get("vocab_size")),
             "draft_vocab_size": _int(conf.get("draft_vocab_size")),
             "target_hidden_size": _int(conf.get("target_hidden_size")),
             "dtype": (layer.get("torch_dtype") or layer.get("dtype") or conf.get("torch_dtype")
                       or conf.get("dtype"))}
    prefix = "transformer_layer_config." if fmt == "speculators" else ""
    facts["hidden_size_key"] = prefix + "hidden_size"
    ids, key = conf.get("eagle_aux_hidden_state_layer_ids"), "eagle_aux_hidden_state_layer_ids"
    eagle = conf.get("eagle_config")
    if not ids and isinstance(eagle, dict) and eagle.get("eagle_aux_hidden_state_layer_ids"):
        ids, key = eagle["eagle_aux_hidden_state_layer_ids"], \
            "eagle_config.eagle_aux_hidden_state_layer_ids"
    if isinstance(ids, list) and all(_int(i) is not None for i in ids):
        facts["aux_layer_ids"], facts["aux_layer_ids_from"] = ids, key
    else:
        facts["aux_layer_ids"], facts["aux_layer_ids_from"] = None, None
    try:
        k = conf["speculators_config"]["proposal_methods"][0]["speculative_tokens"]
        facts["speculative_tokens"] = _int(k)
    except (KeyError, IndexError, TypeError):
        facts["speculative_tokens"] = None
    return facts


def target_facts(conf):
    """The target's sizes as an EAGLE-3 head meets them: its text model's (text_config for a
    multimodal wrapper such as Kimi-K2.5)."""
    text = conf.get("text_config") if isinstance(conf.get("text_config"), dict) else conf
    pick = lambda k: _int(text.get(k)) if _int(text.get(k)) is not None else _int(conf.get(k))  # noqa: E731
    return {"architectures": conf.get("architectures") or [],
            "model_type": conf.get("model_type"), "text_model_type": text.get("model_type"),
            "hidden_size": pick("hidden_size"), "vocab_size": pick("vocab_size"),
            "num_layers": pick("num_hidden_layers") or pick("num_layers") or pick("n_layer"),
            "dtype": text.get("torch_dtype") or text.get("dtype") or conf.get("torch_dtype")}


def dtype_word(name):
    return DTYPE_WORDS.get(str(name).upper(), str(name).lower())

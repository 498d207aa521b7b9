"""Model descriptions: the shipped configs and Hugging Face config.json loading."""
from __future__ import annotations

import functools
import json
import math
import os
from importlib import resources
from typing import Any, Mapping, Union

from .. import _C
from .._checks import read_small_file

ModelConfig = _C.ModelConfig
MODEL_FIELD_MAX = _C.MODEL_FIELD_MAX  # upper bound on every integer field (2**24)
_MAX_CONFIG_BYTES = 16 << 20           # a config.json is a few KB; refuse to parse anything huge

# config.json key -> ModelConfig field. Every key is required except q_lora_rank, which is
# null for models that project queries straight from the hidden state (DeepSeek-V2-Lite).
HF_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "dim",
    "intermediate_size": "inter_dim",
    "moe_intermediate_size": "moe_inter_dim",
    "num_hidden_layers": "n_layers",
    "first_k_dense_replace": "n_dense_layers",
    "num_attention_heads": "n_heads",
    "n_routed_experts": "n_routed_experts",
    "n_shared_experts": "n_shared_experts",
    "num_experts_per_tok": "n_activated_experts",
    "n_group": "n_expert_groups",
    "topk_group": "n_limited_groups",
    "routed_scaling_factor": "route_scale",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
}
_NULLABLE = {"q_lora_rank"}
# Optional keys dsperf adds to a shipped config.json: what the seed analysis quotes for the model
# (read by the as_published mode only; absent from a Hugging Face config, and then 0).
DSPERF_FIELDS = {"dsperf_quoted_total_params": "quoted_total_params"}

ModelLike = Union[str, os.PathLike, Mapping[str, Any], ModelConfig]


def _model_repr(m: ModelConfig) -> str:
    return (f"ModelConfig(name={m.name!r}, dim={m.dim}, n_layers={m.n_layers}, n_heads={m.n_heads}, "
            f"n_routed_experts={m.n_routed_experts}, n_activated_experts={m.n_activated_experts}, "
            f"kv_lora_rank={m.kv_lora_rank})")


ModelConfig.__repr__ = _model_repr


def _models_dir():
    return resources.files("dsperf") / "data" / "models"


@functools.lru_cache(maxsize=1)
def _list_models() -> tuple[str, ...]:
    return tuple(sorted(p.name[:-5] for p in _models_dir().iterdir() if p.name.endswith(".json")))


def list_models() -> list[str]:
    """Names of the model configs shipped with dsperf."""
    return list(_list_models())


@functools.lru_cache(maxsize=None)
def _shipped_config(name: str) -> dict:
    with (_models_dir() / f"{name}.json").open() as f:
        return json.load(f)


def from_hf_config(config: Mapping[str, Any], name: str = "custom", source: str | None = None) -> ModelConfig:
    """Build a ModelConfig from a Hugging Face config.json dictionary.

    Raises ValueError naming the missing, mistyped, out-of-range or inconsistent field (and the
    file, when `source` names one). Integer fields must lie in [0, MODEL_FIELD_MAX].
    """
    where = f"config.json '{source}'" if source else "config.json"
    if not isinstance(config, Mapping):
        raise TypeError(f"{where} must hold a mapping (a parsed config.json), got {type(config).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {name!r}")
    m = ModelConfig()
    m.name = name
    for key, field in HF_FIELDS.items():
        if key not in config:
            raise ValueError(f"{where} is missing the field '{key}'")
        value = config[key]
        if value is None and key in _NULLABLE:
            value = 0
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where} field '{key}' must be a number, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where} field '{key}' must be finite, got {value!r}")
        if field == "route_scale":
            setattr(m, field, float(value))
        else:
            if float(value) != int(value):
                raise ValueError(f"{where} field '{key}' must be an integer, got {value!r}")
            # Checked before the C++ int64 field takes it: no narrowing, no overflow downstream.
            if not 0 <= int(value) <= MODEL_FIELD_MAX:
                raise ValueError(f"{where} field '{key}' must lie in [0, {MODEL_FIELD_MAX}], got {value!r}")
            setattr(m, field, int(value))
    for key, field in DSPERF_FIELDS.items():
        if key in config:
            value = config[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 <= value <= 1e15:
                raise ValueError(f"{where} field '{key}' must be a number in [0, 1e15], got {value!r}")
            setattr(m, field, float(value))
    try:
        m.validate()
    except ValueError as e:  # name the config.json key, not only the C++ field
        field = str(e).split("'")[1] if "'" in str(e) else ""
        keys = [k for k, f in HF_FIELDS.items() if f == field]
        hint = f" ({where} '{keys[0]}')" if keys else (f" ({where})" if source else "")
        raise ValueError(f"{e}{hint}") from None
    return m


def _reject_constant(token):
    raise ValueError(f"{token} is not a number JSON allows")


def read_config_json(path: str) -> dict:
    """A config.json as a dict; every failure (unreadable, not UTF-8, not JSON, NaN or Infinity,
    nested beyond Python's recursion limit) is a ValueError naming the file."""
    text = read_small_file(path, _MAX_CONFIG_BYTES, "model file")
    try:
        cfg = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ValueError(f"model file '{path}' is not valid JSON: {e}") from None
    except ValueError as e:  # NaN, Infinity
        raise ValueError(f"model file '{path}' is not valid JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"model file '{path}' is not a config.json: nested too deeply") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"model file '{path}' must hold a JSON object, got {type(cfg).__name__}")
    return cfg


def load_model(model: ModelLike = "DeepSeek-V3") -> ModelConfig:
    """A ModelConfig from a shipped name ("DeepSeek-V3", "DeepSeek-R1", "Kimi-K2", ...),
    a path to a config.json (or a folder holding one), a parsed dict, or a ModelConfig."""
    if isinstance(model, ModelConfig):
        model.validate()
        return model
    if isinstance(model, Mapping):
        return from_hf_config(model)
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a name, a path, a dict or a ModelConfig, got {type(model).__name__}")
    text = os.fspath(model)
    if not isinstance(text, str):
        raise TypeError(f"model must be a name, a path, a dict or a ModelConfig, got {model!r}")
    if "\0" in text:
        raise ValueError(f"model {text!r} is not a name or a path (it holds a NUL character)")
    if text in ("DeepSeek-R1", "deepseek-r1"):
        text = "DeepSeek-V3"
    by_lower = {n.lower(): n for n in list_models()}
    if text.lower() in by_lower:
        name = by_lower[text.lower()]
        return from_hf_config(_shipped_config(name), name=name)
    path = os.path.join(text, "config.json") if os.path.isdir(text) else text
    if not os.path.isfile(path):
        raise ValueError(f"model '{text}' is neither a shipped model ({', '.join(list_models())}) nor a config.json file")
    cfg = read_config_json(path)
    return from_hf_config(cfg, name=os.path.basename(os.path.dirname(os.path.abspath(path))) or "custom", source=path)


def model_summary(model: ModelLike = "DeepSeek-V3") -> dict:
    """The config's fields as a plain dict (for printing and DataFrames)."""
    m = load_model(model)
    out = {"name": m.name}
    out.update({field: getattr(m, field) for field in HF_FIELDS.values()})
    return out

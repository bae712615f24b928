"""Model shapes: the shipped presets and Hugging Face ``config.json`` files, read into one schema.

A :class:`ModelPreset` says only what a model's shape is (layers, heads, key/value heads, widths,
vocabulary, norm, gating); what it costs and how many parameters and cache bytes it holds follow from
the attention program and the ops around it (:mod:`costmodel.model_step`).
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from costmodel.errors import CostModelError
from costmodel.files import load_json, load_yaml, read_text
from costmodel.vocab import MAX_DIM, kv_heads

PACKAGE = "costmodel.model_presets"


class ModelPreset(BaseModel):
    """The shape of a model, from a preset file or a Hugging Face config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    aliases: tuple[str, ...] = ()
    name: str
    architecture: Literal["decoder", "encoder-decoder"]
    d_model: int = Field(ge=1, le=MAX_DIM)
    layers: int = Field(ge=1, le=MAX_DIM, description="decoder layers")
    encoder_layers: int = Field(default=0, ge=0, le=MAX_DIM)
    heads: int = Field(ge=1, le=MAX_DIM)
    kv_heads: int = Field(ge=1, le=MAX_DIM, description="key/value heads of decoder self-attention")
    encoder_kv_heads: int | None = None
    cross_kv_heads: int | None = None
    head_dim: int = Field(ge=1, le=MAX_DIM)
    d_ff: int = Field(ge=1, le=MAX_DIM)
    ffn_gated: bool
    vocab: int = Field(ge=1, le=MAX_DIM)
    tied_embeddings: bool
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    bias: bool = False
    learned_positions: int = Field(default=0, ge=0, le=MAX_DIM)
    parallel_block: bool = False
    rope: bool = False  # rotary position embeddings applied to q and k of every new token
    published_params: float | None = None
    source: str
    notes: str = ""

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelPreset:
        for name, g in (("kv_heads", self.kv_heads), ("encoder_kv_heads", self.encoder_kv_heads),
                        ("cross_kv_heads", self.cross_kv_heads)):
            if g is not None and self.heads % g:
                raise ValueError(f"{name} {g} does not divide heads {self.heads}")
        if (self.architecture == "encoder-decoder") != (self.encoder_layers > 0):
            raise ValueError("encoder_layers must be > 0 exactly for encoder-decoder models")
        return self

    @property
    def enc_kv(self) -> int:
        return self.encoder_kv_heads or self.heads

    @property
    def cross_kv(self) -> int:
        return self.cross_kv_heads or self.kv_heads

    def with_kv_heads(self, g: int) -> ModelPreset:
        """The same model with ``g`` key/value heads in every decoder attention (a what-if)."""
        return self.model_copy(update={"kv_heads": g, "cross_kv_heads": g if self.cross_kv_heads else None})

    def with_variant(self, variant: str, groups: int | None = None) -> ModelPreset:
        """The same model with MHA, MQA or GQA (``groups`` key/value heads, default gcd(h, 8)): a what-if."""
        return self.with_kv_heads(kv_heads(variant, self.heads, groups))


# --- loading -----------------------------------------------------------------------------------------

def _files() -> dict[str, object]:
    import yaml

    index = {}
    for f in resources.files(PACKAGE).iterdir():
        if f.name.endswith(".yaml"):
            data = yaml.safe_load(f.read_text(encoding="utf-8"))
            for name in (data["id"], *data.get("aliases", ())):
                index[name.lower().replace("_", "-")] = f
    return index


def preset_ids() -> list[str]:
    return sorted(f.name.removesuffix(".yaml") for f in resources.files(PACKAGE).iterdir() if f.name.endswith(".yaml"))


def _validated(data: dict, origin: str) -> ModelPreset:
    try:
        return ModelPreset.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise CostModelError(f"{origin}: field {where}: {first['msg'].removeprefix('Value error, ')}") from None


def load_model(name: str) -> ModelPreset:
    """A preset by id or alias (case-insensitive), or a Hugging Face ``config.json`` by path."""
    try:
        is_path = Path(name).is_file() or Path(name).is_dir()
    except (OSError, ValueError):  # a name too long for the file system is no file
        is_path = False
    if name.endswith(".json") or is_path:
        return load_hf_config(name)
    f = _files().get(name.lower().replace("_", "-"))
    if f is None:
        close = difflib.get_close_matches(name.lower(), list(_files()), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise CostModelError(f"unknown model {name!r}{hint} (presets: {', '.join(preset_ids())}; "
                             "a Hugging Face config.json path also works)")
    return _validated(load_yaml(f.read_text(encoding="utf-8"), f.name), f.name)


def _first(cfg: dict, *keys, default=None):
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def _count(cfg: dict, path: str, keys: tuple[str, ...], default=None):
    """The first of ``keys`` the config gives, which must be a positive integer (a count or a width)."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIM:
            raise CostModelError(f"{path}: field {key} must be an integer from 1 to {MAX_DIM}, got {value!r}")
        return value
    return default


def load_hf_config(path: str) -> ModelPreset:
    """Read the shape of a model from a Hugging Face ``config.json``."""
    p = Path(path)
    if p.is_dir() and (p / "config.json").is_file():  # a model folder
        p = p / "config.json"
    if not p.is_file():
        raise CostModelError(f"model config {path} does not exist")
    cfg = load_json(read_text(str(p), "model config"), str(p))
    if not isinstance(cfg, dict):
        raise CostModelError(f"{path}: expected a JSON object of config fields")
    path = str(p)
    count = lambda *keys, default=None: _count(cfg, path, keys, default)  # noqa: E731
    d = count("hidden_size", "n_embd", "d_model")
    heads = count("num_attention_heads", "n_head", "num_heads")
    layers = count("num_hidden_layers", "n_layer", "num_decoder_layers", "num_layers")
    vocab = count("vocab_size")
    missing = [name for name, value in (("hidden_size", d), ("num_attention_heads", heads),
                                        ("num_hidden_layers", layers), ("vocab_size", vocab)) if value is None]
    if missing:
        raise CostModelError(f"{path}: cannot read {', '.join(missing)} (nor its other usual names)")
    model_type = str(cfg.get("model_type", "")).lower()
    new_falcon = cfg.get("new_decoder_architecture", False)
    if cfg.get("multi_query") and not new_falcon:
        kv = 1
    else:
        kv = count("num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads)
    enc_dec = bool(cfg.get("is_encoder_decoder", False))
    act = str(_first(cfg, "hidden_act", "activation_function", "feed_forward_proj", "activation", default=""))
    gated = act.startswith("gated") or model_type in {"llama", "mistral", "mixtral", "qwen2", "gemma", "gemma2"}
    data = {
        "id": str(_first(cfg, "_name_or_path", default=p.stem)).replace("/", "_").replace("-", "_").lower() or "hf_config",
        "name": f"{_first(cfg, '_name_or_path', default=p.name)} (from {p.name})",
        "architecture": "encoder-decoder" if enc_dec else "decoder",
        "d_model": d, "layers": layers, "heads": heads, "kv_heads": kv,
        "encoder_layers": count("num_layers", "encoder_layers", default=layers) if enc_dec else 0,
        "head_dim": count("head_dim", "d_kv", default=d // heads if d % heads == 0 else None),
        "d_ff": count("intermediate_size", "ffn_hidden_size", "n_inner", "d_ff", default=4 * d),
        "ffn_gated": gated, "vocab": vocab,
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", not (enc_dec and gated))),
        "norm": "layernorm" if model_type in {"falcon", "gpt_bigcode", "gpt2", "opt"} else "rmsnorm",
        "bias": bool(cfg.get("bias", model_type in {"gpt_bigcode", "gpt2"})),
        "learned_positions": count("n_positions", default=0) if model_type in {"gpt_bigcode", "gpt2"} else 0,
        "parallel_block": bool(cfg.get("parallel_attn", False)),
        # rotary embeddings: a rotary base or fraction in the config (ALiBi models have neither)
        "rope": not cfg.get("alibi", False) and any(cfg.get(k) is not None for k in
                                                     ("rope_theta", "rotary_dim", "rotary_pct", "rotary_emb_base",
                                                      "rope_scaling", "partial_rotary_factor")),
        "source": f"Hugging Face config {p}",
    }
    if data["head_dim"] is None:
        raise CostModelError(f"{path}: cannot read head_dim, and hidden_size {d} is not divisible by heads {heads}")
    return _validated(data, str(p))

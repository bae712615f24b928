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
from costmodel.vocab import MAX_DIM, check_divisible, kv_heads

PACKAGE = "costmodel.model_presets"


class MLAShape(BaseModel):
    """Multi-head latent attention (DeepSeek-V2): the latent and per-head widths (:mod:`costmodel.mla`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_rank: int = Field(ge=1, le=MAX_DIM, description="latent rank c (kv_lora_rank)")
    rope_dim: int = Field(ge=1, le=MAX_DIM, description="decoupled rotary key dimension p (qk_rope_head_dim)")
    nope_dim: int = Field(ge=1, le=MAX_DIM, description="per-head key dimension without rotation (qk_nope_head_dim)")
    value_dim: int = Field(ge=1, le=MAX_DIM, description="per-head value dimension (v_head_dim)")
    q_rank: int | None = Field(default=None, ge=1, le=MAX_DIM, description="query latent rank l (q_lora_rank)")


class MoEShape(BaseModel):
    """A mixture-of-experts feed-forward block: ``experts`` routed experts of which each token uses
    ``experts_per_token``, always-on shared experts, and a linear router."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    experts: int = Field(ge=1, le=MAX_DIM)
    experts_per_token: int = Field(ge=1, le=MAX_DIM)
    expert_d_ff: int = Field(ge=1, le=MAX_DIM, description="FFN width of one routed expert")
    shared_d_ff: int = Field(default=0, ge=0, le=MAX_DIM, description="FFN width of the shared experts together")
    shared_gate: bool = False  # a sigmoid gate of width 1 on the shared expert (Qwen2-MoE)
    router_bias: bool = False  # a per-expert score bias (DeepSeek-V3's auxiliary-loss-free balancing)
    layers: int = Field(ge=1, le=MAX_DIM, description="layers with this block; the others have the dense FFN")

    @model_validator(mode="after")
    def _top_k(self) -> MoEShape:
        if self.experts_per_token > self.experts:
            raise ValueError(f"experts_per_token {self.experts_per_token} exceeds experts {self.experts}")
        return self


class Quantization(BaseModel):
    """How the projection weights are stored (``quantization_config`` of a checkpoint)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight_dtype: Literal["int4", "int8", "fp8"]
    group_size: int = Field(default=0, ge=0, le=MAX_DIM, description="weights per scale group (0: per channel)")
    method: str = ""


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
    layer_norms: int | None = Field(default=None, ge=0, le=8,
                                    description="norms per decoder layer (default: 1 for a parallel block, else 2)")
    mla: MLAShape | None = None
    moe: MoEShape | None = None
    sliding_window: int | None = Field(default=None, ge=1, le=MAX_DIM)
    local_layers: int = Field(default=0, ge=0, le=MAX_DIM, description="layers attending within sliding_window")
    quantization: Quantization | None = None
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
        if (self.sliding_window is None) != (self.local_layers == 0):
            raise ValueError("sliding_window and local_layers > 0 go together")
        for name, count in (("local_layers", self.local_layers), ("moe.layers", self.moe.layers if self.moe else 0)):
            if count > self.layers:
                raise ValueError(f"{name} {count} exceeds layers {self.layers}")
        if (self.mla or self.moe or self.sliding_window) and self.architecture != "decoder":
            raise ValueError("mla, moe and sliding windows are modelled in decoder-only models")
        return self

    @property
    def enc_kv(self) -> int:
        return self.encoder_kv_heads or self.heads

    @property
    def cross_kv(self) -> int:
        return self.cross_kv_heads or self.kv_heads

    @property
    def norms_per_layer(self) -> int:
        """Norms per decoder layer: the config's count, else one for a parallel block and two otherwise,
        one more for cross-attention."""
        if self.layer_norms is not None:
            return self.layer_norms
        return (1 if self.parallel_block else 2) + (self.architecture == "encoder-decoder")

    def with_kv_heads(self, g: int) -> ModelPreset:
        """The same model with ``g`` key/value heads in every decoder attention (a what-if); an MLA model
        becomes grouped-query attention with its query/key head dimension."""
        check_divisible(self.heads, g)
        if g == self.kv_heads and not self.mla and (self.cross_kv_heads is None or self.cross_kv_heads == g):
            return self
        update = {"kv_heads": g, "cross_kv_heads": g if self.cross_kv_heads else None}
        if self.mla:
            update |= {"mla": None, "head_dim": self.mla.nope_dim + self.mla.rope_dim}
        return self._what_if(update)

    def _what_if(self, update: dict) -> ModelPreset:
        """The model with another attention layout: named as such, and no longer the published count."""
        changed = self.model_copy(update=update)
        return changed.model_copy(update={"name": f"{self.name}, as {changed.attention_label}",
                                          "published_params": None})

    def with_variant(self, variant: str, groups: int | None = None) -> ModelPreset:
        """The same model with MHA, MQA, GQA (``groups`` key/value heads, default gcd(h, 8)) or MLA: a
        what-if. A grouped-query model becomes MLA with DeepSeek-V2's ratios to its head dimension k:
        latent rank 4k, rotary key k/2, no query latent (:data:`MLA_WHAT_IF`)."""
        if variant.lower() == "mla":
            if groups is not None:
                raise CostModelError(f"groups {groups} is only valid with variant gqa")
            if self.mla:
                return self
            if self.architecture != "decoder":
                raise CostModelError(f"variant mla applies to decoder-only models; {self.id} is {self.architecture}")
            k = self.head_dim
            shape = MLAShape(kv_rank=MLA_WHAT_IF["kv_rank"] * k, rope_dim=max(int(MLA_WHAT_IF["rope_dim"] * k), 1),
                             nope_dim=k, value_dim=k)
            return self._what_if({"mla": shape, "kv_heads": self.heads})
        return self.with_kv_heads(kv_heads(variant, self.heads, groups))

    @property
    def attention_label(self) -> str:
        if self.mla:
            return f"MLA (latent {self.mla.kv_rank} + rotary {self.mla.rope_dim})"
        kind = "MHA" if self.kv_heads == self.heads else "MQA" if self.kv_heads == 1 else "GQA"
        return f"{kind} (g={self.kv_heads})"


#: The MLA what-if's shape relative to the head dimension k: DeepSeek-V2's d_c = 4 d_h and d_h^R = d_h / 2
#: (DeepSeek-V2 2024, Section 2.1.2 and Appendix: 512 = 4 x 128, 64 = 128 / 2).
MLA_WHAT_IF = {"kv_rank": 4, "rope_dim": 0.5}


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
    from costmodel.checks import text

    text("model name", name)
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


#: Keys of layers the model cannot price, and what they are.
UNSUPPORTED_KEYS = {
    "state_size": "state-space (Mamba) layers", "ssm_state_size": "state-space (Mamba) layers",
    "mamba_d_state": "state-space (Mamba) layers", "time_step_rank": "state-space (Mamba) layers",
    "ssm_cfg": "state-space layers", "layers_block_type": "hybrid attention/state-space layers",
    "attn_layer_period": "hybrid attention/state-space layers",
    "hybrid_override_pattern": "hybrid attention/state-space layers",
    "full_attention_interval": "hybrid linear/full attention layers",
    "linear_num_key_heads": "linear attention layers", "attention_hidden_size": "recurrent (RWKV) layers",
    "type_vocab_size": "an encoder-only (BERT-style) model", "cross_attention_layers": "cross-attention to images",
}
#: Model types and architecture names (lower case, a substring) the model cannot price, whatever keys a config
#: gives: state-space, recurrent and hybrid families, and encoder-only models.
UNSUPPORTED_TYPES = {
    "mamba": "state-space (Mamba) layers", "jamba": "hybrid attention/state-space layers",
    "zamba": "hybrid attention/state-space layers", "bamba": "hybrid attention/state-space layers",
    "nemotron_h": "hybrid attention/state-space layers", "nemotronh": "hybrid attention/state-space layers",
    "granitemoehybrid": "hybrid attention/state-space layers", "plamo2": "hybrid attention/state-space layers",
    "falcon_h1": "hybrid attention/state-space layers", "falconh1": "hybrid attention/state-space layers",
    "rwkv": "recurrent (RWKV) layers", "recurrent_gemma": "recurrent layers", "recurrentgemma": "recurrent layers",
    "xlstm": "recurrent (xLSTM) layers", "retnet": "retention layers", "hyena": "long-convolution layers",
    "lfm2": "hybrid convolution/attention layers", "minimax_m1": "hybrid linear/full attention layers",
    "qwen3_next": "hybrid linear/full attention layers", "qwen3next": "hybrid linear/full attention layers",
    "bert": "an encoder-only (BERT-style) model", "roberta": "an encoder-only (BERT-style) model",
    "deberta": "an encoder-only (BERT-style) model", "electra": "an encoder-only (BERT-style) model",
}
#: The activations of gated (GLU) feed-forward blocks: SiLU is SwiGLU in every decoder that uses it.
GATED_ACTIVATIONS = ("silu", "swish", "swiglu")
SUPPORTED = ("decoder-only transformers with dense or mixture-of-experts feed-forward blocks, grouped-query or "
             "multi-head latent attention, full or sliding-window layers; T5-style encoder-decoders")


def _activation(cfg: dict) -> str:
    return str(_first(cfg, "hidden_act", "hidden_activation", "activation_function", "feed_forward_proj",
                      "activation", default="")).lower()


def _gated(cfg: dict) -> bool:
    """A gated feed-forward block: a SiLU activation (SwiGLU), a ``gated-*`` projection (T5 v1.1), or
    GeGLU, which Gemma's configs name by their ``hidden_activation`` key and architecture."""
    act = _activation(cfg)
    names = [str(a).lower() for a in cfg.get("architectures") or ()] + [str(cfg.get("model_type", "")).lower()]
    return (act.startswith("gated") or any(a in act for a in GATED_ACTIVATIONS) or "hidden_activation" in cfg
            or any(n.startswith("gemma") for n in names))


def _refuse_unsupported(cfg: dict, path: str) -> None:
    found = next((key for key in UNSUPPORTED_KEYS if cfg.get(key) not in (None, False)), None)
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise CostModelError(f"{path}: architectures must be a list of names, got {archs!r}"[:200])
    what = UNSUPPORTED_KEYS[found] if found else None
    if what is None and archs and not any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration"))
                                          for a in archs):
        what = f"architecture {archs[0]} (not a generating model)"
    types = {str(t) for t in cfg.get("layer_types") or ()} - {"full_attention", "sliding_attention"}
    if what is None and types:
        what = f"layer types {', '.join(sorted(types))}"
    names = [str(cfg.get("model_type") or "").lower(), *(a.lower() for a in archs)]
    typed = next((t for t in UNSUPPORTED_TYPES for n in names if t in n.replace("-", "_")), None)
    if what is None and typed is not None:
        where = next(n for n in names if typed in n.replace("-", "_"))
        raise CostModelError(f"{path}: cannot model {UNSUPPORTED_TYPES[typed]} (model type or architecture {where!r}); "
                             f"supported: {SUPPORTED}")
    if what is not None:
        where = f" (key {found})" if found else ""
        raise CostModelError(f"{path}: cannot model {what}{where}; supported: {SUPPORTED}")


def _quantization(q, path: str) -> dict | None:
    """The weight storage of a ``quantization_config``: int4/int8 with group scales, or fp8."""
    if not q:
        return None
    if not isinstance(q, dict):
        raise CostModelError(f"{path}: quantization_config must be an object")
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8" or str(q.get("fmt", "")).lower().startswith("e4m3"):
        return {"weight_dtype": "fp8", "group_size": 0, "method": method or "fp8"}
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            return {"weight_dtype": "int4", "group_size": 64, "method": "bitsandbytes 4-bit (blocks of 64)"}
        if q.get("load_in_8bit"):
            return {"weight_dtype": "int8", "group_size": 0, "method": "bitsandbytes 8-bit"}
    bits = q.get("bits", q.get("w_bit"))
    if method in ("awq", "gptq", "autoround", "auto-round") and bits in (4, 8):
        group = q.get("group_size", q.get("q_group_size", 128))
        return {"weight_dtype": f"int{bits}", "group_size": max(int(group), 0), "method": method}
    raise CostModelError(f"{path}: cannot read quantization_config with quant_method {method or '(none)'!r} "
                         f"and bits {bits!r}; supported: awq and gptq with 4 or 8 bits, fp8, bitsandbytes")


def _moe(cfg: dict, path: str, layers: int, count) -> dict | None:
    experts = count("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    if experts is None or experts <= 1:
        return None
    top_k = count("num_experts_per_tok", "moe_top_k", "num_selected_experts")
    width = count("moe_intermediate_size", "expert_intermediate_size", "intermediate_size", "ffn_hidden_size")
    if top_k is None or width is None:
        raise CostModelError(f"{path}: {experts} experts but no num_experts_per_tok or expert width "
                             "(moe_intermediate_size or intermediate_size)")
    shared = count("shared_expert_intermediate_size", default=0)
    if not shared and cfg.get("n_shared_experts"):
        shared = count("n_shared_experts") * width
    # which layers are MoE: DeepSeek's first_k_dense_replace and moe_layer_freq; Qwen's decoder_sparse_step
    # and mlp_only_layers
    dense_first = _count(cfg, path, ("first_k_dense_replace",), 0) if cfg.get("first_k_dense_replace") else 0
    every = count("moe_layer_freq", "decoder_sparse_step", default=1)
    only_mlp = cfg.get("mlp_only_layers") or []
    if not isinstance(only_mlp, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only_mlp):
        raise CostModelError(f"{path}: mlp_only_layers must be a list of layer indices, got {only_mlp!r}"[:200])
    # counted in closed form (a config may declare 2^40 layers): layers i with (i + 1) % every == 0 (Qwen), or
    # i >= dense_first with i % every == 0 (DeepSeek)
    if "decoder_sparse_step" in cfg:
        moe_layers = layers // every - len({i for i in only_mlp if 0 <= i < layers and (i + 1) % every == 0})
    else:
        moe_layers = (layers - 1) // every - (dense_first + every - 1) // every + 1 if dense_first < layers else 0
    if moe_layers == 0:
        return None
    return {"experts": experts, "experts_per_token": top_k, "expert_d_ff": width, "shared_d_ff": shared,
            "shared_gate": bool(shared) and "shared_expert_intermediate_size" in cfg,
            "router_bias": str(cfg.get("topk_method", "")).lower() == "noaux_tc", "layers": moe_layers}


def _windows(cfg: dict, layers: int, path: str) -> tuple[int | None, int]:
    """(window, local layers): ``layer_types`` when given; Gemma 2's hybrid cache (even layers local);
    every layer when a window is set and not switched off."""
    window = cfg.get("sliding_window")
    if window is None or cfg.get("use_sliding_window") is False:
        return None, 0
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_DIM:
        raise CostModelError(f"{path}: field sliding_window must be an integer from 1 to {MAX_DIM} (null for no "
                             f"window), got {window!r}"[:200])
    types = cfg.get("layer_types")
    if types:
        local = sum(1 for t in types[:layers] if t == "sliding_attention")
    elif cfg.get("sliding_window_pattern"):
        # every pattern-th layer is global, the rest local: counted in closed form
        pattern = _count(cfg, path, ("sliding_window_pattern",))
        local = layers - layers // pattern
    elif cfg.get("cache_implementation") == "hybrid":
        local = (layers + 1) // 2
    else:
        local = layers
    return (window, local) if local else (None, 0)


def load_hf_config(path: str) -> ModelPreset:
    """Read the shape of a model from a Hugging Face ``config.json`` (or a folder holding one): what the
    config's keys say, whatever its model type; an architecture it cannot price is refused."""
    p = Path(path)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise CostModelError(f"model folder {path} has no config.json")
        p = p / "config.json"
    if not p.is_file():
        raise CostModelError(f"model config {path} does not exist")
    cfg = load_json(read_text(str(p), "model config"), str(p))
    if not isinstance(cfg, dict):
        raise CostModelError(f"{path}: expected a JSON object of config fields")
    path = str(p)
    notes = []
    if isinstance(cfg.get("text_config"), dict):  # a multimodal model: its language model
        cfg = {**cfg["text_config"], "quantization_config": cfg.get("quantization_config")}
        notes.append("the language model of a multimodal config (text_config); vision layers not priced")
    _refuse_unsupported(cfg, path)
    count = lambda *keys, default=None: _count(cfg, path, keys, default)  # noqa: E731
    d = count("hidden_size", "n_embd", "d_model")
    heads = count("num_attention_heads", "n_head", "num_heads")
    layers = count("num_hidden_layers", "n_layer", "num_decoder_layers", "num_layers")
    vocab = count("vocab_size")
    missing = [name for name, value in (("hidden_size", d), ("num_attention_heads", heads),
                                        ("num_hidden_layers", layers), ("vocab_size", vocab)) if value is None]
    if missing:
        raise CostModelError(f"{path}: cannot read {', '.join(missing)} (nor its other usual names); "
                             f"supported: {SUPPORTED}")
    new_falcon = cfg.get("new_decoder_architecture", False)
    if cfg.get("multi_query") and not new_falcon:
        kv = 1
    else:
        kv = count("num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads)
    enc_dec = bool(cfg.get("is_encoder_decoder", False))
    gated = _gated(cfg)
    gpt2_style = "n_embd" in cfg  # GPT-2's key names: Conv1D layers with biases, learned positions
    rotary = not cfg.get("alibi", False) and any(cfg.get(k) is not None for k in (
        "rope_theta", "rope_parameters", "rotary_dim", "rotary_pct", "rotary_emb_base", "rope_scaling",
        "partial_rotary_factor", "qk_rope_head_dim"))
    bias = next((bool(cfg[k]) for k in ("bias", "use_bias", "enable_bias", "attention_bias") if k in cfg), gpt2_style)
    parallel = bool(cfg.get("parallel_attn", False) or cfg.get("use_parallel_residual", False))
    norms = None
    if parallel and cfg.get("use_parallel_residual"):
        norms = 2  # GPT-NeoX: both norms read the block's input
    elif parallel and new_falcon:
        norms = count("num_ln_in_parallel_attn", default=2)
    elif "pre_feedforward_layernorm" in cfg or cfg.get("query_pre_attn_scalar") is not None:
        norms = 4  # Gemma 2 and later: a norm before and after attention and the feed-forward block
    mla = None
    if cfg.get("kv_lora_rank") is not None:  # a rank of 0 is an error (count), never "no latent"
        mla = {"kv_rank": count("kv_lora_rank"), "rope_dim": count("qk_rope_head_dim"),
               "nope_dim": count("qk_nope_head_dim"), "value_dim": count("v_head_dim"),
               "q_rank": count("q_lora_rank")}
        if None in (mla["rope_dim"], mla["nope_dim"], mla["value_dim"]):
            raise CostModelError(f"{path}: kv_lora_rank without qk_rope_head_dim, qk_nope_head_dim and v_head_dim")
    window, local = _windows(cfg, layers, path)
    head_dim = count("head_dim", "d_kv", default=d // heads if d % heads == 0 else None)
    if mla:
        head_dim = mla["nope_dim"] + mla["rope_dim"]
        kv = heads
    name = _first(cfg, "_name_or_path", default="")
    data = {
        "id": str(name or p.parent.name or p.stem).replace("/", "_").replace("-", "_").lower() or "hf_config",
        "name": f"{name or p.parent.name or p.name} (from {p.name})",
        "architecture": "encoder-decoder" if enc_dec else "decoder",
        "d_model": d, "layers": layers, "heads": heads, "kv_heads": kv,
        "encoder_layers": count("num_layers", "encoder_layers", default=layers) if enc_dec else 0,
        "head_dim": head_dim,
        "d_ff": count("intermediate_size", "ffn_hidden_size", "n_inner", "d_ff", "ffn_dim", default=4 * d),
        "ffn_gated": gated, "vocab": vocab,
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", not (enc_dec and gated))),
        "norm": "rmsnorm" if "rms_norm_eps" in cfg or enc_dec else
                "layernorm" if any(k in cfg for k in ("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"))
                else "rmsnorm",
        "bias": bias,
        "learned_positions": count("n_positions", default=0) if not rotary and not cfg.get("alibi") else 0,
        "parallel_block": parallel, "layer_norms": norms,
        # rotary embeddings: a rotary base or fraction in the config (ALiBi models have neither)
        "rope": rotary,
        "mla": mla, "moe": _moe(cfg, path, layers, count),
        "sliding_window": window, "local_layers": local,
        "quantization": _quantization(cfg.get("quantization_config"), path),
        "source": f"Hugging Face config {p}",
        "notes": "; ".join(notes),
    }
    if data["head_dim"] is None:
        raise CostModelError(f"{path}: cannot read head_dim, and hidden_size {d} is not divisible by heads {heads}")
    return _validated(data, str(p))

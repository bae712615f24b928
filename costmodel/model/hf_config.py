"""Hugging Face ``config.json`` files read into the fields of a model preset: the usual key names of each
family, what they mean (gating, norms, rotary, biases, MoE and windowed layers, latent attention,
quantisation), and the families refused by key and by name. Validation is the preset schema's
(:func:`costmodel.model.presets.load_hf_config`).
"""

from __future__ import annotations

from pathlib import Path, PurePath

from costmodel.core.checks import excerpt
from costmodel.core.errors import CostModelError
from costmodel.core.files import load_json, read_text
from costmodel.core.vocab import MAX_DIM


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
    "state_size": "state-space (Mamba) layers",
    "ssm_state_size": "state-space (Mamba) layers",
    "mamba_d_state": "state-space (Mamba) layers",
    "time_step_rank": "state-space (Mamba) layers",
    "ssm_cfg": "state-space layers",
    "layers_block_type": "hybrid attention/state-space layers",
    "attn_layer_period": "hybrid attention/state-space layers",
    "hybrid_override_pattern": "hybrid attention/state-space layers",
    "full_attention_interval": "hybrid linear/full attention layers",
    "linear_num_key_heads": "linear attention layers",
    "attention_hidden_size": "recurrent (RWKV) layers",
    "type_vocab_size": "an encoder-only (BERT-style) model",
    "cross_attention_layers": "cross-attention to images",
}
#: Model types and architecture names (lower case, a substring) the model cannot price, whatever keys a config
#: gives: state-space, recurrent and hybrid families, and encoder-only models.
UNSUPPORTED_TYPES = {
    "mamba": "state-space (Mamba) layers",
    "jamba": "hybrid attention/state-space layers",
    "zamba": "hybrid attention/state-space layers",
    "bamba": "hybrid attention/state-space layers",
    "nemotron_h": "hybrid attention/state-space layers",
    "nemotronh": "hybrid attention/state-space layers",
    "granitemoehybrid": "hybrid attention/state-space layers",
    "plamo2": "hybrid attention/state-space layers",
    "falcon_h1": "hybrid attention/state-space layers",
    "falconh1": "hybrid attention/state-space layers",
    "rwkv": "recurrent (RWKV) layers",
    "recurrent_gemma": "recurrent layers",
    "recurrentgemma": "recurrent layers",
    "xlstm": "recurrent (xLSTM) layers",
    "retnet": "retention layers",
    "hyena": "long-convolution layers",
    "lfm2": "hybrid convolution/attention layers",
    "minimax_m1": "hybrid linear/full attention layers",
    "qwen3_next": "hybrid linear/full attention layers",
    "qwen3next": "hybrid linear/full attention layers",
    "bert": "an encoder-only (BERT-style) model",
    "roberta": "an encoder-only (BERT-style) model",
    "deberta": "an encoder-only (BERT-style) model",
    "electra": "an encoder-only (BERT-style) model",
}
#: The activations of gated (GLU) feed-forward blocks: SiLU is SwiGLU in every decoder that uses it.
GATED_ACTIVATIONS = ("silu", "swish", "swiglu")
#: The model types (config.json's model_type, as transformers names them) whose configs the reader reads: decoders
#: of Llama's, GPT-2's, GPT-NeoX's, OPT's, BLOOM's and Falcon's key names, their mixture-of-experts and
#: multi-head latent attention kin, and T5's encoder-decoders. Another type is refused rather than priced as
#: a dense decoder it may not be; a config without a model_type is read by its keys.
KNOWN_TYPES = tuple(
    """
    llama mistral mixtral qwen2 qwen2_moe qwen3 qwen3_moe gemma gemma2 gemma3 gemma3_text phi phi3
    phimoe olmo olmo2 olmoe granite granitemoe internlm2 cohere cohere2 stablelm starcoder2 smollm3
    deepseek_v2 deepseek_v3 kimi_k2 glm4_moe gpt_oss minimax_m2 gpt2 gpt_bigcode gpt_neox gptj opt bloom
    falcon t5 mt5 umt5
    """.split()
)

SUPPORTED = (
    "decoder-only transformers with dense or mixture-of-experts feed-forward blocks, grouped-query or "
    "multi-head latent attention, full or sliding-window layers; T5-style encoder-decoders"
)


def _activation(cfg: dict) -> str:
    return str(
        _first(
            cfg, "hidden_act", "hidden_activation", "activation_function", "feed_forward_proj", "activation", default=""
        )
    ).lower()


def _gated(cfg: dict) -> bool:
    """A gated feed-forward block: a SiLU activation (SwiGLU), a ``gated-*`` projection (T5 v1.1), or
    GeGLU, which Gemma's configs name by their ``hidden_activation`` key and architecture."""
    act = _activation(cfg)
    names = [str(a).lower() for a in cfg.get("architectures") or ()] + [str(cfg.get("model_type", "")).lower()]
    return (
        act.startswith("gated")
        or any(a in act for a in GATED_ACTIVATIONS)
        or "hidden_activation" in cfg
        or any(n.startswith("gemma") for n in names)
    )


#: The config keys read as true or false: each must be a JSON boolean (a string "false" is not false, and 0 or 1
#: is not a flag), or absent.
FLAG_KEYS = (
    "tie_word_embeddings",
    "is_encoder_decoder",
    "multi_query",
    "new_decoder_architecture",
    "alibi",
    "parallel_attn",
    "use_parallel_residual",
    "bias",
    "use_bias",
    "enable_bias",
    "attention_bias",
)


def _check_flags(cfg: dict, path: str) -> None:
    for key in FLAG_KEYS:
        value = cfg.get(key)
        if value is not None and not isinstance(value, bool):
            raise CostModelError(f"{path}: field {key} must be true or false, got {excerpt(value)}")


def _refuse_unsupported(cfg: dict, path: str) -> None:
    found = next((key for key in UNSUPPORTED_KEYS if cfg.get(key) not in (None, False)), None)
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise CostModelError(f"{path}: architectures must be a list of names, got {archs!r}"[:200])
    what = UNSUPPORTED_KEYS[found] if found else None
    if (
        what is None
        and archs
        and not any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in archs)
    ):
        what = f"architecture {archs[0]} (not a generating model)"
    types = {str(t) for t in cfg.get("layer_types") or ()} - {"full_attention", "sliding_attention"}
    if what is None and types:
        what = f"layer types {', '.join(sorted(types))}"
    names = [str(cfg.get("model_type") or "").lower(), *(a.lower() for a in archs)]
    typed = next((t for t in UNSUPPORTED_TYPES for n in names if t in n.replace("-", "_")), None)
    if what is None and typed is not None:
        where = next(n for n in names if typed in n.replace("-", "_"))
        raise CostModelError(
            f"{path}: cannot model {UNSUPPORTED_TYPES[typed]} (model type or architecture {where!r}); "
            f"supported: {SUPPORTED}"
        )
    if what is not None:
        where = f" (key {found})" if found else ""
        raise CostModelError(f"{path}: cannot model {what}{where}; supported: {SUPPORTED}")
    kind = cfg.get("model_type")
    if kind is not None and str(kind).lower() not in KNOWN_TYPES:
        raise CostModelError(
            f"{path}: model type {excerpt(kind)} is not one the reader knows ({', '.join(KNOWN_TYPES)}); where it "
            "is a decoder of Llama's keys, set model_type to its nearest family (llama) to price it as one"
        )


def _quantization(q, path: str) -> dict | None:
    """The weight storage of a ``quantization_config``: int4/int8 with group scales, fp8 (per tensor, or
    block-scaled where it names a ``weight_block_size``), NVIDIA ModelOpt's NVFP4 (4-bit floats, an FP8 scale
    per 16 weights), or MXFP4 on the routed experts only (gpt-oss's checkpoints)."""
    if not q:
        return None
    if not isinstance(q, dict):
        raise CostModelError(f"{path}: quantization_config must be an object")
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8" or str(q.get("fmt", "")).lower().startswith("e4m3"):
        if q.get("weight_block_size"):  # a scale per block (DeepSeek-V3, Qwen3 FP8): the block-scaled kernels
            block = " x ".join(str(b) for b in q["weight_block_size"])
            return {"weight_dtype": "fp8_block", "group_size": 0, "method": f"fp8, one scale per {block} block"}
        return {"weight_dtype": "fp8", "group_size": 0, "method": method or "fp8"}
    if method == "modelopt" and str(q.get("quant_algo", "")).upper() == "NVFP4":
        group = int(q.get("group_size", 16) or 16)
        return {
            "weight_dtype": "nvfp4",
            "group_size": group,
            "method": f"modelopt NVFP4 (an FP8 scale per {group}); every projection read as NVFP4, the "
            "checkpoint's excluded modules included",
        }
    if method == "mxfp4":  # transformers' and vLLM's MXFP4 checkpoints (gpt-oss): the routed experts only
        return {
            "weight_dtype": "mxfp4",
            "group_size": 32,
            "scope": "experts",
            "method": "mxfp4 (an 8-bit power-of-two scale per 32) on the routed experts; the other projections "
            "in the activation dtype (modules_to_not_convert)",
        }
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            return {"weight_dtype": "int4", "group_size": 64, "method": "bitsandbytes 4-bit (blocks of 64)"}
        if q.get("load_in_8bit"):
            return {"weight_dtype": "int8", "group_size": 0, "method": "bitsandbytes 8-bit"}
    bits = q.get("bits", q.get("w_bit"))
    if method in ("awq", "gptq", "autoround", "auto-round") and bits in (4, 8):
        group = q.get("group_size", q.get("q_group_size", 128))
        return {"weight_dtype": f"int{bits}", "group_size": max(int(group), 0), "method": method}
    raise CostModelError(
        f"{path}: cannot read quantization_config with quant_method {method or '(none)'!r} "
        f"and bits {bits!r}; supported: awq and gptq with 4 or 8 bits, fp8, bitsandbytes, "
        "modelopt NVFP4, mxfp4"
    )


def _moe(cfg: dict, path: str, layers: int, count) -> dict | None:
    experts = count("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    if experts is None or experts <= 1:
        return None
    top_k = count("num_experts_per_tok", "moe_top_k", "num_selected_experts")
    width = count("moe_intermediate_size", "expert_intermediate_size", "intermediate_size", "ffn_hidden_size")
    if top_k is None or width is None:
        raise CostModelError(
            f"{path}: {experts} experts but no num_experts_per_tok or expert width "
            "(moe_intermediate_size or intermediate_size)"
        )
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
    return {
        "experts": experts,
        "experts_per_token": top_k,
        "expert_d_ff": width,
        "shared_d_ff": shared,
        "shared_gate": bool(shared) and "shared_expert_intermediate_size" in cfg,
        "router_bias": str(cfg.get("topk_method", "")).lower() == "noaux_tc",
        "layers": moe_layers,
    }


def _windows(cfg: dict, layers: int, path: str) -> tuple[int | None, int]:
    """(window, local layers): ``layer_types`` when given; Gemma 2's hybrid cache (even layers local);
    every layer when a window is set and not switched off."""
    window = cfg.get("sliding_window")
    if window is None or cfg.get("use_sliding_window") is False:
        return None, 0
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_DIM:
        raise CostModelError(
            f"{path}: field sliding_window must be an integer from 1 to {MAX_DIM} (null for no window), got {window!r}"[
                :200
            ]
        )
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


def read_hf_config(path: str) -> tuple[dict, str]:
    """The fields of a :class:`costmodel.model.presets.ModelPreset` read from a Hugging Face ``config.json`` (or a
    folder holding one), and the file's path: what the config's keys say, whatever its model type; an
    architecture it cannot price is refused."""
    p = Path(path)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise CostModelError(f"model folder {path} has no config.json")
        p = p / "config.json"
    if not p.is_file():
        raise CostModelError(f"model config {path} does not exist")
    return hf_config_fields(read_text(str(p), "model config"), p)


def hf_config_fields(text: str, p: PurePath) -> tuple[dict, str]:
    """:func:`read_hf_config` of a ``config.json``'s ``text``, named ``p`` (its id, name and errors take that name;
    nothing is read from it: a pasted config has a name and no file)."""
    path = str(p)
    cfg = load_json(text, path)
    if not isinstance(cfg, dict):
        raise CostModelError(f"{path}: expected a JSON object of config fields")
    notes = []
    if isinstance(cfg.get("text_config"), dict):  # a multimodal model: its language model
        cfg = {**cfg["text_config"], "quantization_config": cfg.get("quantization_config")}
        notes.append("the language model of a multimodal config (text_config); vision layers not priced")
    _check_flags(cfg, path)
    _refuse_unsupported(cfg, path)
    count = lambda *keys, default=None: _count(cfg, path, keys, default)  # noqa: E731
    d, heads, layers, vocab = _required(path, count)
    new_falcon = cfg.get("new_decoder_architecture", False)
    if cfg.get("multi_query") and not new_falcon:
        kv = 1
    else:
        kv = count("num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads)
    enc_dec = bool(cfg.get("is_encoder_decoder", False))
    gated = _gated(cfg)
    rotary, bias, parallel, norms = _block(cfg, count)
    mla = _mla(cfg, path, count)
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
        "d_model": d,
        "layers": layers,
        "heads": heads,
        "kv_heads": kv,
        "encoder_layers": count("num_layers", "encoder_layers", default=layers) if enc_dec else 0,
        "head_dim": head_dim,
        "d_ff": count("intermediate_size", "ffn_hidden_size", "n_inner", "d_ff", "ffn_dim", default=4 * d),
        "ffn_gated": gated,
        "vocab": vocab,
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", not (enc_dec and gated))),
        "norm": "rmsnorm"
        if "rms_norm_eps" in cfg or enc_dec
        else "layernorm"
        if any(k in cfg for k in ("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"))
        else "rmsnorm",
        "bias": bias,
        "learned_positions": count("n_positions", default=0) if not rotary and not cfg.get("alibi") else 0,
        "parallel_block": parallel,
        "layer_norms": norms,
        # rotary embeddings: a rotary base or fraction in the config (ALiBi models have neither)
        "rope": rotary,
        "mla": mla,
        "moe": _moe(cfg, path, layers, count),
        "sliding_window": window,
        "local_layers": local,
        "quantization": _quantization(cfg.get("quantization_config"), path),
        "source": f"Hugging Face config {p}",
        "notes": "; ".join(notes),
    }
    if data["head_dim"] is None:
        raise CostModelError(f"{path}: cannot read head_dim, and hidden_size {d} is not divisible by heads {heads}")
    return data, str(p)


def _block(cfg: dict, count) -> tuple[bool, bool, bool, int | None]:
    """(rotary embeddings, biases, parallel attention and feed-forward, norms per layer) of a layer."""
    new_falcon = cfg.get("new_decoder_architecture", False)
    gpt2_style = "n_embd" in cfg  # GPT-2's key names: Conv1D layers with biases, learned positions
    rotary = not cfg.get("alibi", False) and any(
        cfg.get(k) is not None
        for k in (
            "rope_theta",
            "rope_parameters",
            "rotary_dim",
            "rotary_pct",
            "rotary_emb_base",
            "rope_scaling",
            "partial_rotary_factor",
            "qk_rope_head_dim",
        )
    )
    bias = next((bool(cfg[k]) for k in ("bias", "use_bias", "enable_bias", "attention_bias") if k in cfg), gpt2_style)
    parallel = bool(cfg.get("parallel_attn", False) or cfg.get("use_parallel_residual", False))
    norms = None
    if parallel and cfg.get("use_parallel_residual"):
        norms = 2  # GPT-NeoX: both norms read the block's input
    elif parallel and new_falcon:
        norms = count("num_ln_in_parallel_attn", default=2)
    elif "pre_feedforward_layernorm" in cfg or cfg.get("query_pre_attn_scalar") is not None:
        norms = 4  # Gemma 2 and later: a norm before and after attention and the feed-forward block
    return rotary, bias, parallel, norms


def _mla(cfg: dict, path: str, count) -> dict | None:
    """Multi-head latent attention's ranks and widths, None where the config has no latent."""
    if cfg.get("kv_lora_rank") is None:  # a rank of 0 is an error (count), never "no latent"
        return None
    mla = {
        "kv_rank": count("kv_lora_rank"),
        "rope_dim": count("qk_rope_head_dim"),
        "nope_dim": count("qk_nope_head_dim"),
        "value_dim": count("v_head_dim"),
        "q_rank": count("q_lora_rank"),
    }
    if None in (mla["rope_dim"], mla["nope_dim"], mla["value_dim"]):
        raise CostModelError(f"{path}: kv_lora_rank without qk_rope_head_dim, qk_nope_head_dim and v_head_dim")
    return mla


def _required(path: str, count) -> tuple[int, int, int, int]:
    """The widths every config must give (under one of their usual names): hidden size, heads, layers, vocabulary."""
    d = count("hidden_size", "n_embd", "d_model")
    heads = count("num_attention_heads", "n_head", "num_heads")
    layers = count("num_hidden_layers", "n_layer", "num_decoder_layers", "num_layers")
    vocab = count("vocab_size")
    missing = [
        name
        for name, value in (
            ("hidden_size", d),
            ("num_attention_heads", heads),
            ("num_hidden_layers", layers),
            ("vocab_size", vocab),
        )
        if value is None
    ]
    if missing:
        raise CostModelError(
            f"{path}: cannot read {', '.join(missing)} (nor its other usual names); supported: {SUPPORTED}"
        )
    return d, heads, layers, vocab

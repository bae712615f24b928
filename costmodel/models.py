"""Whole models: presets, parameter counts, and the cost of a decode step and a prefill.

A model's layer is the attention program of :mod:`costmodel.program` (with the model's key/value heads)
plus the ops around it, each costed from its shapes like every other op: norms, residual adds, the
feed-forward block (gated or not), and once per step the embedding lookup, final norm and output
projection. Tensor parallelism over ``t`` devices shards query heads, key/value heads (replicating them
when ``g < t``, as Pope et al. 2022 and Ainslie et al. 2023 describe), the feed-forward width and the
vocabulary, and adds two all-reduces per layer priced from the profile's interconnect.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

import sympy
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from costmodel import symbols as S
from costmodel.errors import CostModelError
from costmodel.hardware import HardwareProfile
from costmodel.program import Op, Tensor, build_program, gemm_dims
from costmodel.roofline import ARGS, compile_program, op_time

PACKAGE = "costmodel.model_presets"
#: FLOPs per element of the ops around attention (conventions, like ELEMENTWISE_FLOPS).
NORM_FLOPS = {"rmsnorm": 4, "layernorm": 5}  # rms: square, sum, scale, weight; layer norm adds the mean
ACT_FLOPS = {True: 5, False: 4}  # gated: silu(gate) * up; plain: gelu


class ModelPreset(BaseModel):
    """The shape of a model, from a preset file or a Hugging Face config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    aliases: tuple[str, ...] = ()
    name: str
    architecture: Literal["decoder", "encoder-decoder"]
    d_model: int = Field(ge=1)
    layers: int = Field(ge=1, description="decoder layers")
    encoder_layers: int = Field(default=0, ge=0)
    heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1, description="key/value heads of decoder self-attention")
    encoder_kv_heads: int | None = None
    cross_kv_heads: int | None = None
    head_dim: int = Field(ge=1)
    d_ff: int = Field(ge=1)
    ffn_gated: bool
    vocab: int = Field(ge=1)
    tied_embeddings: bool
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    bias: bool = False
    learned_positions: int = Field(default=0, ge=0)
    parallel_block: bool = False
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

    # --- parameters ------------------------------------------------------------------------------
    def _attention_params(self, g: int) -> int:
        d, h, k = self.d_model, self.heads, self.head_dim
        weights = d * h * k * 2 + d * g * k * 2  # P_q and P_o with h heads; P_k and P_v with g
        return weights + (h * k + 2 * g * k + d if self.bias else 0)

    def _ffn_params(self) -> int:
        d, f = self.d_model, self.d_ff
        return (3 if self.ffn_gated else 2) * d * f + ((2 * f if self.ffn_gated else f) + d if self.bias else 0)

    @property
    def _norm_params(self) -> int:
        return self.d_model * (2 if self.norm == "layernorm" else 1)

    def param_count(self) -> int:
        """Weights of every layer, embeddings, output projection and norms."""
        norms_per_layer = 1 if self.parallel_block else 2
        decoder = self.layers * (self._attention_params(self.kv_heads) + self._ffn_params()
                                 + norms_per_layer * self._norm_params)
        encoder = 0
        if self.architecture == "encoder-decoder":
            decoder += self.layers * (self._attention_params(self.cross_kv) + self._norm_params)
            encoder = self.encoder_layers * (self._attention_params(self.enc_kv) + self._ffn_params()
                                             + 2 * self._norm_params) + self._norm_params
        embeddings = self.vocab * self.d_model * (1 if self.tied_embeddings else 2)
        return decoder + encoder + embeddings + self.learned_positions * self.d_model + self._norm_params

    def kv_cache_bytes_per_token(self, dtype: str) -> int:
        """Decoder self-attention K and V of one position of one sequence, all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * S.dtype_bytes(dtype)

    def with_kv_heads(self, g: int) -> ModelPreset:
        """The same model with ``g`` key/value heads in every decoder attention (a what-if)."""
        return self.model_copy(update={"kv_heads": g, "cross_kv_heads": g if self.cross_kv_heads else None})


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
    import yaml

    if name.endswith(".json") or Path(name).is_file():
        return load_hf_config(name)
    f = _files().get(name.lower().replace("_", "-"))
    if f is None:
        close = difflib.get_close_matches(name.lower(), list(_files()), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise CostModelError(f"unknown model {name!r}{hint} (presets: {', '.join(preset_ids())}; "
                             "a Hugging Face config.json path also works)")
    return _validated(yaml.safe_load(f.read_text(encoding="utf-8")), f.name)


def _first(cfg: dict, *keys, default=None):
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def load_hf_config(path: str) -> ModelPreset:
    """Read the shape of a model from a Hugging Face ``config.json``."""
    p = Path(path)
    if not p.is_file():
        raise CostModelError(f"model config {path} does not exist")
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CostModelError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(cfg, dict):
        raise CostModelError(f"{path}: expected a JSON object of config fields")
    d = _first(cfg, "hidden_size", "n_embd", "d_model")
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads")
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_decoder_layers", "num_layers")
    vocab = _first(cfg, "vocab_size")
    missing = [name for name, value in (("hidden_size", d), ("num_attention_heads", heads),
                                        ("num_hidden_layers", layers), ("vocab_size", vocab)) if value is None]
    if missing:
        raise CostModelError(f"{path}: cannot read {', '.join(missing)} (nor its other usual names)")
    model_type = str(cfg.get("model_type", "")).lower()
    new_falcon = cfg.get("new_decoder_architecture", False)
    if cfg.get("multi_query") and not new_falcon:
        kv = 1
    else:
        kv = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads)
    enc_dec = bool(cfg.get("is_encoder_decoder", False))
    act = str(_first(cfg, "hidden_act", "activation_function", "feed_forward_proj", "activation", default=""))
    gated = act.startswith("gated") or model_type in {"llama", "mistral", "mixtral", "qwen2", "gemma", "gemma2"}
    data = {
        "id": _first(cfg, "_name_or_path", default=p.stem).replace("/", "_").replace("-", "_").lower() or "hf_config",
        "name": f"{_first(cfg, '_name_or_path', default=p.name)} (from {p.name})",
        "architecture": "encoder-decoder" if enc_dec else "decoder",
        "d_model": d, "layers": layers, "heads": heads, "kv_heads": kv,
        "encoder_layers": _first(cfg, "num_layers", "encoder_layers", default=layers) if enc_dec else 0,
        "head_dim": _first(cfg, "head_dim", "d_kv", default=d // heads if d % heads == 0 else None),
        "d_ff": _first(cfg, "intermediate_size", "ffn_hidden_size", "n_inner", "d_ff", default=4 * d),
        "ffn_gated": gated, "vocab": vocab,
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", not (enc_dec and gated))),
        "norm": "layernorm" if model_type in {"falcon", "gpt_bigcode", "gpt2", "opt"} else "rmsnorm",
        "bias": bool(cfg.get("bias", model_type in {"gpt_bigcode", "gpt2"})),
        "learned_positions": cfg.get("n_positions", 0) if model_type in {"gpt_bigcode", "gpt2"} else 0,
        "parallel_block": bool(cfg.get("parallel_attn", False)),
        "source": f"Hugging Face config {p}",
    }
    if data["head_dim"] is None:
        raise CostModelError(f"{path}: cannot read head_dim, and hidden_size {d} is not divisible by heads {heads}")
    return _validated(data, str(p))


# --- a whole decode step and prefill -----------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One op of a model step: ``count`` kernels of it (per layer ops repeat ``layers`` times)."""

    section: str
    name: str
    einsum: str | None
    op_class: str
    flops: float
    bytes: float
    count: int
    gemm: tuple[int, int, int, int] | None = None  # (batch, M, K, N) of an einsum


def _op(name: str, kind: str, inputs: list[tuple[str, dict]], output: tuple[str, dict], fpe: int = 0) -> Op:
    """An op from named index->size maps: its einsum equation and costs follow from the shapes."""
    to = lambda n, sizes: Tensor(n, "".join(sizes), tuple(sympy.Integer(v) for v in sizes.values()))  # noqa: E731
    return Op(name, kind, tuple(to(n, s) for n, s in inputs), to(*output), fpe)


def device_slice(m: ModelPreset, t: int) -> ModelPreset:
    """What one of ``t`` tensor-parallel devices holds: h/t query heads, max(g/t, 1) key/value heads
    (replicated when g < t), d_ff/t and vocab/t."""
    if t == 1:
        return m
    if m.heads % t:
        raise CostModelError(f"--tp {t} must divide the {m.heads} query heads of {m.id}")
    for name, g in (("kv heads", m.kv_heads), ("cross kv heads", m.cross_kv), ("encoder kv heads", m.enc_kv)):
        if g % t and t % g:
            raise CostModelError(f"--tp {t} and the {g} {name} of {m.id}: one must divide the other")
    if m.d_ff % t:
        raise CostModelError(f"--tp {t} must divide d_ff {m.d_ff} of {m.id}")
    share = lambda g: max(g // t, 1)  # noqa: E731
    return m.model_copy(update={
        "heads": m.heads // t, "kv_heads": share(m.kv_heads), "d_ff": m.d_ff // t, "vocab": math.ceil(m.vocab / t),
        "encoder_kv_heads": share(m.enc_kv), "cross_kv_heads": share(m.cross_kv),
    })


def _attention_rows(section: str, m: ModelPreset, g: int, mode: str, b: int, n: int, ctx: int, execution: str,
                    count: int, width: int, skip=(), cache_append: str = "inplace") -> list[Row]:
    compiled = compile_program("gqa", mode, execution, cache_append)
    dims = {"b": b, "n": n, "m": ctx, "d": m.d_model, "h": m.heads, "g": g, "k": m.head_dim, "v": m.head_dim}
    flops, elements, _, _ = compiled.evaluate([dims[s.name] for s in ARGS])
    subs = {S.SYMBOLS[k]: v for k, v in dims.items()}
    program = build_program("gqa", mode, cache_append=cache_append, execution=execution)
    gemms = [tuple(int(x.subs(subs)) for x in gemm_dims(op)) if op.kind == "einsum" else None for op in program.ops]
    return [Row(section, name, eq, cls, float(f), float(e) * width, count, gemm)
            for name, cls, eq, f, e, gemm in zip(compiled.names, compiled.kinds, compiled.einsums, flops, elements, gemms)
            if name not in skip]


def _row(section: str, op: Op, count: int, width: int) -> Row:
    cls = "projection" if op.kind == "einsum" else op.kind
    gemm = tuple(int(x) for x in gemm_dims(op)) if op.kind == "einsum" else None
    return Row(section, op.name, op.einsum, cls, float(op.flops), float(op.memory_elements) * width, count, gemm)


def _layer_rows(section: str, m: ModelPreset, tokens: int, count: int, width: int, norms: int) -> list[Row]:
    """Norms, residual adds and the feed-forward block of ``count`` layers over ``tokens`` tokens."""
    d, f = m.d_model, m.d_ff
    x = {"t": tokens, "d": d}
    rows = []
    ops = [_op(f"norm_{i}", "elementwise", [("x", x), ("w", {"d": d})], ("y", x), NORM_FLOPS[m.norm])
           for i in range(norms)]
    ops += [_op("residuals", "elementwise", [("x", x), ("a", x)], ("y", x), 1)]
    hidden = {"t": tokens, "f": f}
    ops.append(_op("ffn_up", "einsum", [("x", x), ("W_up", {"d": d, "f": f})], ("u", hidden)))
    if m.ffn_gated:
        ops.append(_op("ffn_gate", "einsum", [("x", x), ("W_gate", {"d": d, "f": f})], ("u", hidden)))
        ops.append(_op("ffn_act", "elementwise", [("u", hidden), ("v", hidden)], ("a", hidden), ACT_FLOPS[True]))
    else:
        ops.append(_op("ffn_act", "elementwise", [("u", hidden)], ("a", hidden), ACT_FLOPS[False]))
    ops.append(_op("ffn_down", "einsum", [("a", hidden), ("W_down", {"f": f, "d": d})], ("y", x)))
    for op in ops:
        n = 2 * count if op.name == "residuals" else count  # after attention and after the FFN
        rows.append(_row(section, op, n, width))
    return rows


def _head_rows(m: ModelPreset, rows_out: int, tokens_in: int, width: int) -> list[Row]:
    """Embedding lookup of the new tokens, final norm and output projection of the last positions."""
    x_in, x_out = {"t": tokens_in, "d": m.d_model}, {"t": rows_out, "d": m.d_model}
    ops = [
        _op("embed", "copy", [("E[tokens]", x_in)], ("x", x_in)),
        _op("final_norm", "elementwise", [("x", x_out), ("w", {"d": m.d_model})], ("y", x_out), NORM_FLOPS[m.norm]),
        _op("lm_head", "einsum", [("x", x_out), ("W_out", {"d": m.d_model, "w": m.vocab})],
            ("logits", {"t": rows_out, "w": m.vocab})),
    ]
    return [_row("head", op, 1, width) for op in ops]


def step_rows(m: ModelPreset, phase: str, b: int, ctx: int, source: int, width: int, execution: str,
              cache_append: str = "inplace") -> list[Row]:
    """Every op of one decode step (``phase="decode"``: one token per sequence after ``ctx`` cached
    positions) or of the prefill of a ``ctx``-token prompt (encoder over ``source`` tokens first)."""
    L = m.layers
    if phase == "decode":
        rows = _attention_rows("self-attention", m, m.kv_heads, "incremental", b, 1, ctx, execution, L, width,
                               cache_append=cache_append)
        tokens = b
    else:
        rows = _attention_rows("self-attention", m, m.kv_heads, "batched", b, ctx, ctx, execution, L, width)
        tokens = b * ctx
    norms = 1 if m.parallel_block else 2
    if m.architecture == "encoder-decoder":
        # cross-attention reads the K and V of the source, projected once at prefill
        n_cross = 1 if phase == "decode" else ctx
        rows += _attention_rows("cross-attention", m, m.cross_kv, "batched", b, n_cross, source, execution, L,
                                width, skip=("k_proj", "v_proj", "mask"))
        norms += 1
    rows += _layer_rows("ffn and norms", m, tokens, L, width, norms)
    if phase == "prefill" and m.architecture == "encoder-decoder":
        enc = m.model_copy(update={"kv_heads": m.enc_kv})
        rows += _attention_rows("encoder", enc, m.enc_kv, "batched", b, source, source, execution,
                                m.encoder_layers, width)
        rows += _layer_rows("encoder", enc, b * source, m.encoder_layers, width, 2)
        kv = {"t": b * source, "d": m.d_model}
        for name in ("cross_k_proj", "cross_v_proj"):
            op = _op(name, "einsum", [("M", kv), ("P", {"d": m.d_model, "g": m.cross_kv, "k": m.head_dim})],
                     ("KV", {"t": b * source, "g": m.cross_kv, "k": m.head_dim}))
            rows.append(_row("cross-attention", op, L, width))
    rows += _head_rows(m, b, tokens, width)
    return rows


class OpTime(BaseModel):
    section: str
    name: str
    einsum: str | None
    flops: float
    bytes: float
    count: int
    time_s: float = Field(description="all kernels of this op in the step")
    bound: Literal["compute", "memory"]


class PhaseTime(BaseModel):
    time_s: float
    flops: float
    bytes: float
    all_reduce_s: float
    ops: list[OpTime]


class ModelPrediction(BaseModel):
    """A whole model on one device (or ``tp`` devices): decode step (TPOT), prefill (TTFT), memory."""

    model_config = ConfigDict(frozen=True)

    hardware: dict
    model: dict
    workload: dict
    decode: PhaseTime
    prefill: PhaseTime
    total: dict
    memory: dict
    assumptions: list[str]

    def __str__(self) -> str:
        from costmodel.format import model_table

        return model_table(self)


def _price(rows: list[Row], hw: HardwareProfile, dtype: str, overlap: str) -> list[OpTime]:
    out = []
    for r in rows:
        compute, memory, _, time = op_time(hw, r.op_class, dtype, r.flops, r.bytes, overlap)
        out.append(OpTime(section=r.section, name=r.name, einsum=r.einsum, flops=r.flops * r.count,
                          bytes=r.bytes * r.count, count=r.count, time_s=time * r.count,
                          bound="compute" if compute > memory else "memory"))
    return out


def all_reduce_s(hw: HardwareProfile, t: int, nbytes: float) -> float:
    """Ring all-reduce of ``nbytes`` over ``t`` devices: 2(t-1)/t of the data each way, 2(t-1) steps."""
    if t == 1:
        return 0.0
    if hw.interconnect_bytes_per_s is None or hw.interconnect_latency_s is None:
        raise CostModelError(f"{hw.id} has no interconnect bandwidth and latency: tensor parallelism needs both")
    one_way = hw.interconnect_bytes_per_s.value / 2
    return 2 * (t - 1) / t * nbytes / one_way + 2 * (t - 1) * hw.interconnect_latency_s.value


def predict_model(m: ModelPreset, hw: HardwareProfile, *, batch: int = 1, context: int = 4096,
                  source: int | None = None, dtype: str = "bf16", execution: str = "unfused", tp: int = 1,
                  overlap: str = "max") -> ModelPrediction:
    """Decode step after ``context`` cached positions (TPOT), prefill of a ``context``-token prompt
    (TTFT), KV cache and weights per device, and the largest batch and context that fit."""
    if batch < 1 or context < 1 or tp < 1:
        raise CostModelError(f"batch, context and tp must be >= 1, got {batch}, {context}, {tp}")
    hw.peak(dtype)
    width = S.dtype_bytes(dtype)
    source = source or context
    dev = device_slice(m, tp)
    phases = {}
    for phase, tokens in (("decode", batch), ("prefill", batch * context)):
        ops = _price(step_rows(dev, phase, batch, context, source, width, execution), hw, dtype, overlap)
        reduce_s = 2 * m.layers * all_reduce_s(hw, tp, tokens * m.d_model * width)
        if phase == "prefill" and m.architecture == "encoder-decoder":
            reduce_s += 2 * m.encoder_layers * all_reduce_s(hw, tp, batch * source * m.d_model * width)
        phases[phase] = PhaseTime(time_s=sum(o.time_s for o in ops) + reduce_s, flops=sum(o.flops for o in ops),
                                  bytes=sum(o.bytes for o in ops), all_reduce_s=reduce_s, ops=ops)
    weights = dev.param_count() * width
    per_position = 2 * dev.layers * dev.kv_heads * dev.head_dim * width  # one sequence, one position, one device
    cross = 2 * dev.layers * dev.cross_kv * dev.head_dim * width * source if m.architecture == "encoder-decoder" else 0
    kv = batch * (per_position * (context + 1) + cross)
    free = hw.capacity - weights
    tpot = phases["decode"].time_s
    return ModelPrediction(
        hardware={"id": hw.id, "name": hw.name, "dtype": dtype, "devices": tp,
                  "memory_capacity_bytes": hw.capacity, "measured": hw.measured is not None},
        model={"id": m.id, "name": m.name, "params": m.param_count(), "published_params": m.published_params,
               "layers": m.layers, "heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim,
               "kv_heads_per_device": dev.kv_heads},
        workload={"batch": batch, "context": context, "source": source if m.architecture == "encoder-decoder" else None,
                  "dtype": dtype, "execution": execution, "tp": tp, "overlap": overlap},
        decode=phases["decode"], prefill=phases["prefill"],
        total={"tpot_s": tpot, "ttft_s": phases["prefill"].time_s, "tokens_per_s": batch / tpot},
        memory={
            "kv_cache_bytes_per_token": m.kv_cache_bytes_per_token(dtype),
            "kv_cache_bytes": kv, "kv_cache_bytes_per_device": kv, "weight_bytes_per_device": weights,
            "capacity_bytes": hw.capacity, "fits": kv + weights <= hw.capacity,
            "max_batch": max(int(free // (per_position * (context + 1) + cross)), 0) if free > 0 else 0,
            "max_context": max(int((free / batch - cross) // per_position) - 1, 0) if free > 0 else 0,
        },
        assumptions=[
            "decode step: one token per sequence after `context` cached positions; prefill: a `context`-token prompt",
            "every op its own kernel, timed by the roofline of its op class; "
            + ("fused attention" if execution == "fused" else "unfused attention"),
            "weights: every parameter in the storage dtype; no activations or framework memory",
            f"tensor parallel over {tp} device(s): query heads, FFN and vocabulary sharded; key/value heads sharded "
            "when t <= g, replicated when g < t; two ring all-reduces per layer" if tp > 1 else "one device",
        ],
    )

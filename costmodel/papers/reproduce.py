"""The papers' results, reproduced from the model with every assumption in the open.

``shazeer2019``: the asymptotic ratios of Shazeer 2019, and Table 2's decoder time per token for the
WMT Transformer on one TPUv2 board, first by a plain roofline and then with named mechanisms of how the
2019 kernels ran, each a switch with a physical parameter (nothing fitted to the paper's numbers).

``gqa2023``: time per sample of a T5-XXL-shaped model against the number of key/value groups on
TPU v4 (Ainslie et al. 2023, Figure 6).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from costmodel.core.vocab import DEFAULTS, dtype_bytes
from costmodel.counts.asymptotic import analyze
from costmodel.counts.exact import derive
from costmodel.hardware.catalog import load_profile
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.ops import StepOp, step_ops
from costmodel.model.presets import ModelPreset, load_model
from costmodel.model.step import predict_model
from costmodel.price.op import Conventions, KernelOp, price
from costmodel.price.origin import TimeModel

# Shazeer 2019, Section 4.3 and Table 2 (TPUv2-microseconds per output token, decoder)
PAPER_US_PER_TOKEN = {"mha": 46.0, "mqa": 3.8}
#: Table 2's local-attention rows: decoder self-attention over the last LOCAL_POSITIONS positions only.
PAPER_LOCAL_US_PER_TOKEN = {"mha": 23.0, "mqa": 3.3}
LOCAL_POSITIONS = 32
BOARD_CHIPS = 4  # one TPUv2 board: 8 cores on 4 chips
BOARD_BATCH = 1024  # sequences decoded together (128 per core)
CORES_PER_CHIP = 2  # a TPUv2 chip's two TensorCores, each with half its FLOP rate and memory bandwidth
#: The ops of a decoder step that move a cache (a self-attention's or the source's keys and values): their bytes are
#: h/g times apart between multi-head and multi-query attention.
CACHE_OPS = ("k_append", "v_append", "logits", "weighted_sum")
TARGET_POSITIONS = 128  # decoder self-attention memory padded to 128 so every step costs the same
SOURCE_POSITIONS = 128
#: The decoder's self-attention cache writes (the ops a cache copy multiplies).
CACHE_APPENDS = ("k_append", "v_append")


@dataclass(frozen=True)
class Mechanisms:
    """How the 2019 decoder ran, beyond a plain roofline. Each is a switch with a physical parameter."""

    f32_storage: bool = True
    """Weights, caches and activations in f32 (4 bytes), as TensorFlow kept them by default."""
    concat_cache: bool = True
    """``tf.concat`` of the self-attention K/V cache: the whole cache is read and written every step."""
    tile_padding: bool = True
    """Each matmul in whole passes of the matrix unit (the ``tiles`` mechanism on a systolic array,
    :func:`costmodel.hardware.mechanisms.systolic_flops`): its K and N padded to the profile's ``matrix_tile``, its M to at
    least the tile's rows: a per-head matrix-vector product (M = 1) costs a whole 128-row pass."""
    f32_passes: int = 1
    """Passes of bf16 products per f32 matmul. 1: XLA on TPU multiplies f32 operands in bfloat16 with f32
    accumulation unless a higher precision is asked for (google/jax issue 1856, 2019: "matrix multiplication on
    TPUs (with float32 dtypes) defaults to bfloat16 multiplication with float32 accumulation"); 3 or 6 are the
    HIGH and HIGHEST precisions."""
    cache_copies: int = 2
    """Whole copies of the self-attention K/V cache per step when the cache is copied (``concat_cache``): 1 for
    ``tf.concat``; 2 for tensor2tensor's TPU decoding (``common_attention.multihead_attention`` with a
    ``decode_loop_step``), which transposes each cache to put positions first, updates it in place and transposes
    it back ("inplace_update only supports the first dimension")."""

    @classmethod
    def none(cls) -> Mechanisms:
        return cls(f32_storage=False, concat_cache=False, tile_padding=False, f32_passes=1, cache_copies=1)


def steps(final: Mechanisms = Mechanisms()) -> list[tuple[str, Mechanisms]]:
    """The plain roofline, then each mechanism switched on in ``final`` added in turn."""
    out = [("plain roofline (bf16, in-place cache, no padding)", Mechanisms.none())]
    current = Mechanisms.none()
    for field, label in (
        ("f32_storage", "+ f32 storage"),
        ("concat_cache", "+ tf.concat cache copy"),
        ("tile_padding", "+ matrix-unit tile padding"),
    ):
        if getattr(final, field):
            current = replace(current, **{field: True})
            out.append((label, current))
        if field == "concat_cache" and final.concat_cache and final.cache_copies > 1:
            current = replace(current, cache_copies=final.cache_copies)
            out.append(
                (
                    "+ cache transposed and back (tensor2tensor on TPU)"
                    if final.cache_copies == 2
                    else f"+ {final.cache_copies} cache copies per step",
                    current,
                )
            )
    if final.f32_storage and final.f32_passes > 1:
        current = replace(current, f32_passes=final.f32_passes)
        out.append((f"+ f32 matmuls as {final.f32_passes} bf16 passes", current))
    return out


def mesh_tf_step_s(
    model: ModelPreset, hw: HardwareProfile, batch: int, positions: int = TARGET_POSITIONS
) -> tuple[float, list]:
    """One decoder step on one chip as mesh-tensorflow's incremental decoding ran Shazeer's experiments: each core
    its own copy of the f32 weights and its ``batch / CORES_PER_CHIP`` sequences (a core: half the chip's FLOP rate
    and bandwidth, so its products and bytes take twice the chip's time; the cores run at once); the self-attention
    caches in bf16, updated by a one-hot multiply-add (``cache * (1 - onehot) + onehot * new``) that reads and writes
    the whole cache each step instead of appending to it; activations and weights in f32, multiplied in bf16 passes
    with f32 accumulation."""
    per_core = batch // CORES_PER_CHIP
    ops32 = step_ops(model, "decode", per_core, positions - 1, SOURCE_POSITIONS, 4, "unfused", "inplace")
    ops16 = {
        (s.section, s.name): s
        for s in step_ops(model, "decode", per_core, positions - 1, SOURCE_POSITIONS, 2, "unfused", "inplace")
    }
    conv = Conventions(TimeModel(None, "graph", frozenset({"fixed", "tiles"})))
    kv_elements = per_core * positions * model.kv_heads * model.head_dim  # one layer's keys (or values), one core
    total, detail = 0.0, []
    for s in ops32:
        op = ops16[(s.section, s.name)].op if s.section == "self-attention" and s.name in CACHE_OPS else s.op
        if s.name in CACHE_APPENDS:  # the one-hot update: the whole bf16 cache read and written, a multiply-add each
            op = KernelOp("elementwise", s.name, "bf16", 2.0 * kv_elements, 2.0 * 2 * kv_elements)
        op = KernelOp(op.kind, op.name, op.dtype, 2 * op.flops, 2 * op.bytes, peak=hw.peak("bf16"))
        time = price(op, s.shape, hw, conv).time * s.count
        total += time
        detail.append({"section": s.section, "op": s.name, "time_s": time})
    return total, detail


def decoder_step_s(
    model: ModelPreset, hw: HardwareProfile, batch: int, mech: Mechanisms, positions: int = TARGET_POSITIONS
) -> tuple[float, list]:
    """One decoder step on one chip (self-attention memory of ``positions``): every op's roofline time under the
    mechanisms, summed."""
    dtype = "fp32" if mech.f32_storage else "bf16"
    ops: list[StepOp] = step_ops(
        model,
        "decode",
        batch,
        positions - 1,
        SOURCE_POSITIONS,
        dtype_bytes(dtype),
        "unfused",
        "concat" if mech.concat_cache else "inplace",
    )
    peak = hw.peak("bf16") / (mech.f32_passes if mech.f32_storage else 1)
    # the datasheet roofline with the launch cost, and the matrix unit's whole passes where tile padding is on
    conv = Conventions(TimeModel(None, "graph", frozenset({"fixed", "tiles"} if mech.tile_padding else {"fixed"})))
    total, detail = 0.0, []
    for s in ops:
        nbytes = s.op.bytes * (mech.cache_copies if mech.concat_cache and s.name in CACHE_APPENDS else 1)
        t = price(KernelOp(s.op.kind, s.name, dtype, s.op.flops, nbytes, peak=peak), s.shape, hw, conv)
        time = t.time * s.count
        total += time
        detail.append({"section": s.section, "op": s.name, "time_s": time, "bound": t.bound})
    return total, detail


def _ratio(variant: str) -> dict:
    """One variant's memory-to-arithmetic ratio of incremental decoding, derived, beside the paper's."""
    a = analyze(derive(variant, "generate"))
    return {
        "variant": variant,
        "derived": str(a.ratio),
        "paper": str(a.claim.ratio),
        "paper_holds": bool(a.claim_holds or a.extra_assumptions),
        "extra_assumption": a.extra_assumptions[0] if a.extra_assumptions else None,
        "derived_with_extra": str(a.ratio_with_extra) if a.ratio_with_extra is not None else None,
    }


def shazeer2019(final: Mechanisms = Mechanisms(), hw: HardwareProfile | None = None) -> dict:
    """The three asymptotic ratios and Table 2's decoder time per token, step by step."""
    hw = hw or load_profile("tpu_v2")
    batch = BOARD_BATCH // BOARD_CHIPS
    ratios = [_ratio(variant) for variant in ("mha", "mqa", "gqa")]
    models = {"mha": load_model("wmt_transformer_mha"), "mqa": load_model("wmt_transformer_mqa")}
    table = []
    for label, mech in steps(final):
        us = {v: decoder_step_s(m, hw, batch, mech)[0] / BOARD_BATCH * 1e6 for v, m in models.items()}
        table.append(
            {
                "model": label,
                "mha_us_per_token": us["mha"],
                "mqa_us_per_token": us["mqa"],
                "ratio": us["mha"] / us["mqa"],
                "mechanisms": mech.__dict__,
            }
        )
    mesh = {v: mesh_tf_step_s(m, hw, batch)[0] / BOARD_BATCH * 1e6 for v, m in models.items()}
    local = {v: decoder_step_s(m, hw, batch, final, LOCAL_POSITIONS)[0] / BOARD_BATCH * 1e6 for v, m in models.items()}
    full = {"mha": table[-1]["mha_us_per_token"], "mqa": table[-1]["mqa_us_per_token"]}
    # what is not the caches' (the self-attention's and the source's): every op but their appends and the two
    # products that read them
    bare = {
        v: sum(d["time_s"] for d in decoder_step_s(m, hw, batch, final)[1] if d["op"] not in CACHE_OPS)
        / BOARD_BATCH
        * 1e6
        for v, m in models.items()
    }
    heads = models["mha"].kv_heads // models["mqa"].kv_heads  # how many times multi-head's cache is multi-query's
    span = TARGET_POSITIONS - LOCAL_POSITIONS
    return {
        "asymptotic": ratios,
        "table2": table,
        # what one more self-attention position costs per token, from the paper's full and local rows and the model's
        "local": {
            "positions": LOCAL_POSITIONS,
            "paper": PAPER_LOCAL_US_PER_TOKEN,
            "model": {f"{v}_us_per_token": t for v, t in local.items()},
            "us_per_position": {
                "paper": {v: (PAPER_US_PER_TOKEN[v] - PAPER_LOCAL_US_PER_TOKEN[v]) / span for v in local},
                "model": {v: (full[v] - local[v]) / span for v in local},
            },
        },
        # no per-byte mechanism escapes it: a step is a part N that is not the cache's and a cache part C, multi-query's
        # N at least multi-head's (the models have the same parameters: its feed-forward is wider) and every cache cost
        # `heads` times apart, so multi-head <= N + heads * C <= heads * multi-query
        # the experiments' own code path (mesh_tf_step_s), beside the mechanisms above
        "mesh_tensorflow": {
            "mha_us_per_token": mesh["mha"],
            "mqa_us_per_token": mesh["mqa"],
            "ratio": mesh["mha"] / mesh["mqa"],
        },
        "bound": {
            "heads": heads,
            "model_not_cache_us": bare,
            "paper_mha_most_us": heads * PAPER_US_PER_TOKEN["mqa"],
            "paper_mha_beyond_us": PAPER_US_PER_TOKEN["mha"] - heads * PAPER_US_PER_TOKEN["mqa"],
        },
        "paper": {
            "mha_us_per_token": PAPER_US_PER_TOKEN["mha"],
            "mqa_us_per_token": PAPER_US_PER_TOKEN["mqa"],
            "ratio": PAPER_US_PER_TOKEN["mha"] / PAPER_US_PER_TOKEN["mqa"],
        },
        "setup": (
            f"WMT Transformer decoder step (6 layers, d 1024, 8 heads of 128, self-attention memory "
            f"{TARGET_POSITIONS}, source {SOURCE_POSITIONS}, vocabulary 32768) on one TPUv2 board: "
            f"{BOARD_BATCH} sequences over {BOARD_CHIPS} chips ({batch} per chip, data parallel), "
            f"{hw.name}: {hw.peak('bf16') / 1e12:g} TFLOP/s bf16, {hw.bandwidth / 1e9:g} GB/s per chip, "
            f"matrix tile {'x'.join(map(str, hw.matrix_tile.shape)) if hw.matrix_tile else 'none'}; "
            f"time per token = chip step time / {BOARD_BATCH}"
        ),
    }


GROUPS = (1, 4, 8, 16, 32, 64)
#: Ainslie et al. 2023: Table 1's T_infer (s per sample per TPU v4 chip, 1, 8 and 64 groups), and Figure 6's shape.
PAPER_S_PER_SAMPLE = {1: 0.24, 8: 0.28, 64: 1.51}
TABLE1_NOT_COMPARED = (
    "Table 1's T_infer (MQA 0.24 s, 8 groups 0.28 s, MHA 1.51 s per sample per chip) was timed over the paper's own "
    "fine-tuning tasks at their input and output lengths, a mix not given here: not compared with this 2048 + 512 setting"
)
FIGURE6 = (
    "Figure 6 (this setting): going from 1 to 8 groups adds modest inference time, with rising cost as the group "
    "count approaches the 64 heads"
)
GQA2023_EXECUTION = "fused"  # how the reproduction runs attention: fused, as a TPU compiler fuses it


def gqa2023(
    groups=GROUPS,
    hw: HardwareProfile | None = None,
    chips: int = 8,
    source: int = 2048,
    output: int = 512,
    max_batch_per_chip: int = 32,
    sample_every: int = 32,
) -> dict:
    """T5-XXL decoder with g key/value groups (encoder MHA) on TPU v4: chip-seconds per sample, tensor parallel over
    ``chips``, the largest batch that fits up to ``max_batch_per_chip`` x ``chips``; prefill (the encoder over
    ``source`` tokens) + ``output`` decode steps, each ``sample_every``-th priced and summed by the trapezoid rule (the
    step is piecewise linear in the context). ``steps``: MQA, 8 groups and MHA by the datasheet roofline (with the
    launch cost per kernel), then with the matrix unit's whole passes (the ``tiles`` mechanism)."""
    hw = hw or load_profile("tpu_v4")
    base = load_model("t5_xxl")
    run = dict(
        hw=hw,
        chips=chips,
        source=source,
        output=output,
        max_batch_per_chip=max_batch_per_chip,
        sample_every=sample_every,
    )
    rows = [_gqa_row(base, g, **run) for g in groups]
    done = {r["groups"]: r for r in rows}
    steps = []
    for label, without in (
        ("datasheet roofline (launch cost per kernel)", ("tiles",)),
        (f"+ matrix-unit passes (whole {' x '.join(map(str, hw.systolic_tile or ()))} tiles)", ()),
    ):
        got = {
            g: done[g] if g in done and not without else _gqa_row(base, g, without=without, **run)
            for g in PAPER_S_PER_SAMPLE
        }
        steps.append(
            {
                "model": label,
                "without": list(without),
                **{f"g{g}_chip_ms_per_sample": r.get("chip_ms_per_sample") for g, r in got.items()},
            }
        )
    return {
        "rows": rows,
        "steps": steps,
        "chips": chips,
        "setup": (
            f"T5 XXL (24+24 layers, d 4096, 64 heads of 64, gated d_ff 10240), decoder self- "
            f"and cross-attention with g groups, encoder MHA; input {source}, output {output}; "
            f"{chips} x {hw.name} tensor parallel, batch = largest that fits up to "
            f"{max_batch_per_chip} per chip; {GQA2023_EXECUTION} attention; chip-milliseconds per sample"
        ),
        "paper": FIGURE6,
        "table1": {"s_per_sample": PAPER_S_PER_SAMPLE, "compared": False, "why": TABLE1_NOT_COMPARED},
        "execution": GQA2023_EXECUTION,
    }


def _gqa_row(
    base: ModelPreset,
    g: int,
    *,
    hw,
    chips: int,
    source: int,
    output: int,
    max_batch_per_chip: int,
    sample_every: int,
    without=(),
) -> dict:
    """One row of :func:`gqa2023`: the model with ``g`` key/value groups, its batch, prefill and decode."""
    m = base.model_copy(update={"kv_heads": g, "cross_kv_heads": g, "encoder_kv_heads": base.heads})
    batch = max_batch_per_chip * chips
    run = {"source": source, "tp": chips, "execution": GQA2023_EXECUTION, "without": without}
    fit = predict_model(m, hw, batch=1, context=output, **run).memory.max_batch
    batch = min(batch, fit)
    if batch < 1:
        return {"groups": g, "batch": 0, "ms_per_sample": None, "note": "does not fit"}
    points = sorted(set(range(0, output, sample_every)) | {output - 1})
    times = [predict_model(m, hw, batch=batch, context=max(c, 1), **run).decode.time_s for c in points]
    decode = sum((times[i] + times[i + 1]) / 2 * (points[i + 1] - points[i]) for i in range(len(points) - 1))
    decode += times[-1]  # the last step itself
    prefill = predict_model(m, hw, batch=batch, context=1, **run).prefill.time_s
    total = prefill + decode
    return {
        "groups": g,
        "batch": batch,
        "prefill_s": prefill,
        "decode_s": decode,
        "chip_ms_per_sample": total * chips / batch * 1e3,
    }


#: DeepSeek-V2 (arXiv 2405.04434), Section 3.2.3 and Figure 1: against DeepSeek 67B, the KV cache reduced by 93.3%
#: and the maximum generation throughput raised 5.76 times (over 50K tokens/s on one node of 8 H800 GPUs), with
#: DeepSeek-V2's parameters in FP8 and its KV cache quantized to 6 bits per element on average.
DEEPSEEK2024_PAPER = {"kv_reduction": 0.933, "throughput_ratio": 5.76, "v2_tokens_per_s": 50e3}
#: The KV cache's bits per element the paper gives DeepSeek-V2 ("6 bits on average").
DEEPSEEK2024_KV_BITS = 6


def deepseek2024(
    hw: HardwareProfile | None = None,
    devices: int = 8,
    input_len: int = 1024,
    output_len: int = 1024,
    max_concurrency: int = 1024,
    engine_name: str = DEFAULTS["engine"],
) -> dict:
    """DeepSeek-V2 against DeepSeek 67B: the KV cache per token counted from both programs, and the most output
    tokens/s each serves on ``devices`` x ``hw`` over the aggregated layouts :func:`costmodel.deploy.planner.layouts`
    enumerates (closed form, clients doubling until the throughput stops growing), DeepSeek-V2 in FP8 weights and
    an FP8 cache (the nearest dtype to the paper's 6 bits), DeepSeek 67B in BF16. The paper states neither the
    requests' lengths nor the engine: ``input_len`` + ``output_len`` and ``engine_name`` are assumptions."""
    hw = hw or load_profile("h800")
    v2, base = load_model("deepseek-v2"), load_model("deepseek-llm-67b")
    kv = {m.id: predict_model(m, hw, batch=1, context=1).memory.kv_cache_bytes_per_token for m in (v2, base)}
    v2_quantized = kv[v2.id] * DEEPSEEK2024_KV_BITS / 16

    rows = _deepseek_rows(hw, v2, base, devices, input_len, output_len, max_concurrency, engine_name)
    base_tps = rows[0]["tokens_per_s"]
    for r in rows:
        r["ratio"] = r["tokens_per_s"] / base_tps if r["tokens_per_s"] and base_tps else None
    return {
        "kv_bytes_per_token": {
            "deepseek_llm_67b": kv[base.id],
            "deepseek_v2_bf16": kv[v2.id],
            "deepseek_v2_6bit": v2_quantized,
        },
        "kv_reduction": {
            "bf16": 1 - kv[v2.id] / kv[base.id],
            "fp8": 1 - kv[v2.id] / 2 / kv[base.id],
            "6bit": 1 - v2_quantized / kv[base.id],
        },
        "throughput": rows,
        "paper": DEEPSEEK2024_PAPER,
        "devices": devices,
        "hw": hw.id,
        "setup": (
            f"{devices} x {hw.name}, served by {engine_name} (closed form), requests of {input_len} + "
            f"{output_len} tokens, the most output tokens/s over the aggregated layouts (tensor parallel, "
            "replicas and pipeline stages; for DeepSeek-V2 also experts spread over the devices and attention "
            "data parallel), clients doubling up to "
            f"{max_concurrency} per replica; DeepSeek 67B in BF16, DeepSeek-V2 in FP8 with an FP8 cache"
        ),
    }


def _deepseek_rows(hw, v2, base, devices, input_len, output_len, max_concurrency, engine_name) -> list[dict]:
    """The most output tokens/s of DeepSeek 67B in BF16 and DeepSeek-V2 in FP8 (over every aggregated layout, then
    tensor parallel alone) in closed form."""
    from costmodel.deploy.planner import layouts, sweep

    def best(m, weight_dtype, kv_dtype, only=None):
        points = [
            pt
            for layout in layouts(m, devices)
            if layout.mode == "agg" and (only is None or layout.describe() == only)
            for pt in sweep(
                m,
                hw,
                layout,
                max_concurrency=max_concurrency,
                input_len=input_len,
                output_len=output_len,
                engine_name=engine_name,
                weight_dtype=weight_dtype,
                kv_dtype=kv_dtype,
                targets=(None, None),
            )[0]
        ]
        return max(points, key=lambda p: p.output_tokens_per_s_per_device, default=None)

    rows = []
    for name, m, wd, kd, only in (
        ("DeepSeek 67B", base, "bf16", "bf16", None),
        ("DeepSeek-V2", v2, "fp8", "fp8", None),
        ("DeepSeek-V2, tensor parallel only", v2, "fp8", "fp8", f"1 x TP{devices} EP"),
    ):
        pt = best(m, wd, kd, only)
        rows.append(
            {
                "model": name,
                "weights": wd,
                "kv_cache": kd,
                "layout": pt.layout if pt else None,
                "clients": pt.concurrency if pt else None,
                "tokens_per_s": pt.output_tokens_per_s_per_device * devices if pt else None,
                "tpot_s": pt.tpot_s if pt else None,
            }
        )
    return rows

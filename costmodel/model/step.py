"""Whole models priced: a decode step and a prefill op by op (the ops of :mod:`costmodel.model.ops`, each
priced by :func:`costmodel.price.op.price`), parameters and KV cache (:mod:`costmodel.model.memory`), on one or
more devices, as a :class:`ModelPrediction`.

Tensor parallelism over ``t`` devices shards query heads, key/value heads (replicating them when
``g < t``, as Pope et al. 2022 and Ainslie et al. 2023 describe), the feed-forward width and the
vocabulary, and adds two all-reduces per layer priced from the profile's interconnect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from costmodel.attention.roofline import mechanism_lines
from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.core.fits import largest_fitting
from costmodel.core.reports import DeviceSummary, Report
from costmodel.core.vocab import (
    ALL_REDUCES,
    DEFAULTS,
    DTYPES,
    EXECUTIONS,
    MLA_FORMS,
    MOE_KERNELS,
    MXFP4_ACTIVATIONS,
    OVERLAPS,
    WEIGHT_DTYPES,
    choice,
    dtype_bytes,
)
from costmodel.hardware.mechanisms import LOW_PRECISION_GEMM, MOE_GEMM, W4A16_MOE, WEIGHT_MATH
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.memory import (
    DEFAULT_GROUP,
    active_params,
    kv_bytes,
    largest_batch_in_memory,
    param_count,
    weight_bytes,
    weight_width,
)
from costmodel.model.ops import (
    COLLECTIVES,
    StepOp,
    device_slice,
    engine_ops,
    prompt_cache_writes,
    reduces_per_layer,
    step_ops,
    tensor_parallel,
)
from costmodel.model.presets import ModelPreset
from costmodel.price.bands import Band, band
from costmodel.price.bands import assumption as band_assumption
from costmodel.price.bands import total as band_total
from costmodel.price.op import Conventions, KernelOp, Precision, price
from costmodel.price.origin import time_model

# --- the prediction ------------------------------------------------------------------------------------


class OpTime(Report):
    section: str
    name: str
    einsum: str | None
    flops: float
    bytes: float
    count: int
    time_s: float = Field(description="all kernels of this op in the step")
    bound: Literal["compute", "memory"]
    band: Band | None = None  # where the measured time is expected to fall (costmodel.price.bands)


class PhaseTime(Report):
    time_s: float
    flops: float
    bytes: float
    all_reduce_s: float
    all_reduces: int = 0
    ops: list[OpTime]
    band: Band | None = None  # the ops' ranges added, the collectives at their time (costmodel.price.bands.total)


def model_hardware(pr: Pricing) -> DeviceSummary:
    """The device as a model report states it: its rates, its time model, and the tensor-parallel devices."""
    from costmodel.attention.roofline import hardware_summary

    return hardware_summary(pr.hw, pr.dtype, pr.model, pr.tp)


class ModelShape(Report):
    id: str
    name: str
    params: int
    published_params: float | None
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    kv_heads_per_device: int
    active_params: int
    attention: str
    moe: dict | None = None
    mla: dict | None = None
    sliding_window: int | None = None
    local_layers: int = 0


class ModelWorkload(Report):
    batch: int
    context: int
    source: int | None
    dtype: str
    weight_dtype: str
    weight_group_size: int
    kv_dtype: str
    execution: str
    tp: int
    overlap: str
    attention_dp: int = 1  # groups of tp devices, each with batch sequences of its own (its experts over all)
    weight_scope: str = "all"  # "experts": only the routed experts' projections in weight_dtype, the rest in dtype


class ModelTotals(Report):
    tpot_s: float
    ttft_s: float
    tokens_per_s: float


class ModelMemory(Report):
    kv_cache_bytes_per_token: int
    kv_cache_bytes: int
    kv_cache_bytes_per_device: int
    weight_bytes_per_device: int
    capacity_bytes: float
    fits: bool
    max_batch: int
    max_context: int | None = Field(description="None: no limit (every layer caches at most its window)")


class ModelPrediction(Report):
    """A whole model on one device (or ``tp`` devices): decode step (TPOT), prefill (TTFT), memory.
    ``str()`` is the table, ``model_dump()`` the JSON."""

    hardware: DeviceSummary
    model: ModelShape
    workload: ModelWorkload
    decode: PhaseTime
    prefill: PhaseTime
    total: ModelTotals
    memory: ModelMemory
    assumptions: list[str]

    def __str__(self) -> str:
        from costmodel.render.models import model_table

        return model_table(self)


def op_time(s: StepOp, pr: Pricing):
    """The time of one kernel of a step's op under the pricing conventions (arrays where its counts are)."""
    return price(s.op, s.shape, pr.hw, Conventions(pr.model, pr.overlap))


def _price(ops: list[StepOp], pr: Pricing) -> list[OpTime]:
    out = []
    for s in ops:
        t = op_time(s, pr)
        ranged = band(t.time * s.count, pr.hw, pr.model, s.op.cls) if s.section != COLLECTIVES else None
        out.append(
            OpTime(
                section=s.section,
                name=s.name,
                einsum=s.einsum,
                flops=s.op.flops * s.count,
                bytes=s.op.bytes * s.count,
                count=s.count,
                time_s=t.time * s.count,
                bound=t.bound,
                band=ranged,
            )
        )
    return out


def all_reduce_s(hw: HardwareProfile, t: int, nbytes: float) -> float:
    """One ring all-reduce of ``nbytes`` over ``t`` devices, priced by :func:`costmodel.price.op.price`."""
    return price(
        KernelOp("all_reduce", "all_reduce", "bf16", 0.0, nbytes, devices=t), None, hw, Conventions.datasheet()
    ).time


@dataclass(frozen=True)
class Pricing:
    """How a model's ops are priced on a device: dtypes and storage widths, the time model, the
    execution and engine conventions, tensor parallelism (every check done once, by :func:`pricing`)."""

    hw: HardwareProfile
    dtype: str
    weight_dtype: str
    group: int
    kv_dtype: str
    precision: Precision
    execution: str
    overlap: str
    model: object  # costmodel.price.origin.TimeModel
    engine: bool
    tp: int
    mla_form: str | None
    ep: bool = False  # the routed experts spread over the tp devices (expert parallel) instead of sharded
    dp: int = 1  # attention data parallel: dp groups of tp devices, each its own requests; experts over all
    pp: int = 1  # pipeline parallel: pp stages of tp devices, each a contiguous 1/pp of the layers
    ep_size: int = 0  # expert-parallel groups within the tp devices (0: tp with ep, else 1); each shards its experts
    # the engine's MoE kernel: "routed" walks only the rows routed to this device's experts (TensorRT-LLM's and
    # SGLang's grouped GEMMs over permuted rows); "fused" (vLLM's fused_moe with an expert map) spans every
    # routed row of the batch it is given, writing zeros for rows routed to other devices
    moe_kernel: str = "routed"
    # how a tensor-parallel all-reduce's implementation is picked (costmodel.core.vocab.ALL_REDUCES): vLLM's custom kernel
    # up to 8 MiB and NCCL above, or the engine's own entry point as its table measures it at every size
    all_reduce: str = "custom"

    @property
    def gemm_dtype(self) -> str | None:
        """The dtype GEMMs over stored weights run at where it is the weights' (W8A8), else None."""
        return self.precision.gemm_dtype

    def slice(self, m: ModelPreset) -> ModelPreset:
        """What one of the tp devices holds of ``m`` under these conventions."""
        return device_slice(m, self.tp, self.ep, self.dp, self.ep_size)


#: Weight formats whose experts vLLM runs in grouped kernels over the rows permuted to the device's experts, not
#: in its Triton fused_moe: block-scaled fp8 in DeepGEMM (vllm/model_executor/layers/fused_moe/oracle/fp8.py
#: prefers it on Hopper and later), NVFP4 in FlashInfer's TensorRT-LLM kernels, MXFP4 in triton_kernels' matmul_ogs.
ROUTED_FORMATS = ("fp8_block", "nvfp4", "mxfp4")
#: The kernel classes a block-scaled FP8 checkpoint's dense layers may run in (an engine's choice,
#: :attr:`costmodel.engine.config.EngineConfig.block_fp8_linear`): the block-scaled class (vLLM's kernel, measured), or the
#: per-tensor one (an engine whose own block-scaled kernel is a CUTLASS GEMM after a quantize kernel, as vLLM's
#: per-tensor path is).
BLOCK_FP8_LINEAR = ("gemm_fp8_block", "gemm_fp8")


def pricing(
    m: ModelPreset,
    hw: HardwareProfile,
    *,
    dtype: str = DEFAULTS["dtype"],
    execution: str = DEFAULTS["model_execution"],
    tp: int = DEFAULTS["tp"],
    overlap: str = DEFAULTS["overlap"],
    timing: str = DEFAULTS["timing"],
    without=(),
    engine: bool = True,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    mla_form: str | None = None,
    expert_parallel: bool = False,
    attention_dp: int = 1,
    pipeline_parallel: int = 1,
    expert_parallel_size: int | None = None,
    moe_kernel: str = "routed",
    block_fp8_linear: str = "gemm_fp8_block",
    mxfp4_activations: str = "bf16",
    all_reduce: str = "custom",
) -> Pricing:
    """The pricing conventions of :func:`predict_model`, checked."""
    checks.instance("model", m, ModelPreset, "a ModelPreset (load_model(...))")
    checks.instance("hw", hw, HardwareProfile, "a HardwareProfile (load_profile(...))")
    checks.count("tp", tp)
    checks.flag("engine", engine)
    dtype, execution = choice("dtype", dtype, DTYPES), choice("execution", execution, EXECUTIONS)
    overlap = choice("overlap", overlap, OVERLAPS)
    if mla_form is not None:
        mla_form = choice("mla form", mla_form, MLA_FORMS)
        if m.mla is None:
            raise CostModelError(f"mla form applies to MLA models; {m.id} has {m.attention_label}")
    quant = m.quantization
    group = 0
    if weight_dtype is not None:
        weight_dtype = choice("weight dtype", weight_dtype, WEIGHT_DTYPES)
    # the checkpoint's own storage where no other is asked for: its group size, and whether it quantizes only the
    # routed experts (their GEMMs in its format, every other projection at the activation width)
    own = quant is not None and weight_dtype in (None, quant.weight_dtype)
    if own:
        weight_dtype, group = quant.weight_dtype, quant.group_size
    elif weight_dtype is not None:
        group = DEFAULT_GROUP.get(weight_dtype, 0)
    weight_dtype = weight_dtype or dtype
    kv_dtype = choice("kv dtype", kv_dtype, DTYPES) if kv_dtype else dtype
    model = time_model(hw, timing, without)
    hw.peak(dtype)
    checks.flag("expert_parallel", expert_parallel)
    checks.count("attention_dp", attention_dp)
    checks.count("pipeline_parallel", pipeline_parallel)
    if pipeline_parallel > 1 and attention_dp > 1:
        raise CostModelError("pipeline parallel with attention data parallel is not modelled; give one of them")
    if pipeline_parallel > m.layers:
        raise CostModelError(f"pipeline parallel {pipeline_parallel} exceeds the {m.layers} layers of {m.id}")
    if expert_parallel_size is not None:
        checks.count("expert_parallel_size", expert_parallel_size)
        if expert_parallel_size > tp:
            raise CostModelError(
                f"expert parallel size {expert_parallel_size} exceeds tp {tp} (the experts are spread "
                "within the tensor-parallel group)"
            )
        expert_parallel = expert_parallel or expert_parallel_size == tp > 1
    ep_size = expert_parallel_size or 0
    moe_kernel = choice("moe kernel", moe_kernel, MOE_KERNELS)
    if moe_kernel == "fused" and weight_dtype in ROUTED_FORMATS:
        moe_kernel = "routed"
    device_slice(m, tp, expert_parallel, attention_dp, ep_size)  # a layout the model cannot take: an error first
    # W8A8 (W4A4): 8-bit weights run their GEMMs at the 8-bit peak where the device has one, NVFP4 weights at the
    # fp4 peak (Blackwell); int4, MXFP4 (W4A16) and wider weights, and NVFP4 on a device without fp4 math, are
    # dequantized to the activation dtype in the kernel
    math = WEIGHT_MATH.get(weight_dtype)
    gemm_dtype = math if math in hw.peak_flops_per_s else None
    kernel = LOW_PRECISION_GEMM.get(weight_dtype) if gemm_dtype else None
    moe = expert_dtype = None
    if kernel == "gemm_fp8_block":
        # the engine's kernel for a block-scaled checkpoint's dense layers; its experts keep the block-scaled MoE class
        kernel = choice("block fp8 linear kernel", block_fp8_linear, BLOCK_FP8_LINEAR)
        moe = MOE_GEMM["gemm_fp8_block"]
    mxfp4_activations = choice("mxfp4 activations", mxfp4_activations, MXFP4_ACTIVATIONS)
    all_reduce = choice("all-reduce", all_reduce, ALL_REDUCES)
    if weight_dtype == "mxfp4" and mxfp4_activations == "mxfp8" and {"fp4", "fp8"} <= set(hw.peak_flops_per_s):
        # MXFP8 x MXFP4 experts: FP4 math's f8f6f4 MMA at the fp8 rate, in the engine's own kernels (TensorRT-LLM's),
        # priced as dense GEMMs, like weight-only quantized experts; the checkpoint's other layers stay bf16
        expert_dtype, moe = "fp8", "gemm"
    # a checkpoint that stores only its routed experts so: every other projection at the activation width, its
    # GEMMs in the activation dtype (Precision.outside_experts)
    experts_only = own and quant.scope == "experts"
    precision = Precision(
        dtype_bytes(dtype),
        weight_width(weight_dtype, group),
        dtype_bytes(kv_dtype),
        dtype,
        gemm_dtype,
        kernel,
        moe,
        expert_dtype,
        dtype_bytes(dtype) if experts_only else None,
    )
    return Pricing(
        hw,
        dtype,
        weight_dtype,
        group,
        kv_dtype,
        precision,
        execution,
        overlap,
        model,
        engine,
        tp,
        mla_form,
        expert_parallel,
        attention_dp,
        pipeline_parallel,
        ep_size if 1 < ep_size < tp else 0,
        moe_kernel,
        all_reduce,
    )


def phase_ops(m: ModelPreset, pr: Pricing, phase: str, batch: int, context, source: int) -> list[StepOp]:
    """A phase's program on one device: the sliced model's ops, as engines run them, with the collectives of
    tensor parallelism inserted."""
    dev = pr.slice(m)
    ops = step_ops(
        dev,
        phase,
        batch,
        context,
        source,
        pr.precision,
        pr.execution,
        mla_form=pr.mla_form,
        dp=pr.dp,
        moe_spans_all=pr.moe_kernel == "fused",
    )
    tokens = batch if phase == "decode" else batch * context
    ops = engine_ops(ops, dev, tokens, pr.precision) if pr.engine else ops
    if phase == "prefill" and pr.engine and not _attention_writes_cache(pr):
        ops = prompt_cache_writes(ops, dev, tokens, pr.precision)
    encoder = batch * source if phase == "prefill" and m.architecture == "encoder-decoder" else 0
    return pipeline_sends(
        tensor_parallel(ops, m, pr.tp, tokens, encoder, pr.precision.act, pr.dp, pr.all_reduce), m, pr, tokens
    )


def _attention_writes_cache(pr: Pricing) -> bool:
    """Whether the device's prefill attention call writes the prompt's keys and values (its fit says so: the tables
    it was fitted on time the write inside the call), or the model prices no cache write at all (a datasheet
    roofline of the attention alone)."""
    eff = pr.model.resolved.get("prefill_attention") if pr.model.active else None
    return eff is None or eff.cache_write_ceiling is not None


def pipeline_sends(ops: list[StepOp], m: ModelPreset, pr: Pricing, tokens) -> list[StepOp]:
    """Under pipeline parallel, the hidden states of ``tokens`` sent from each stage to the next: pp - 1 sends,
    of which those between scale-up domains (stages laid out in order, tp devices each) cross the network."""
    if pr.pp == 1:
        return ops
    domain = pr.hw.domain
    crossing = 0 if domain is None else max(0, -(-pr.tp * pr.pp // domain) - 1)
    crossing = min(crossing, pr.pp - 1)
    nbytes = tokens * m.d_model * pr.precision.act
    out = list(ops)
    for name, count, span in (("pp_send", pr.pp - 1 - crossing, 2), ("pp_send_network", crossing, (domain or 0) + 1)):
        if count:
            out.append(StepOp(COLLECTIVES, count, KernelOp("send", name, "bf16", 0.0, nbytes, devices=2, span=span)))
    return out


def phase_time(m: ModelPreset, pr: Pricing, phase: str, batch: int, context: int, source: int) -> PhaseTime:
    """One decode step after ``context`` cached positions, or the prefill of a ``context``-token prompt."""
    priced = _price(phase_ops(m, pr, phase, batch, context, source), pr)
    ops = [o for o in priced if o.section != COLLECTIVES]
    collectives = [o for o in priced if o.section == COLLECTIVES]
    reduce_s = sum(o.time_s for o in collectives)
    return PhaseTime(
        time_s=sum(o.time_s for o in ops) + reduce_s,
        flops=sum(o.flops for o in ops),
        bytes=sum(o.bytes for o in ops),
        all_reduce_s=reduce_s,
        all_reduces=next((o.count for o in collectives if o.name == "all_reduce"), 0),
        ops=ops,
        band=band_total([(o.time_s, o.band) for o in ops] + [(reduce_s, None)]),
    )


def decode_times(m: ModelPreset, pr: Pricing, batch: int, contexts, source: int | None = None):
    """Decode-step times (seconds) after each of ``contexts`` cached positions, all at once: the step's
    ops evaluated on an array of contexts (the same expressions and mechanisms as :func:`phase_time`)."""
    contexts = np.asarray(contexts, dtype=np.int64)
    ops = phase_ops(m, pr, "decode", batch, contexts, source or 1)
    total = np.zeros(contexts.shape)
    for s in ops:
        if s.section != COLLECTIVES:
            total = total + np.asarray(op_time(s, pr).time, float) * s.count
    return total + sum(op_time(s, pr).time * s.count for s in ops if s.section == COLLECTIVES)


def predict_model(
    m: ModelPreset,
    hw: HardwareProfile,
    *,
    batch: int = DEFAULTS["batch"],
    context: int = DEFAULTS["context"],
    source: int | None = None,
    dtype: str = DEFAULTS["dtype"],
    execution: str = DEFAULTS["model_execution"],
    tp: int = DEFAULTS["tp"],
    overlap: str = DEFAULTS["overlap"],
    timing: str = DEFAULTS["timing"],
    without=(),
    engine: bool = True,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    mla_form: str | None = None,
    expert_parallel: bool = False,
    attention_dp: int = 1,
) -> ModelPrediction:
    """Decode step after ``context`` cached positions (TPOT), prefill of a ``context``-token prompt
    (TTFT), KV cache and weights per device, and the largest batch and context that fit. ``engine``:
    the step as serving engines run it (:func:`engine_ops`); False: every op of the programs alone.

    ``dtype`` is the activations' (and the math's) dtype; ``weight_dtype`` the projection weights' storage
    (default: the model's quantization, else ``dtype``); ``kv_dtype`` the cache's (default ``dtype``).
    ``mla_form`` fixes an MLA model's form (default: absorbed for decode, naive for prefill);
    ``expert_parallel`` spreads a mixture of experts' routed experts over the ``tp`` devices; ``attention_dp``
    groups of ``tp`` devices each run ``batch`` sequences of their own through attention, the experts over all
    the groups' devices (the step of one group, every group alike)."""
    checks.count("batch", batch)
    checks.count("context", context)
    checks.count("source", source, optional=True)
    pr = pricing(
        m,
        hw,
        dtype=dtype,
        execution=execution,
        tp=tp,
        overlap=overlap,
        timing=timing,
        without=without,
        engine=engine,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        mla_form=mla_form,
        expert_parallel=expert_parallel,
        attention_dp=attention_dp,
    )
    fixed_source, source = source, source or context
    dev = pr.slice(m)
    phases = {phase: phase_time(m, pr, phase, batch, context, source) for phase in ("decode", "prefill")}
    weights = weight_bytes(dev, pr)
    kv = kv_bytes(dev, pr, batch, context, source)
    free = hw.capacity - weights
    unlimited = m.local_layers == m.layers and m.architecture == "decoder"
    max_context = (
        None
        if unlimited and free > kv_bytes(dev, pr, batch, m.sliding_window, 1)
        else largest_fitting(lambda c: weights + kv_bytes(dev, pr, batch, c, fixed_source or max(c, 1)) <= hw.capacity)
    )
    tpot = phases["decode"].time_s
    per_token = kv_bytes(m, pr, 1, 1, source) - kv_bytes(m, pr, 1, 0, source)
    return ModelPrediction(
        hardware=model_hardware(pr),
        model=ModelShape(
            id=m.id,
            name=m.name,
            params=param_count(m),
            active_params=active_params(m),
            published_params=m.published_params,
            layers=m.layers,
            heads=m.heads,
            kv_heads=m.kv_heads,
            head_dim=m.head_dim,
            kv_heads_per_device=dev.kv_heads,
            attention=m.attention_label,
            moe=m.moe.model_dump() if m.moe else None,
            mla=m.mla.model_dump() if m.mla else None,
            sliding_window=m.sliding_window,
            local_layers=m.local_layers,
        ),
        workload=ModelWorkload(
            batch=batch,
            context=context,
            source=source if m.architecture == "encoder-decoder" else None,
            dtype=pr.dtype,
            weight_dtype=pr.weight_dtype,
            weight_group_size=pr.group,
            kv_dtype=pr.kv_dtype,
            execution=pr.execution,
            tp=tp,
            overlap=pr.overlap,
            attention_dp=pr.dp,
            weight_scope="experts" if pr.precision.experts_only else "all",
        ),
        decode=phases["decode"],
        prefill=phases["prefill"],
        total=ModelTotals(tpot_s=tpot, ttft_s=phases["prefill"].time_s, tokens_per_s=batch / tpot),
        memory=ModelMemory(
            kv_cache_bytes_per_token=per_token,
            kv_cache_bytes=kv,
            kv_cache_bytes_per_device=kv,
            weight_bytes_per_device=weights,
            capacity_bytes=hw.capacity,
            fits=kv + weights <= hw.capacity,
            max_batch=largest_batch_in_memory(dev, pr, context, source),
            max_context=max_context,
        ),
        assumptions=step_assumptions(m, pr) + band_assumption((o.band for ph in phases.values() for o in ph.ops), hw),
    )


def _experts_layout(m: ModelPreset, pr: Pricing) -> str:
    """How the routed experts sit on the tensor-parallel devices, in words."""
    if pr.ep:
        fused = (
            "; vLLM's fused MoE kernel walks every routed row of the batch, writing zeros for those of other "
            "devices' experts"
            if pr.moe_kernel == "fused"
            else ""
        )
        return (
            f"the routed experts spread over the devices (expert parallel: {m.moe.experts // (pr.tp * pr.dp)} "
            f"whole experts each, a token's rows to the devices holding its experts{fused})"
        )
    if pr.ep_size:
        return (
            f"the routed experts in {pr.ep_size} expert-parallel groups of {pr.tp // pr.ep_size} devices "
            f"({m.moe.experts // pr.ep_size} experts each, their width sharded over the group)"
        )
    return "each expert's width sharded"


def gemm_classes(pr: Pricing) -> str:
    """The fitted kernel classes low-precision GEMMs are priced in, in words."""
    if pr.precision.gemm_kernel == "gemm_fp8" and pr.weight_dtype == "fp8_block":
        return (
            "the dense layers' block-scaled GEMMs in the engine's own kernel, a quantize kernel then a CUTLASS "
            "GEMM, priced as the per-tensor FP8 class; the experts' in the block-scaled MoE class"
        )
    return f"the {pr.precision.gemm_kernel} kernel class"


def step_assumptions(m: ModelPreset, pr: Pricing) -> list[str]:
    dtype, weight_dtype, group, gemm_dtype, mla_form = pr.dtype, pr.weight_dtype, pr.group, pr.gemm_dtype, pr.mla_form
    out = [
        "decode step: one token per sequence after `context` cached positions; prefill: a `context`-token prompt",
        *mechanism_lines(pr.hw, pr.model),
        "fused attention" if pr.execution == "fused" else "unfused attention",
    ]
    if pr.engine:
        fused = "q, k and v projections as one GEMM, gate and up as one, the K and V cache writes as one kernel"
        out.append("as serving engines run it: " + fused + (", rotary embeddings on q and k" if m.rope else ""))
    else:
        out.append("every op of the programs as its own kernel (no engine fusion)")
    if m.mla:
        forms = (
            f"the {mla_form} form in decode and prefill"
            if mla_form
            else (
                "absorbed form in decode (attention over the latent cache), naive form in prefill (per-head keys and "
                "values materialised)"
            )
        )
        out.append(
            f"multi-head latent attention: one cached latent of {m.mla.kv_rank} plus a rotary key of "
            f"{m.mla.rope_dim} per position and layer, shared by all heads; {forms}"
        )
    if m.moe:
        e = m.moe
        routing = (
            "routed uniformly at random (a batch of T tokens touches E(1 - (1 - k/E)^T) distinct experts, "
            "whose weights are read once per step)"
            if e.routing == "uniform"
            else "routed evenly (every expert the same share: a batch of T tokens touches min(E, T k) distinct "
            "experts, whose weights are read once per step)"
            if e.routing == "balanced"
            else f"routed by a power law of exponent {e.routing.split(':')[1]} (expert loads drawn as aiconfigurator's "
            "MoE tables draw them; the busiest device's rows and touched experts, the mean of 64 draws)"
        )
        tiled = (
            "; the experts' products in the tile the device's grouped kernel takes for the tokens of the call "
            "(vLLM's Triton fused MoE configuration, kernels.grouped_dispatch), each expert's rows padded to "
            "whole tiles"
            if pr.precision.experts_class() in pr.hw.architecture.kernels.grouped_dispatch
            else ""
        )
        res = pr.model.resolved if pr.model.active else None  # None: the datasheet roofline, no kernel classes
        if res is not None and pr.precision.experts_class() == W4A16_MOE:
            if res.get(W4A16_MOE) != res.get("gemm"):
                tiled += (
                    "; the weight-only 4-bit experts' products in the moe_w4a16 class where a call carries "
                    "more than 6 routed rows per expert (vLLM's Triton W4A16 kernel as its int4 layers measure "
                    "it, dequantizing each weight in its main loop: the nearest measured kernel to Marlin's and "
                    "matmul_ogs's), at or below that as dense GEMMs of their 4-bit weights (vLLM's kernel "
                    "switch, should_moe_wna16_use_cuda)"
                )
            else:
                tiled += (
                    "; the weight-only 4-bit experts' products as dense bf16 GEMMs of their 4-bit weights (no "
                    "W4A16 MoE kernel measured for this device: on the H100 and B200 that kernel runs prompt-"
                    "sized calls at 8-13% of the bf16 peak, 4.6-6.3x slower)"
                )
        out.append(
            f"mixture of experts in {e.layers} of {m.layers} layers: {e.experts} experts, {e.experts_per_token} "
            f"per token, {routing}; all experts resident in memory"
            + (f"; shared experts of width {e.shared_d_ff}" if e.shared_d_ff else "")
        )
        if tiled:  # how the experts' products run, a sentence of its own
            out.append(tiled.removeprefix("; "))
    if m.sliding_window:
        out.append(
            f"{m.local_layers} of {m.layers} layers attend within a sliding window of {m.sliding_window} "
            "positions and cache only those (decode reads at most the window; the prefill kernel skips "
            "key blocks outside it)"
        )
    width = weight_width(weight_dtype, group)
    scale = {"mxfp4": "an 8-bit power-of-two scale", "nvfp4": "an 8-bit (FP8) scale"}.get(
        weight_dtype, "a 16-bit scale and a zero point"
    )
    experts_only = pr.precision.experts_only
    stored = (
        ("the routed experts' " if experts_only else "")
        + f"projection weights in {weight_dtype}"
        + (f" with {scale} per group of {group} ({width:.3f} bytes each)" if group else "")
        + (f", the other projections in {dtype} (the checkpoint's)" if experts_only else "")
    )
    math_dtype = (
        f"GEMMs over {weight_dtype} weights at the {gemm_dtype} peak ({'W4A4' if gemm_dtype == 'fp4' else 'W8A8'})"
        if gemm_dtype
        else f"math in {dtype}" + (" (weights dequantized in the kernel)" if weight_dtype != dtype else "")
    )
    if gemm_dtype:
        math_dtype += f" ({gemm_classes(pr)})"
    elif pr.precision.expert_dtype:
        math_dtype = (
            f"the experts' GEMMs on MXFP8 activations at the {pr.precision.expert_dtype} peak (the "
            f"engine's own kernels, priced in the dense {pr.precision.moe_kernel} class), other math in "
            f"{dtype}"
        )
    out.append(
        f"storage: {stored}; embeddings, norms and routers in {dtype}; KV cache in {pr.kv_dtype}; "
        f"activations in {dtype}; {math_dtype}; no framework memory"
    )
    if pr.tp > 1:
        from costmodel.price.op import collective_curves

        found = collective_curves(pr.hw) if pr.model.active else None
        if pr.hw.crosses(pr.tp) and pr.hw.scale_out_bytes_per_s is not None:
            # across scale-up domains: NCCL's ring paced by the network port (costmodel.price.op._all_reduce)
            domain = pr.hw.domain
            how = (
                f"across {pr.tp // domain} scale-up domains of {domain}: NCCL's ring over all {pr.tp} devices, "
                f"2(t - 1)/t of the buffer at each device's network port "
                f"({pr.hw.scale_out_bytes_per_s.value / 1e9:g} GB/s one way, the ring's slowest hop), the fixed "
                f"latency of the in-domain curve and a ring of the domains"
            )
        elif found:
            how = (
                f"priced by the all-reduce curves fitted on {found[2]}'s published timings"
                + (f" (bus bandwidth x {found[1]:.2f}, the interconnect ratio)" if found[1] != 1 else "")
                + (
                    ": vLLM's own all-reduce as its table measures it at every size (its custom kernel, symmetric "
                    "memory or NCCL, as vLLM picks)"
                    if pr.all_reduce == "engine"
                    else ": vLLM's custom all-reduce up to 8 MiB, NCCL above"
                )
            )
        else:
            how = "each a ring over the datasheet interconnect"
        reduces = (
            "one all-reduce per layer (parallel block)" if reduces_per_layer(m) == 1 else "two all-reduces per layer"
        ) + f", {how}"
        out.append(
            f"tensor parallel over {pr.tp} device(s): query heads, FFN and vocabulary sharded; key/value heads "
            "sharded when t <= g, replicated when g < t"
            + ("; the MLA latent replicated" if m.mla else "")
            + (f"; {_experts_layout(m, pr)}" if m.moe else "")
            + f"; {reduces}"
        )
    elif pr.dp == 1:
        out.append("one device")
    if pr.pp > 1:
        out.append(
            f"pipeline parallel over {pr.pp} stages of {pr.tp} device(s), each a contiguous 1/{pr.pp} of the "
            "layers with their weights and KV cache; a stage sends its tokens' hidden states to the next (over "
            "the network where stages sit in different scale-up domains)"
        )
    if pr.dp > 1:
        held = (
            f"the routed experts spread over all {pr.dp * pr.tp} devices ({m.moe.experts // (pr.dp * pr.tp)} "
            "whole experts each)"
            if pr.ep
            else f"every routed expert's width sharded over all {pr.dp * pr.tp} devices (1/{pr.dp * pr.tp} of each: "
            "no expert parallel, as vLLM's data parallel without --enable-expert-parallel runs them)"
        )
        out.append(
            f"attention data parallel: {pr.dp} groups of {pr.tp} device(s), each with its own requests and "
            f"KV cache; {held}, which see every group's tokens (the groups step together, each with the "
            "same load): per expert layer an all-gather of the groups' hidden states and a reduce-scatter "
            "of the experts' output over the device's peers in the other groups"
        )
    return out

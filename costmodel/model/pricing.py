"""How a model is priced on a device (:class:`Pricing`): the layout over devices, the dtypes, the timing convention and the engine's kernel conventions, checked once."""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.core import checks
from costmodel.core.errors import CostModelError
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
from costmodel.hardware.mechanisms import LOW_PRECISION_GEMM, MOE_GEMM, WEIGHT_MATH
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.memory import (
    DEFAULT_GROUP,
    weight_width,
)
from costmodel.model.ops import (
    device_slice,
)
from costmodel.model.presets import ModelPreset
from costmodel.price.op import Conventions, KernelOp, Precision, price
from costmodel.price.origin import time_model


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
    # the serving engine whose own kernel classes price its ops where they were fitted and its served deployments
    # agree (costmodel.price.origin.with_engine); None: the device's classes (vLLM's kernels)
    kernel_engine: str | None = None

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
    kernel_engine: str | None = None,
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
    weight_dtype, group, own = _storage(m, dtype, weight_dtype)
    kv_dtype = choice("kv dtype", kv_dtype, DTYPES) if kv_dtype else dtype
    model = time_model(hw, timing, without, engine=kernel_engine, served=True)
    hw.peak(dtype)
    expert_parallel, ep_size = _layout(m, tp, expert_parallel, attention_dp, pipeline_parallel, expert_parallel_size)
    moe_kernel = choice("moe kernel", moe_kernel, MOE_KERNELS)
    if moe_kernel == "fused" and weight_dtype in ROUTED_FORMATS:
        moe_kernel = "routed"
    device_slice(m, tp, expert_parallel, attention_dp, ep_size)  # a layout the model cannot take: an error first
    all_reduce = choice("all-reduce", all_reduce, ALL_REDUCES)
    experts_only = own and m.quantization.scope == "experts"
    precision = _precision(hw, dtype, weight_dtype, group, kv_dtype, block_fp8_linear, mxfp4_activations, experts_only)
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
        kernel_engine,
    )


def _storage(m: ModelPreset, dtype: str, weight_dtype: str | None) -> tuple[str, int, bool]:
    """(weight dtype, group size, whether it is the checkpoint's own storage): the checkpoint's own where no other is
    asked for (its group size, and whether it quantizes only the routed experts), else the asked one with its
    default group."""
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
    return weight_dtype, group, own


def _layout(
    m: ModelPreset, tp: int, expert_parallel: bool, attention_dp: int, pipeline_parallel: int, expert_parallel_size
):
    """(expert parallel, expert-parallel group size) of a layout, checked against the model."""
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
    return expert_parallel, expert_parallel_size or 0


def _precision(
    hw, dtype, weight_dtype, group, kv_dtype, block_fp8_linear, mxfp4_activations, experts_only
) -> Precision:
    """Widths and kernel classes of the weights, the cache and the math (a checkpoint that stores only its routed
    experts so, ``experts_only``: every other projection at the activation width, its GEMMs in the activation
    dtype, Precision.outside_experts)."""
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
    if weight_dtype == "mxfp4" and mxfp4_activations == "mxfp8" and {"fp4", "fp8"} <= set(hw.peak_flops_per_s):
        # MXFP8 x MXFP4 experts: FP4 math's f8f6f4 MMA at the fp8 rate, in the engine's own kernels (TensorRT-LLM's),
        # priced as dense GEMMs, like weight-only quantized experts; the checkpoint's other layers stay bf16
        expert_dtype, moe = "fp8", "gemm"
    return Precision(
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

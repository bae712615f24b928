"""The one place an op's time is computed: :func:`price` (op, shape, device, conventions) -> :class:`OpTime`.

Every caller that needs a time calls it: a workload's prediction (:mod:`costmodel.attention.roofline`), a sweep
(:mod:`costmodel.attention.sweeps`), a model step (:mod:`costmodel.model.step`), the papers' reproductions
(:mod:`costmodel.papers.reproduce`), and the fits and checks against published timings (``costmodel.validation``).

With the device's fitted (or transferred) parameters for the op's kernel class, the time is the mechanisms of
:func:`costmodel.hardware.mechanisms.class_times`: ``fixed + body + second kernels``, the body ``max(compute, memory)``
or their sum where the class's kernel does one after the other. Without them it is the datasheet roofline of
the peak and bandwidth and the profile's launch overhead per kernel; with every mechanism off
(``without=("all",)``), the bare roofline, no launch cost. Numbers or numpy arrays, alike.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from costmodel.hardware.mechanisms import (
    MOE_GEMM,
    PROGRAM_CLASS,
    W4A16_MAX_WIDTH,
    W4A16_MOE,
    class_peak,
    class_times,
    efficiency_class,
    ring_all_reduce,
)
from costmodel.hardware.op_shapes import decode_shape
from costmodel.hardware.power import limited
from costmodel.hardware.shapes import fields, one_query
from costmodel.hardware.tiles import systolic_flops
from costmodel.price.bounds import check
from costmodel.price.origin import Resolved, TimeModel, time_model


@dataclass(frozen=True)
class KernelOp:
    """What an op is to a device: the program's op kind (``projection``, ``attention``, ``elementwise``,
    ``copy``, ``fused_decode``, ``fused_prefill``) and name, which pick its kernel class; the dtype it computes
    in; its FLOPs and bytes per call; the calls it makes (``launches``: a generate program's n steps pay n
    fixed costs); ``peak`` overrides the class's FLOP rate (a TPU's multi-pass f32 matmuls)."""

    kind: str
    name: str
    dtype: str
    flops: object
    bytes: object
    launches: object = 1
    peak: float | None = None
    kernel: str | None = None  # the efficiency class, where the caller knows it (a published table's rows)
    devices: int = 1  # a collective's group (kind ``all_reduce``)
    span: int = 0  # the devices a collective's group is spread over (every tp-th device of dp x tp); 0: devices
    all_reduce: str = "custom"  # how an all-reduce's implementation is picked (costmodel.core.vocab.ALL_REDUCES)
    # where (a bool, or one per entry of an array op) a weight-only 4-bit MoE call is small enough for the engine's
    # other kernel (costmodel.hardware.mechanisms.w4a16_small_call), priced as the dense GEMM of its weights
    small_call: object = False

    @property
    def cls(self) -> str | None:
        """The efficiency class of the kernel (None: an op kind no fitted class covers)."""
        if self.kernel is not None:
            return self.kernel
        return efficiency_class(self.kind, self.name) if self.kind in PROGRAM_CLASS else None


@dataclass(frozen=True)
class Conventions:
    """How ops are priced on a device: its time model (the parameters per class, the timing convention, the
    mechanisms on) and the overlap rule asked for (``max``, or ``sum`` for every class)."""

    model: TimeModel
    overlap: str = "max"

    @classmethod
    def of(cls, hw, timing: str = "graph", without=(), overlap: str = "max") -> Conventions:
        return cls(time_model(hw, timing, without), overlap)

    @classmethod
    def datasheet(cls, overlap: str = "max") -> Conventions:
        """The datasheet roofline with the profile's launch cost per kernel: no fitted parameters, whatever the
        device has."""
        return cls(TimeModel(None, "graph", frozenset({"fixed"})), overlap)

    @property
    def timing(self) -> str:
        return self.model.timing


@dataclass(frozen=True)
class OpTime:
    """One op's time on a device: compute and memory sides, the overhead (fixed costs and second kernels, for
    every launch), the total, and the kernel class whose fitted parameters priced it (None: the datasheet
    roofline). Numbers, or arrays for arrays of ops."""

    compute: object
    memory: object
    overhead: object
    time: object
    cls: str | None

    @property
    def bound(self) -> str:
        """Which side is longer (for one op; arrays: ``np.where(t.compute > t.memory, ...)``)."""
        return "compute" if self.compute > self.memory else "memory"


def _fitted(op: KernelOp, cls: str, params, shape, hw, conv: Conventions):
    t = class_times(
        cls,
        params,
        peak=op.peak or class_peak(hw, cls, op.dtype),
        bandwidth=hw.bandwidth,
        sms=hw.architecture.compute_units.value,
        timing=conv.timing,
        flops=op.flops,
        nbytes=op.bytes,
        shape=shape,
        on=conv.model.on,
        overlap=conv.overlap,
        kernels=hw.kernels,
    )
    return t.compute, t.memory, (t.fixed + t.units) * op.launches, t.body


#: The op kinds a matrix unit computes (the others run on the vector units).
SYSTOLIC_KINDS = ("projection", "attention", "fused_decode", "fused_prefill")


def price(op: KernelOp, shape, hw, conv: Conventions, params=None) -> OpTime:
    """The time of ``op`` (of typed ``shape``, :mod:`costmodel.hardware.shapes`) on ``hw`` under ``conv``.

    ``params`` prices the op with given class parameters instead of the device's (a fit trying them). A
    one-query prefill runs the decode kernel, as engines dispatch it (its decode parameters, its shape)."""
    if op.kind == "all_reduce":
        return _all_reduce(op, hw, conv)
    if op.kind in NCCL_COLLECTIVES:
        return _nccl_collective(op, hw, conv)
    if op.kind == "send":
        return _send(op, hw)
    small = np.asarray(op.small_call)
    if params is None and small.any():
        dense = price(dataclasses.replace(op, kernel=None, small_call=False), shape, hw, conv)
        if small.all():
            return dense
        own = price(dataclasses.replace(op, small_call=False), shape, hw, conv)
        return OpTime(
            *(
                np.where(small, a, b)
                for a, b in zip(
                    (dense.compute, dense.memory, dense.overhead, dense.time),
                    (own.compute, own.memory, own.overhead, own.time),
                )
            ),
            own.cls,
        )
    cls = op.cls
    trial = params is not None  # a fit trying parameters: its optimiser may wander under the bound
    resolved: Resolved | None = conv.model.resolved if conv.model.active else None
    if params is None and cls is not None and resolved is not None:
        params = resolved.get(cls)
    if params is not None and cls is not None:
        compute, memory, overhead, body = _fitted(op, cls, params, shape, hw, conv)
        decode = resolved.get("decode_attention") if resolved is not None else None
        one = one_query(shape) if cls == "prefill_attention" else np.asarray(False)
        if decode is not None and np.any(one):
            alone = _fitted(op, "decode_attention", decode, decode_shape(shape), hw, conv)
            compute, memory, overhead, body = (
                np.where(one, a, b) for a, b in zip(alone, (compute, memory, overhead, body))
            )
        if cls == "prefill_attention" and conv.model.write_in_call:
            from costmodel.price.transfer import held_write_s

            written = fields(shape).get("write_bytes") if shape is not None else None
            gemm = resolved.get("gemm") if resolved is not None else None
            held = held_write_s(params, written, hw, gemm, conv.timing, conv.model.on)
            overhead = overhead + np.where(one, 0.0, held)
        body = limited(op, hw, body)
        if not trial:
            check(op, shape, hw, body + overhead)
        return _finish(compute, memory, overhead, body + overhead, cls)
    # the datasheet roofline: the dtype's peak (the vector peak for elementwise ops), the profile's bandwidth, and
    # the profile's launch cost per kernel unless the fixed-cost mechanism is off (--without all: the bare roofline);
    # on a systolic matrix unit (a two-dimensional matrix tile) its products in whole passes of the array (tiles)
    peak = op.peak or (hw.vector_peak(op.dtype) if op.kind == "elementwise" else hw.peak(op.dtype))
    flops = op.flops
    if "tiles" in conv.model.on and op.kind in SYSTOLIC_KINDS and hw.systolic_tile is not None and shape is not None:
        flops = systolic_flops(flops, fields(shape), hw.systolic_tile)
    compute = flops / peak
    memory = op.bytes / hw.bandwidth
    launch = hw.launch_overhead * op.launches if "fixed" in conv.model.on else 0.0
    body = limited(op, hw, compute + memory if conv.overlap == "sum" else np.maximum(compute, memory))
    check(op, shape, hw, body + launch)
    return _finish(compute, memory, launch, body + launch, None)


#: The largest message vLLM's custom all-reduce takes (vllm/distributed/device_communicators/custom_all_reduce.py,
#: max_size 8 MiB); larger ones go to NCCL. SGLang runs the same kernel.
CUSTOM_ALL_REDUCE_MAX_BYTES = 8 << 20


#: NCCL's collectives besides the all-reduce (KernelOp kinds; ``bytes``: the buffer NCCL names, ``devices``: the
#: group): each GPU moves (n - 1) / n of it.
NCCL_COLLECTIVES = ("all_gather", "reduce_scatter", "all_to_all")


def measured_collectives(hw):
    """(collectives, bandwidth scale, where from) of ``hw``: its own fitted curves, else those of the device it
    borrows parameters from with the bus bandwidths scaled by the datasheet interconnect ratio; None where
    neither exists."""
    if hw.collectives is not None:
        return hw.collectives, 1.0, hw.id
    from costmodel.price.origin import reference_for

    ref = reference_for(hw)
    if (
        ref is None
        or ref.collectives is None
        or hw.interconnect_bytes_per_s is None
        or ref.interconnect_bytes_per_s is None
    ):
        return None
    return ref.collectives, hw.interconnect_bytes_per_s.value / ref.interconnect_bytes_per_s.value, ref.id


def collective_curves(hw):
    """(all-reduce curves, bandwidth scale, where from) of ``hw`` (:func:`measured_collectives`), or None."""
    found = measured_collectives(hw)
    return (found[0].curves, found[1], found[2]) if found is not None else None


def _curve(by_n: dict, devices: int):
    """The curve fitted on the fewest GPUs that are at least ``devices`` (the most GPUs measured, past them)."""
    return by_n[min((n for n in by_n if n >= devices), default=max(by_n))]


def _all_reduce(op: KernelOp, hw, conv: Conventions) -> OpTime:
    """A tensor-parallel all-reduce; over more devices than one scale-up domain joins (``scale_up_devices``:
    a node), as NCCL runs it across nodes (engines turn their custom all-reduce off when a group spans nodes):

    - its bytes as NCCL's ring moves them: every device sends and receives 2(t - 1) / t of the buffer, and the
      ring's hops between domains go over a device's network port (``scale_out_bytes_per_s``), the slowest hop,
      which paces the whole ring (the in-domain hops instead, on a device whose port is the faster);
      :func:`_nccl_collective` prices all-gathers and all-to-alls across domains the same way, and aiconfigurator a
      cross-node NCCL collective (its 8-GPU curve scaled by intra- over inter-node bandwidth);
    - its fixed latency hierarchical, as NCCL's tree algorithm pays it on small buffers: the in-domain curve's
      latency and a ring between the domains (``scale_out_latency_s`` per step), not a step per device.

    Checked on the 46 SGLang DeepSeek-R1 deployments of tensor parallel 16 over two H100 nodes: their TTFT grows by
    about 87 us per prompt token (1,024 to 8,192 tokens at 2-4 clients): 93-99 us predicted with the ring, 36-38 us
    with a hierarchical all-reduce (the buffer inside each node, each device's eighth of it over its port)."""
    from costmodel.core.errors import CostModelError

    if not hw.crosses(op.devices):
        return _all_reduce_in_domain(op, hw, conv)
    domain = hw.domain
    if op.devices % domain:
        raise CostModelError(
            f"tensor parallel over {op.devices} x {hw.id} crosses its {domain}-device scale-up "
            f"domain and is not a whole number of {domain}-device domains"
        )
    bandwidth, step = hw.network(f"tensor parallel over {op.devices} devices")
    inner = _all_reduce_in_domain(dataclasses.replace(op, devices=domain), hw, conv, cross_node=True)
    # the slowest hop paces the ring: the network port, or the in-domain links where those are slower
    transfer = np.maximum(ring_all_reduce(np.asarray(op.bytes, float), op.devices, bandwidth, step)[0], inner.memory)
    latency = inner.overhead + ring_all_reduce(0.0, op.devices // domain, bandwidth, step)[1] * op.launches
    return _finish(0.0, transfer, latency, transfer + latency, None)


def _all_reduce_in_domain(op: KernelOp, hw, conv: Conventions, cross_node: bool = False) -> OpTime:
    """A tensor-parallel all-reduce inside one scale-up domain: the fitted curve of the implementation an engine
    picks (vLLM's custom all-reduce up to :data:`CUSTOM_ALL_REDUCE_MAX_BYTES`, in a CUDA graph under graph
    timing; NCCL above, and always where the group spans nodes: ``cross_node``; under ``op.all_reduce ==
    "engine"`` the measured curve of vLLM's own entry point at every size, which is what its table times) where
    the time model is fitted; else a ring over the profile's interconnect
    (:func:`costmodel.hardware.mechanisms.ring_all_reduce`). None on one device."""
    from costmodel.core.errors import CostModelError

    if op.devices == 1:
        return _finish(0.0, 0.0, 0.0, 0.0, None)
    found = collective_curves(hw) if conv.model.active else None
    if found is not None:
        curves, scale, _ = found
        on_custom = (np.asarray(op.bytes, float) <= CUSTOM_ALL_REDUCE_MAX_BYTES) | (op.all_reduce == "engine")
        custom = "nccl" if cross_node else "custom_graph" if conv.timing == "graph" else "custom_eager"
        t = op.devices
        volume = 2 * (t - 1) / t * np.asarray(op.bytes, float)
        parts = []
        scale = scale * hw.group_share(t)  # a mesh's group moves over its own links only
        for impl in (custom, "nccl"):
            parts.append(_curve(curves.get(impl) or curves["nccl"], t).parts(volume, scale))
        transfer = np.where(on_custom, parts[0][0], parts[1][0])
        latency = np.where(on_custom, parts[0][1], parts[1][1]) * op.launches
        return _finish(0.0, transfer, latency, transfer + latency, None)
    if hw.interconnect_bytes_per_s is None or hw.interconnect_latency_s is None:
        raise CostModelError(f"{hw.id} has no interconnect bandwidth and latency: tensor parallelism needs both")
    transfer, latency = ring_all_reduce(
        op.bytes, op.devices, hw.group_bandwidth(op.devices), hw.interconnect_latency_s.value
    )
    return _finish(0.0, transfer, latency * op.launches, transfer + latency * op.launches, None)


@dataclass(frozen=True)
class Precision:
    """How a program's tensors are stored and its math done: bytes per element of the activations, of the
    projection weights a checkpoint stores (``P_*``; group scales included) and of the KV cache; the math's
    dtype; and, where GEMMs over stored weights run at the weights' precision (W8A8), their dtype and kernel
    class (an fp8 GEMM with one scale per tensor or per 128 x 128 block); ``moe_kernel``, the class of a mixture of
    experts' grouped GEMMs where it is not the one :data:`costmodel.hardware.mechanisms.MOE_GEMM` pairs with ``gemm_kernel``
    (an engine whose dense layers run another kernel than its experts do); ``expert_dtype``, the math of the experts'
    GEMMs where only they run at low precision (MXFP4 experts with MXFP8 activations: the dense layers' GEMMs stay at
    ``dtype``), in the class ``moe_kernel``; ``dense_weight``, the width of the projection weights outside the
    routed experts where a checkpoint stores only the experts in ``weight``'s format (gpt-oss's MXFP4 experts, every
    other projection in bf16: :meth:`outside_experts`)."""

    act: float
    weight: float
    kv: float
    dtype: str = "bf16"
    gemm_dtype: str | None = None
    gemm_kernel: str | None = None
    moe_kernel: str | None = None
    expert_dtype: str | None = None
    dense_weight: float | None = None

    @classmethod
    def of(cls, width, dtype: str = "bf16") -> Precision:
        """Every tensor ``width`` bytes per element (or ``width`` itself where it is a Precision)."""
        return width if isinstance(width, Precision) else cls(width, width, width, dtype)

    @property
    def experts_only(self) -> bool:
        """Whether the checkpoint stores only its routed experts in the weights' format (``dense_weight`` set)."""
        return self.dense_weight is not None

    def outside_experts(self) -> Precision:
        """The precision of the ops outside the routed experts: the same, except where the checkpoint stores only
        its experts in the weights' format (``dense_weight``): there the other projections' weights at that width,
        their GEMMs in the activation dtype."""
        if not self.experts_only:
            return self
        return dataclasses.replace(self, weight=self.dense_weight, gemm_dtype=None, gemm_kernel=None, dense_weight=None)

    def experts_class(self, weighted: bool = True) -> str | None:
        """The kernel class of a mixture of experts' grouped GEMMs: the engine's MoE kernel of the weights' format
        where their GEMMs run at a low precision (``moe_kernel``, else :data:`costmodel.hardware.mechanisms.MOE_GEMM`'s pair
        of the dense class), the bf16 one otherwise (``weighted`` False: a product that reads no weights, priced in
        it); for weight-only 4-bit experts the class of kernels that dequantize them in their main loop
        (:data:`costmodel.hardware.mechanisms.W4A16_MOE`, a dense bf16 GEMM where the device has no fit of it); None for
        other weight-only quantized experts, priced as dense GEMMs."""
        fast = weighted and (self.expert_dtype or self.gemm_dtype) is not None
        if not (fast or self.weight >= self.act):
            return W4A16_MOE if weighted and self.weight <= W4A16_MAX_WIDTH else None
        return (self.moe_kernel if fast else None) or MOE_GEMM[(self.gemm_kernel if fast else None) or "gemm"]

    def bytes(self, elements, weights=0, cache=0):
        """Bytes of ``elements``, of which ``weights`` are stored projection weights and ``cache`` KV cache."""
        if self.act == self.weight == self.kv:
            return elements * self.act
        return (elements - weights - cache) * self.act + weights * self.weight + cache * self.kv


def _nccl_collective(op: KernelOp, hw, conv: Conventions) -> OpTime:
    """An all-gather, reduce-scatter or all-to-all over ``op.devices`` GPUs: its fitted NCCL curve (the device's, or
    a measured device's with the bus bandwidth scaled by the interconnect ratio) where the time model is fitted;
    else a ring over the datasheet interconnect, (n - 1) / n of the buffer each way in n - 1 steps. A group spread
    over more devices than one scale-up domain (``op.span``) is a ring over each device's network port."""
    from costmodel.core.errors import CostModelError

    if op.devices == 1:
        return _finish(0.0, 0.0, 0.0, 0.0, None)
    t = op.devices
    volume = (t - 1) / t * np.asarray(op.bytes, float)
    if hw.crosses(max(op.span, t)):
        # the group crosses domains: a ring whose steps between domains go over each device's network port,
        # which bounds it (every device sends and receives (n - 1) / n of the buffer)
        bandwidth, step = hw.network(f"a {op.kind} over {max(op.span, t)} devices")
        transfer = volume / bandwidth
        latency = (t - 1) * step * op.launches
        return _finish(0.0, transfer, latency, transfer + latency, None)
    found = measured_collectives(hw) if conv.model.active else None
    if found is not None and found[0].ops.get(op.kind):
        transfer, latency = _curve(found[0].ops[op.kind], t).parts(volume, found[1] * hw.group_share(t))
        latency = latency * op.launches
        return _finish(0.0, transfer, latency, transfer + latency, None)
    if hw.interconnect_bytes_per_s is None or hw.interconnect_latency_s is None:
        raise CostModelError(f"{hw.id} has no interconnect bandwidth and latency: a {op.kind} needs both")
    transfer = volume / hw.group_bandwidth(t)
    latency = (t - 1) * hw.interconnect_latency_s.value * op.launches
    return _finish(0.0, transfer, latency, transfer + latency, None)


def _send(op: KernelOp, hw) -> OpTime:
    """A point-to-point send of ``op.bytes`` (pipeline stages): one latency and the bytes at the one-way rate of the
    device's interconnect, or of its network port where the pair spans more than one scale-up domain."""
    from costmodel.core.errors import CostModelError

    if hw.crosses(op.span):
        bw, lat = hw.network("a send between pipeline stages")
    elif hw.interconnect_bytes_per_s is None or hw.interconnect_latency_s is None:
        raise CostModelError(f"{hw.id} has no interconnect bandwidth and latency: pipeline parallel needs both")
    else:
        bw, lat = hw.group_bandwidth(2), hw.interconnect_latency_s.value
    transfer = np.asarray(op.bytes, float) / bw
    return _finish(0.0, transfer, lat * op.launches, transfer + lat * op.launches, None)


def _finish(compute, memory, overhead, time, cls) -> OpTime:
    """Plain floats for one op, float arrays for many."""
    values = [np.asarray(x, float) for x in (compute, memory, overhead, time)]
    if all(v.ndim == 0 for v in values):
        values = [float(v) for v in values]
    return OpTime(*values, cls)


__all__ = ["KernelOp", "Conventions", "OpTime", "Precision", "NCCL_COLLECTIVES", "price"]

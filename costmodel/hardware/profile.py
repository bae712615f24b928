"""The hardware profile schema: one YAML file per device, validated by pydantic (found by
:mod:`costmodel.hardware.catalog`).

Every number carries its source (a key of the file's ``sources``) and a confidence. Field names carry
their units. Measured (calibrated) profiles add a ``measured`` block saying on what, when and how.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Literal, get_args

import numpy as np
from pydantic import Field, field_validator, model_validator

from costmodel.core.errors import CostModelError
from costmodel.core.vocab import Mechanism, PeakDtype, Timing
from costmodel.hardware.kernels import SFU_PER_SM_CLOCK, EfficiencyClassName, KernelFacts, Tile
from costmodel.hardware.power import Power
from costmodel.hardware.units import (
    Count,
    Fraction,
    Seconds,
    Sourced,
    SourcedBandwidth,
    SourcedBytes,
    SourcedClock,
    SourcedCost,
    SourcedCount,
    SourcedFlops,
    Strict,
    bounded,
)


class Architecture(Strict):
    """Facts about the chip that the efficiency mechanisms scale with: its generation, the number of
    streaming multiprocessors (NVIDIA SMs, AMD CUs, TPU TensorCores) and the boost clock, and the facts of the
    kernels its libraries run."""

    generation: str = Field(pattern=r"^[a-z0-9_]+$")
    compute_units: SourcedCount
    clock_hz: SourcedClock | None = None  # not published for every device
    #: special-function results (exp2, the online softmax's exponential) per SM per clock; None: NVIDIA's
    #: :data:`SFU_PER_SM_CLOCK`
    sfu_per_sm_clock: SourcedCount | None = None
    kernels: KernelFacts = KernelFacts()

    @property
    def sfu_rate(self) -> int:
        """Special-function results per SM per clock."""
        return int(self.sfu_per_sm_clock.value) if self.sfu_per_sm_clock is not None else SFU_PER_SM_CLOCK


class ClassEfficiency(Strict):
    """The fitted mechanisms of one op class (:mod:`costmodel.hardware.mechanisms` says what each one does).

    ``fixed_s`` is the cost of one call under each timing convention; ``compute_efficiency`` the
    fraction of the dense peak a large kernel reaches; ``small_tile_exponent`` how much less a smaller
    output tile reaches; ``tile_k_overhead`` a tile's prologue and epilogue in units of reduction steps; ``pack_passes`` the
    extra passes a CPU GEMM makes over its K x N operand to pack it (M > 1; a one-row product runs GEMV); the achieved bandwidth is ``bandwidth_ceiling * peak / (1 +
    (bandwidth_half_bytes / bytes) ** bandwidth_exponent)``; ``unit_sm_s`` is the SM time of one decode
    work unit (a sequence and a key/value head) and ``split_s`` the split-KV combine kernel; ``split_kv`` says
    when the decode kernel splits a context (``always``, or only when query heads share a key/value head:
    ``grouped``), ``unsplit_sm_bandwidth`` the bytes per second one SM streams when it walks an unsplit
    context alone and ``group_copy_s`` the copies of a grouped kernel's packed queries; ``combine_split_s`` the SM
    time a split-KV combine spends on each split it reads, one after another (FlashAttention-2's:
    :func:`costmodel.hardware.mechanisms.fa2_splits`);
    ``cache_write_ceiling`` is the fraction of the datasheet bandwidth at which a prefill's call writes the
    prompt's keys and values into the cache (None: the engine writes them outside the attention call);
    ``score_s`` is the device time of one attention score of a prefill (online softmax) and ``tile_s`` the
    SM time of a prefill query tile's prologue and epilogue; ``quantize_input`` says whether a low-precision
    linear layer quantizes its activations in a kernel of its own before the GEMM; ``overlap`` says whether the
    kernel's compute hides its memory traffic (``max``, a GPU's many warps in flight) or the two follow each other
    (``sum``: a CPU core that streams a block and then computes on it)."""

    fixed_s: dict[Timing, Seconds] = Field(default_factory=dict)
    compute_efficiency: Fraction = 1.0
    small_tile_exponent: bounded(0.0, 2.0) = 0.0
    tile_k_overhead: bounded(0.0, 1e6) = 0.0  # reduction steps
    pack_passes: bounded(0.0, 16.0) = 0.0  # extra passes over a GEMM's K x N operand when M > 1
    bandwidth_ceiling: Fraction = 1.0
    bandwidth_half_bytes: bounded(0.0, 1e15) = 0.0
    bandwidth_exponent: Fraction = 1.0  # <= 1: time never falls as bytes grow
    unit_sm_s: Seconds = 0.0
    split_s: Seconds = 0.0
    split_kv: Literal["always", "grouped"] = "always"
    unsplit_sm_bandwidth: bounded(0.0, 1e16) = 0.0  # 0: no unsplit contexts; else at least a megabyte/s
    group_copy_s: Seconds = 0.0
    combine_split_s: Seconds = 0.0  # per split a combine reads in turn (0: its splits read at once, or none)
    cache_write_ceiling: Fraction | None = None  # None: the prefill call writes no cache
    pack_gqa: bool = Field(False, strict=True)  # a prefill tile holds the query heads of a group (FlashAttention-3)
    score_s: Seconds = 0.0  # device time per attention score (softmax)
    tile_s: Seconds = 0.0  # SM time of a prefill query tile's prologue and epilogue
    # a low-precision linear layer quantizes its activations in a kernel of its own before the GEMM
    quantize_input: bool = Field(False, strict=True)
    overlap: Literal["max", "sum"] = "max"  # compute and memory time overlap (max) or add up (sum)
    fitted: tuple[str, ...] = ()  # the names of the parameters fitted to data (the rest are defaults)
    #: why a fitted value sits at a bound of its search (costmodel.validation.fit.BOUNDS): a sign, explained
    at_bound: dict[str, str] = Field(default_factory=dict)

    @field_validator("unsplit_sm_bandwidth")
    @classmethod
    def _off_or_a_rate(cls, value: float) -> float:
        if 0 < value < 1e6:
            raise ValueError("must be 0 (no unsplit contexts) or a bandwidth of at least 1e6 bytes per second")
        return value


Percent = bounded(0.0, 1e6)


class FitError(Strict):
    n: Annotated[int, Field(strict=True, ge=0)]
    median_abs_error_pct: Percent
    p90_abs_error_pct: Percent


class Efficiency(Strict):
    """Fitted efficiency parameters: on what data, how, and how well they fit."""

    data: tuple[str, ...] = Field(min_length=1)  # source, commit, GPU and table of every fitted set
    method: str
    error: dict[str, FitError] = Field(default_factory=dict)  # per "op_class/timing", on the fitted data
    classes: dict[EfficiencyClassName, ClassEfficiency] = Field(min_length=1)
    mechanisms: tuple[Mechanism, ...] = get_args(Mechanism)  # those that apply to this device

    @property
    def engines(self) -> tuple[str, ...]:
        """The serving engines (and versions) whose kernels the fitted tables timed, read from the tables' file names
        (``h100_sxm_vllm_0.19.0_gemm.csv``: vLLM 0.19.0)."""
        import re

        from costmodel.core.vocab import ENGINE_TITLES

        found = {
            f"{ENGINE_TITLES[m.group(1)]} {m.group(2)}"
            for d in self.data
            for m in [re.search(r"_(vllm|sglang|trtllm)_(\d+(?:\.\d+)*)_", d)]
            if m
        }
        return tuple(sorted(found))

    @property
    def parameters(self) -> int:
        """The number of fitted numbers (each timing's fixed cost counts once)."""
        return sum(len(c.fitted) + len(c.fixed_s) - ("fixed" in c.fitted) for c in self.classes.values())


class EngineKernels(Strict):
    """One serving engine's own kernel classes on a device, fitted on that engine's timed kernels (the classes not
    here run the device's ``efficiency`` classes, vLLM's): their data, method and in-sample error."""

    data: tuple[str, ...] = Field(min_length=1)
    method: str
    error: dict[str, FitError] = Field(default_factory=dict)
    classes: dict[EfficiencyClassName, ClassEfficiency] = Field(min_length=1)
    # the classes a served prediction of the engine runs (the others only price its kernels one by one): those the
    # engine's measured deployments do not contradict (docs/validation.md: each class on its own)
    served: tuple[EfficiencyClassName, ...] = ()
    served_why: str = ""

    @model_validator(mode="after")
    def _served_are_fitted(self) -> EngineKernels:
        if not set(self.served) <= set(self.classes):
            raise ValueError(f"served classes {sorted(set(self.served) - set(self.classes))} are not fitted")
        return self


class CollectiveCurve(Strict):
    """``t(S) = latency_s + V / bus_bytes_per_s`` for a collective moving ``V`` bytes per GPU (an all-reduce of S
    bytes over n GPUs: V = 2 (n - 1) / n S), and where a second line is given, the faster of the two: NCCL's tuner
    picks per size the protocol and algorithm its own latency-plus-bandwidth model says is fastest (a low-latency
    one for small buffers, a bandwidth one for large), and vLLM's custom all-reduce runs one-shot for small buffers
    and two-shot for large."""

    latency_s: bounded(0.0, 1.0)
    bus_bytes_per_s: bounded(1e6, 1e16)
    large_latency_s: bounded(0.0, 1.0) | None = None  # the second line: more latency, more bandwidth
    large_bus_bytes_per_s: bounded(1e6, 1e16) | None = None

    @model_validator(mode="after")
    def _both_or_neither(self):
        if (self.large_latency_s is None) != (self.large_bus_bytes_per_s is None):
            raise ValueError("large_latency_s and large_bus_bytes_per_s come together (the second line) or not at all")
        if self.large_latency_s is not None and not (
            self.large_latency_s > self.latency_s and self.large_bus_bytes_per_s > self.bus_bytes_per_s
        ):
            raise ValueError(
                "the second line (the large buffers') needs more latency and more bandwidth than the "
                "first, or one line is the faster at every size"
            )
        return self

    def parts(self, volume, scale: float = 1.0):
        """(transfer, latency) seconds of moving ``volume`` bytes per GPU (an array gives arrays) on the faster
        line, the bus bandwidths times ``scale`` (a device that borrows the curve)."""

        volume = np.asarray(volume, float)
        transfer, latency = volume / (self.bus_bytes_per_s * scale), np.full(volume.shape, self.latency_s)
        if self.large_latency_s is not None:
            large = volume / (self.large_bus_bytes_per_s * scale)
            faster = large + self.large_latency_s < transfer + latency
            transfer = np.where(faster, large, transfer)
            latency = np.where(faster, self.large_latency_s, latency)
        return (transfer, latency) if volume.ndim else (float(transfer), float(latency))


class Collectives(Strict):
    """Collective curves fitted on published timings: the all-reduce per implementation (``nccl``,
    ``custom_graph``, ``custom_eager``: vLLM's custom all-reduce in and out of a CUDA graph) and GPU count, and
    NCCL's all-gather, reduce-scatter and all-to-all per GPU count (``ops``; the curve's volume is (n - 1) / n of
    the buffer, not the all-reduce's 2 (n - 1) / n)."""

    data: tuple[str, ...] = Field(min_length=1)
    method: str
    curves: dict[Literal["nccl", "custom_graph", "custom_eager"], dict[int, CollectiveCurve]] = Field(min_length=1)
    ops: dict[Literal["all_gather", "reduce_scatter", "all_to_all"], dict[int, CollectiveCurve]] = Field(
        default_factory=dict
    )
    error: dict[str, FitError] = Field(default_factory=dict)  # per "implementation/GPUs" and "collective/GPUs"


class Noise(Strict):
    """How quiet the machine was while a profile was measured."""

    load_average: bounded(0.0, 1e6) | None
    cores: Count
    threads: Count
    median_spread: bounded(0.0, 1e6) | None
    speed_since_calibration: bounded(0.0, 1e6, low_open=True) | None = (
        None  # read bandwidth now over the calibrated profile's
    )
    busy: bool
    warning: str | None = None


class Measured(Strict):
    """How a measured (calibrated) profile was obtained."""

    device: str
    date: str
    torch_version: str
    method: str


class HardwareProfile(Strict):
    """One accelerator: dense peak FLOP/s per dtype, memory bandwidth and capacity, on-chip memory."""

    id: str = Field(pattern=r"^[a-z0-9_]+$")
    aliases: tuple[str, ...] = ()
    device_names: tuple[str, ...] = ()  # exactly as the driver reports them (see device_name_key)
    name: str
    vendor: str
    kind: Literal["gpu", "tpu", "cpu"]
    peak_flops_per_s: dict[PeakDtype, SourcedFlops] = Field(min_length=1)
    memory_bandwidth_bytes_per_s: SourcedBandwidth
    memory_capacity_bytes: SourcedBytes
    # the memory the driver reports as the device's total (nvidia-smi, torch's total_memory): what a serving engine
    # takes its fractions of; None: the datasheet capacity
    device_memory_bytes: SourcedBytes | None = None
    on_chip_memory_bytes: SourcedBytes
    on_chip_memory_kind: str
    matrix_tile: Tile | None = None
    launch_overhead_s: SourcedCost
    interconnect_bytes_per_s: SourcedBandwidth | None = None  # total over both directions, as vendors quote it
    interconnect_latency_s: SourcedCost | None = None
    interconnect: str | None = None
    scale_up_devices: SourcedCount | None = None  # devices one interconnect domain joins (a node, an NVL72 rack)
    # how the domain's devices are joined: through switches (NVSwitch), every device reaching the whole interconnect
    # bandwidth whatever the group, or point to point (``mesh``: each device linked to each other one of its domain,
    # the interconnect bandwidth the sum of those links), a group of n reaching only its n - 1 links (group_share)
    interconnect_topology: Literal["switched", "mesh"] = "switched"
    scale_out_bytes_per_s: SourcedBandwidth | None = None  # one device's network link out of its domain, one way
    scale_out_latency_s: SourcedCost | None = None  # one step of a collective over the network
    measured: Measured | None = None
    architecture: Architecture | None = None
    efficiency: Efficiency | None = None
    # other serving engines' own kernel classes (sglang, trtllm), where their kernels were timed on this device
    engine_kernels: dict[Literal["sglang", "trtllm"], EngineKernels] = Field(default_factory=dict)
    collectives: Collectives | None = None
    noise: Noise | None = None  # measured profiles: how quiet the machine was
    power: Power | None = None  # board power, idle power, memory technology, process (costmodel.hardware.power)
    # the board's power limit as set (nvidia-smi -pl): None, the board's own; a lower one throttles kernels
    power_limit_w: bounded(1.0, 1e5) | None = None
    sources: dict[str, str] = Field(min_length=1)
    notes: str = ""

    @model_validator(mode="after")
    def _efficiency_needs_architecture(self) -> HardwareProfile:
        if self.efficiency is not None and self.architecture is None:
            raise ValueError(
                "efficiency: fitted parameters need architecture.compute_units (the tile, wave and "
                "work-unit mechanisms count in them); add the architecture block"
            )
        return self

    @model_validator(mode="after")
    def _limit_needs_power(self) -> HardwareProfile:
        if self.power_limit_w is not None:
            if self.power is None:
                raise ValueError("power_limit_w needs the power block (board_w) it lowers")
            if self.power_limit_w > self.power.board_w.value:
                raise ValueError(
                    f"power_limit_w {self.power_limit_w:g} W is above the board's limit {self.power.board_w.value:g} W"
                )
        return self

    @model_validator(mode="after")
    def _network_needs_a_domain(self) -> HardwareProfile:
        if (
            self.scale_out_bytes_per_s is not None or self.scale_out_latency_s is not None
        ) and self.scale_up_devices is None:
            raise ValueError(
                "scale_out_bytes_per_s and scale_out_latency_s describe the network out of a scale-up "
                "domain: give scale_up_devices (the devices one domain joins) too"
            )
        return self

    @model_validator(mode="after")
    def _sources_resolve(self) -> HardwareProfile:
        for field, item in self.sourced_items():
            if item.source not in self.sources:
                raise ValueError(f"{field}: source {item.source!r} is not a key of sources ({', '.join(self.sources)})")
        return self

    def sourced_items(self) -> Iterator[tuple[str, Sourced | Tile]]:
        """Every sourced number (and the tile), with its field name."""
        for dtype, item in self.peak_flops_per_s.items():
            yield f"peak_flops_per_s.{dtype}", item
        if self.architecture is not None:
            yield "architecture.compute_units", self.architecture.compute_units
            if self.architecture.clock_hz is not None:
                yield "architecture.clock_hz", self.architecture.clock_hz
            if self.architecture.sfu_per_sm_clock is not None:
                yield "architecture.sfu_per_sm_clock", self.architecture.sfu_per_sm_clock
        for name in (
            "memory_bandwidth_bytes_per_s",
            "memory_capacity_bytes",
            "device_memory_bytes",
            "on_chip_memory_bytes",
            "launch_overhead_s",
            "interconnect_bytes_per_s",
            "interconnect_latency_s",
            "scale_up_devices",
            "scale_out_bytes_per_s",
            "scale_out_latency_s",
            "matrix_tile",
        ):
            item = getattr(self, name)
            if item is not None:
                yield name, item
        if self.power is not None:
            yield "power.board_w", self.power.board_w
            if self.power.idle_w is not None:
                yield "power.idle_w", self.power.idle_w

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; an error naming the dtypes this device has otherwise."""
        try:
            return self.peak_flops_per_s[dtype].value
        except KeyError:
            raise CostModelError(
                f"{self.id} has no peak for dtype {dtype}; it has {', '.join(self.peak_flops_per_s)}"
            ) from None

    def vector_peak(self, dtype: str) -> float:
        """Peak for elementwise work: the non-tensor fp32 rate where known, else the dtype's peak."""
        return self.peak_flops_per_s["fp32"].value if "fp32" in self.peak_flops_per_s else self.peak(dtype)

    @property
    def kernels(self) -> KernelFacts:
        """The kernel facts the mechanisms count in (the defaults where the profile states none)."""
        return self.architecture.kernels if self.architecture is not None else KernelFacts()

    @property
    def systolic_tile(self) -> tuple[int, int] | None:
        """(rows, columns) of the stationary operand of a systolic matrix unit (a TPU's MXU): a profile's
        two-dimensional matrix tile; None for a three-dimensional instruction shape (NVIDIA's mma m16n8k16, whose
        GPUs' tiles the GEMM mechanisms count) or none."""
        shape = self.matrix_tile.shape if self.matrix_tile is not None else ()
        return (shape[0], shape[1]) if len(shape) == 2 else None

    @property
    def domain(self) -> int | None:
        """Devices one scale-up domain joins (None: the profile states none)."""
        return self.scale_up_devices.value if self.scale_up_devices is not None else None

    def crosses(self, devices) -> bool:
        """Whether a group of ``devices`` spans more than one scale-up domain (never where the profile states none)."""
        return self.domain is not None and devices > self.domain

    def group_share(self, devices: int) -> float:
        """The share of the interconnect bandwidth a group of ``devices`` inside one domain moves its data over: all
        of it through switches; on a point-to-point mesh the links to the group's other devices, n - 1 of the
        domain's size - 1 (two devices of an eight-GPU MI300X baseboard share one of seven links)."""
        if self.interconnect_topology != "mesh" or self.domain is None or self.domain < 2:
            return 1.0
        return min(1.0, max(devices - 1, 1) / (self.domain - 1))

    def group_bandwidth(self, devices: int) -> float:
        """Bytes per second one way that one device of a group of ``devices`` inside one domain sends over the
        interconnect: half the datasheet's two-way figure, at the group's share of it (:meth:`group_share`)."""
        return self.interconnect_bytes_per_s.value / 2 * self.group_share(devices)

    def network(self, what: str) -> tuple[float, float]:
        """(bytes per second one way, latency per step) of one device's network port, for ``what`` crossing the
        scale-up domain; an error naming the fields where the profile states them not."""
        if self.scale_out_bytes_per_s is None or self.scale_out_latency_s is None:
            raise CostModelError(
                f"{what} crosses the {self.domain}-device scale-up domain of {self.id} and needs the "
                "network bandwidth and latency per device (scale_out_bytes_per_s, "
                f"scale_out_latency_s), which {self.id} does not state"
            )
        return self.scale_out_bytes_per_s.value, self.scale_out_latency_s.value

    @property
    def bandwidth(self) -> float:
        return self.memory_bandwidth_bytes_per_s.value

    @property
    def capacity(self) -> float:
        return self.memory_capacity_bytes.value

    @property
    def engine_memory(self) -> float:
        """The device memory a serving engine sizes its cache from: the driver's total where the profile gives it,
        else the datasheet capacity."""
        return (self.device_memory_bytes or self.memory_capacity_bytes).value

    @property
    def launch_overhead(self) -> float:
        return self.launch_overhead_s.value

    def ridge_point(self, dtype: str) -> float:
        """Arithmetic intensity (FLOPs/byte) where the compute and memory roofs meet."""
        return self.peak(dtype) / self.bandwidth

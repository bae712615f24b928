"""What a whole-model prediction reports: per-op and per-phase times, shapes, totals and memory (frozen, typed)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from costmodel.core.reports import DeviceSummary, Report
from costmodel.model.pricing import Pricing
from costmodel.price.bands import Band


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
    # the kernels' energy: running power over their time and their FLOPs' and bytes' energy, capped at the board's
    # limit (costmodel.hardware.power); None where the device states no power facts
    energy_j: float | None = None


class PhaseTime(Report):
    time_s: float
    energy_j: float | None = None  # every op's, on one device
    power_w: float | None = None  # one device's mean over the phase
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

"""The one base of every report costmodel returns: frozen, its parts too (a prediction is a record of what
was priced, not a workspace), so ``str()`` and ``model_dump()`` always describe what was computed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Report(BaseModel):
    """A frozen report or part of one: ``model_dump()`` is its JSON; a report's ``str()`` is its table."""

    model_config = ConfigDict(frozen=True)


class DeviceSummary(Report):
    """The device as every report states it: its rates for the report's dtype, what its time model is
    (``efficiency``: fitted or transferred parameters and the timing convention; None: the datasheet roofline
    with the profile's launch overhead), and how many of it run the model (``devices``: tensor parallel)."""

    efficiency: str | None
    id: str
    name: str
    kind: str
    dtype: str
    peak_flops_per_s: float
    vector_peak_flops_per_s: float
    memory_bandwidth_bytes_per_s: float
    memory_capacity_bytes: float
    launch_overhead_s: float
    ridge_point_flops_per_byte: float
    measured: bool
    devices: int = 1


__all__ = ["Report", "DeviceSummary"]

"""What costmodel plan answers: its points, the layouts it skipped, the plan."""

from __future__ import annotations

from costmodel.core.reports import Report
from costmodel.price.bands import Band


class PlanPoint(Report):
    device: str
    layout: str
    mode: str
    tp: int
    replicas: int
    expert_parallel: bool
    attention_dp: int
    pipeline_parallel: int
    prefill_tp: int
    prefill_workers: int
    decode_tp: int
    decode_workers: int
    decode_attention_dp: int
    concurrency: int  # clients in all (per replica x replicas, aggregated)
    ttft_s: float
    tpot_s: float
    output_tokens_per_s_per_device: float
    output_tokens_per_s_per_user: float
    power_w: float | None = None  # one device's mean power (costmodel.engine.energy); None: no board power stated
    output_tokens_per_j: float | None = None  # every device's output tokens per joule
    meets_targets: bool | None  # None: no targets given
    ttft_band: Band | None = None  # where a benchmark's mean TTFT is expected to fall (costmodel.price.bands.served)
    tpot_band: Band | None = None
    kv_cache_full: bool = False  # the memory limit: the KV cache had no room for another request (kv_cache_full)


class SkippedLayout(Report):
    device: str
    layout: str
    reason: str


class Plan(Report):
    model: str
    model_name: str
    devices: int
    input_len: int
    output_len: int
    engine: str
    ttft_target_s: float | None
    tpot_target_s: float | None
    points: list[PlanPoint]  # the simulated candidates
    front: list[PlanPoint]  # per device kind: no point has another of its kind at least as good on both axes
    best: list[PlanPoint]  # per device kind: the most tokens/s per device that meets the targets
    skipped: list[SkippedLayout]
    assumptions: list[str]
    stopped: str | None = None  # the search passed its time limit: what it left out (the points are those so far)

    def __str__(self) -> str:
        from costmodel.render.plans import plan_table

        return plan_table(self)

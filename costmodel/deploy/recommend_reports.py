"""What costmodel recommend answers: the candidates it searched and the one it chose."""

from __future__ import annotations

from costmodel.core.reports import Report
from costmodel.deploy.disagg_reports import DisaggPrediction
from costmodel.engine.reports import LoadPrediction


class Candidate(Report):
    """One engine unit on one device kind: the most it serves under the targets, and the replicas the load needs."""

    gpu: str
    layout: str
    mode: str = "agg"  # or "disagg": prefill_workers x prefill_tp and decode_workers x decode_tp devices
    max_num_batched_tokens: int | None = None  # the token budget searched; None: the engine's default or the flag
    unit_gpus: int
    tp: int
    expert_parallel: bool
    attention_dp: int
    pipeline_parallel: int
    per_unit: float | None  # requests/s (an open loop) or clients (a closed loop) one unit serves; None: none
    saturation: float | None = None  # requests/s one unit completes at most (the closed form's; an open loop)
    binds: str | None
    replicas: int | None
    gpus: int | None
    cost_per_hour: float | None = None
    energy_j_per_output_token: float | None = None  # at its share of the load (the whole, once priced whole)
    prefill_tp: int | None = None
    prefill_workers: int | None = None
    decode_tp: int | None = None
    decode_workers: int | None = None

    def objective(self, minimise: str) -> float:
        """What a recommendation minimising ``minimise`` (gpus, cost or energy) ranks this candidate by; infinite
        where it is not known (no GPUs that serve, no price, no board power)."""
        value = {"gpus": self.gpus, "cost": self.cost_per_hour, "energy": self.energy_j_per_output_token}[minimise]
        return float("inf") if value is None else value


class Recommendation(Report):
    """The fewest GPUs (or the least cost or energy: ``minimise``), and the layout, that serve the load under the
    targets, with how to launch and measure it."""

    model: str
    model_name: str
    engine: str
    gpu: str
    gpus: int
    layout: str
    mode: str = "agg"
    max_num_batched_tokens: int | None = None  # the token budget the search chose (None: the default or the flag)
    prefill_tp: int | None = None
    prefill_workers: int | None = None
    decode_tp: int | None = None
    decode_workers: int | None = None
    replicas: int
    tp: int
    expert_parallel: bool
    attention_dp: int
    pipeline_parallel: int
    input_len: int
    output_len: int
    concurrency: int | None
    request_rate: float | None
    ttft_target_s: float | None
    tpot_target_s: float | None
    statistic: str
    evaluator: str
    price_per_gpu_hour: float | None
    cost_per_hour: float | None
    minimise: str = "gpus"  # what the answer minimises under the targets: gpus, cost or energy
    at: LoadPrediction | DisaggPrediction
    command: list[str] | None = None  # the costmodel predict arguments that reprice it (the command line's)
    launch: str
    bench: str
    candidates: list[Candidate]
    assumptions: list[str]
    stopped: str | None = None  # the search passed its time limit: what it left out (the answer is the best so far)

    def __str__(self) -> str:
        from costmodel.render.recommend import recommendation_table

        return recommendation_table(self)

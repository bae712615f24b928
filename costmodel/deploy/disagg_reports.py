"""What a disaggregated deployment reports: each pool, the KV transfer, the TTFT split, and the client's latencies."""

from __future__ import annotations

from pydantic import computed_field

from costmodel.core.reports import DeviceSummary, Report
from costmodel.engine.energy import RunEnergy
from costmodel.engine.reports import Stats
from costmodel.price.bands import Band


class PoolSummary(Report):
    role: str
    hardware: DeviceSummary
    tp: int
    workers: int
    attention_dp: int = 1  # a worker's attention data parallel groups of tp devices
    devices: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_tokens: int
    kv_cache_bytes_per_token: float
    mean_batch: float
    busy_share: float  # of the run, the mean share of time a worker of the pool was running an iteration
    iterations: int | None  # simulated: the run's iterations; None in the closed form
    energy: RunEnergy | None = None  # one device of the pool over the run (costmodel.deploy.disagg_energy)


class KvTransfer(Report):
    bytes_per_request: float  # the prompt's KV cache as the decode pool stores it (all its devices)
    bytes_per_device: float  # the most one device sends or receives
    link: str
    link_bytes_per_s: float
    latency_s: float
    time_s: float


class TtftSplit(Report):
    """Means over the requests; they add up to the mean TTFT."""

    queue_s: float
    prefill_s: float
    transfer_s: float
    front_end_s: float


class DisaggPrediction(Report):
    """A disaggregated deployment under load; ``ttft_s`` and ``tpot_s`` are a benchmark client's means."""

    model: str
    model_name: str
    engine: str
    engine_version: str
    evaluator: str
    prefill: PoolSummary
    decode: PoolSummary
    devices: int
    concurrency: int | None
    request_rate: float | None
    burstiness: float = 1.0  # an open loop's arrivals: the gamma shape of their gaps (1: Poisson)
    num_requests: int
    input_len: float
    output_len: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    ttft_band: Band | None = None  # where a benchmark's mean TTFT is expected to fall (costmodel.price.bands.served)
    tpot_band: Band | None = None
    ttft: Stats
    tpot: Stats
    e2e: Stats
    ttft_split: TtftSplit
    kv_transfer: KvTransfer
    requests_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_device: float
    output_tokens_per_s_per_user: float
    decode_waits: int | None  # simulated: requests that reached a decode worker with no slot or pages for them
    assumptions: list[str]
    # open loop: the most requests per second the pools complete and which pool that is; overloaded: the arrivals
    # outpace it, so the queue grows as long as they come and the TTFT grows with num_requests
    saturation_requests_per_s: float | None = None
    saturation_binds: str | None = None
    overloaded: bool = False
    # energy (costmodel.deploy.disagg_energy): one device's mean power over the run (both pools and the KV
    # transfer), every device's energy over the output tokens and the requests; with a price, dollars per million
    power_w: float | None = None
    energy_j_per_output_token: float | None = None
    energy_j_per_output_token_range: tuple[float, float] | None = None
    energy_j_per_request: float | None = None
    output_tokens_per_j: float | None = None
    kv_transfer_w: float | None = None  # the KV cache crossing between the pools, every device's link together
    usd_per_million_output_tokens: float | None = None
    usd_per_million_tokens: float | None = None
    price_per_gpu_hour: float | None = None

    def record(self) -> dict:
        """One flat row: the layout, the client's latencies and the throughput."""

        def pool(s: PoolSummary) -> str:
            groups = f" ({s.attention_dp} attention DP groups each)" if s.attention_dp > 1 else ""
            return f"{s.workers} x {s.tp} {s.hardware.id}{groups}"

        return {
            "model": self.model,
            "engine": self.engine,
            "prefill": pool(self.prefill),
            "decode": pool(self.decode),
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "ttft_s": self.ttft_s,
            "ttft_p90_s": self.ttft.p90,
            "tpot_s": self.tpot_s,
            "tpot_p90_s": self.tpot.p90,
            "e2e_s": self.e2e_s,
            "requests_per_s": self.requests_per_s,
            "output_tokens_per_s_per_device": self.output_tokens_per_s_per_device,
            "output_tokens_per_s_per_user": self.output_tokens_per_s_per_user,
            "kv_transfer_s": self.kv_transfer.time_s,
        }

    def __str__(self) -> str:
        from costmodel.price.bands import served_label
        from costmodel.render.serving import disagg_table

        return disagg_table(self, served_label())

    @computed_field
    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        """Output tokens per second per GPU, as load curves and recommendations state it (every device here is a
        GPU): ``output_tokens_per_s_per_device``."""
        return self.output_tokens_per_s_per_device

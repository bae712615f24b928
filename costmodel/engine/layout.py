"""Where a model's engines sit: :class:`Layout`, one way to place a model on devices."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """One way to place a model on devices: aggregated (``tp``, ``replicas``) or disaggregated (the pools).

    Aggregated: each engine spans ``tp`` devices (tensor parallel) x ``pipeline_parallel`` stages; a mixture of
    experts may run its experts whole on devices (``expert_parallel``, over ``expert_parallel_size`` devices, the
    tensor-parallel group when None) and its attention as ``attention_dp`` groups of ``tp`` devices, each taking
    its own requests, the experts over all of them; ``replicas`` copies behind a router share the load evenly.
    Disaggregated: ``prefill_workers`` of ``prefill_tp`` devices and ``decode_workers`` of ``decode_tp`` devices
    (each ``decode_attention_dp`` groups)."""

    mode: str = "agg"  # "agg" or "disagg"
    tp: int = 1
    replicas: int = 1
    expert_parallel: bool = False
    attention_dp: int = 1  # aggregated: groups of tp devices with their own requests, experts over all
    pipeline_parallel: int = 1  # aggregated: stages of tp devices, the layers split among them
    prefill_tp: int = 0
    prefill_workers: int = 0
    decode_tp: int = 0
    decode_workers: int = 0
    decode_attention_dp: int = 1  # disaggregated: a decode worker's groups of decode_tp devices, experts over all
    expert_parallel_size: int | None = None  # aggregated: devices the experts spread over (None: the tp group)

    @property
    def devices(self) -> int:
        if self.mode == "agg":
            return self.tp * self.replicas * self.attention_dp * self.pipeline_parallel
        return self.prefill_tp * self.prefill_workers + self.decode_tp * self.decode_workers * self.decode_attention_dp

    @property
    def units(self) -> int:
        """The engines a load is spread over evenly (replicas, attention-data-parallel groups); a disaggregated
        deployment takes its clients whole."""
        return self.replicas * self.attention_dp if self.mode == "agg" else 1

    def describe(self) -> str:
        ep = " EP" if self.expert_parallel else ""
        if self.mode == "agg" and self.pipeline_parallel > 1:
            return f"TP{self.tp} x PP{self.pipeline_parallel}{ep}"
        if self.mode == "agg" and self.attention_dp > 1:
            return f"DP{self.attention_dp} x TP{self.tp}{ep}"
        if self.mode == "agg":
            return f"{self.replicas} x TP{self.tp}{ep}"
        groups = f"DP{self.decode_attention_dp} x " if self.decode_attention_dp > 1 else ""
        return (
            f"{self.prefill_workers}P x TP{self.prefill_tp} + {self.decode_workers}D x {groups}TP{self.decode_tp}{ep}"
        )

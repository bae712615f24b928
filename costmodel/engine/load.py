"""What a benchmark client sends (:class:`Load`): how many requests, how long, and when: a closed loop of clients
each sending its next request when its last one finishes, or an open loop of arrivals at a rate."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from costmodel.core.errors import CostModelError

#: Requests a benchmark sends per client when none is given: NVIDIA's genai-perf examples use a request
#: count of ten times the concurrency.
REQUESTS_PER_CLIENT = 10
MAX_REQUESTS = 1_000_000


@dataclass(frozen=True)
class Load:
    """A benchmark's requests: ``input_len`` prompt and ``output_len`` output tokens each (or lengths drawn around
    them: :func:`lengths`), under a closed loop of ``concurrency`` clients or arrivals at ``request_rate`` per
    second (Poisson, or bunched by ``burstiness``: :func:`arrival_times`). ``num_requests`` are measured (ten per
    client when None) after ``warmup_requests`` that run first and are left out (aiperf's
    ``--warmup-request-count``). ``client_connections``: the most requests the client keeps in flight (the
    others wait in the client, their clock running). ``seed`` draws the lengths and the arrivals."""

    input_len: int
    output_len: int
    concurrency: int | None = None
    request_rate: float | None = None
    num_requests: int | None = None
    warmup_requests: int = 0
    burstiness: float = 1.0
    input_dist: str = "fixed"
    output_dist: str = "fixed"
    spread: float = 0.0
    input_values: tuple | None = None
    output_values: tuple | None = None
    client_connections: int | None = None
    seed: int = 0

    def with_(self, **changes) -> Load:
        """This load with some fields changed."""
        return replace(self, **changes)

    def lengths(self, total: int) -> tuple[np.ndarray, np.ndarray]:
        """The prompt and output lengths of ``total`` requests, drawn as :func:`lengths` draws them."""
        prompts = lengths(
            self.input_dist, self.input_len, total, spread=self.spread, seed=self.seed, values=self.input_values
        )
        outputs = lengths(
            self.output_dist, self.output_len, total, spread=self.spread, seed=self.seed + 1, values=self.output_values
        )
        return prompts, outputs


def lengths(kind: str, mean: int, n: int, *, spread: float = 0.0, seed: int = 0, values=None) -> np.ndarray:
    """``n`` request lengths: ``fixed`` at ``mean``; ``uniform`` over mean(1 ± spread); ``range``: uniform
    integers from int(mean x (1 - spread)) (at least 1) to ``mean`` itself, as the random dataset of vLLM's benchmark_serving.py
    (before vllm bench serve) and InferenceX's copy of it draw lengths for ``--random-range-ratio`` 1 - spread
    (``sample_uniform``: lower = int(len x ratio), upper = len); ``normal`` with sd spread x mean (at least 1);
    ``file``: ``values`` drawn in order, cycled."""
    rng = np.random.default_rng(seed)
    if kind == "fixed":
        return np.full(n, mean, dtype=np.int64)
    if kind == "uniform":
        lo, hi = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
        return rng.integers(lo, hi + 1, n)
    if kind == "range":
        return rng.integers(max(1, int(mean * (1 - spread))), mean + 1, n)  # at least one token, as sglang's draws
    if kind == "normal":
        return np.maximum(1, np.round(rng.normal(mean, spread * mean, n))).astype(np.int64)
    if kind == "file":
        v = np.asarray(values, dtype=np.int64)
        if v.size == 0 or (v < 1).any():
            raise CostModelError("a lengths file needs whole numbers >= 1")
        return np.resize(v, n)
    raise CostModelError(f"unknown length distribution {kind!r}; known: fixed, uniform, range, normal, file")


def mean_length(values) -> int:
    """The whole-token mean of drawn lengths (the given length itself where they are fixed), as the closed forms take
    them: a range below the given length has a lower mean."""
    return max(1, round(float(np.mean(values))))


def arrival_times(n: int, request_rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """When an open loop's ``n`` requests are sent, as vLLM's ``bench serve`` sends them
    (vllm/benchmarks/serve.py ``get_request``): gaps drawn from a gamma distribution of shape ``burstiness`` and
    mean ``1 / request_rate`` (1: Poisson arrivals; below 1 burstier, above 1 more even; infinite: evenly spaced),
    summed, then scaled so that the last request goes at ``n / request_rate`` (its "normalize_factor": the
    rate is the asked one whatever the draw)."""
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / request_rate)
    else:
        gaps = np.random.default_rng(seed).gamma(burstiness, 1.0 / (request_rate * burstiness), n)
    t = np.cumsum(gaps)
    return t * (n / request_rate / t[-1])

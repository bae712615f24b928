"""What a benchmark client sends: when an open loop's requests go out."""

from __future__ import annotations

import math

import numpy as np


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

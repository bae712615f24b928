"""What a benchmark client sends (:class:`Load`): how many requests, how long, and when: a closed loop of clients
each sending its next request when its last one finishes, or an open loop of arrivals at a rate."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.engine.layout import Layout
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.presets import ModelPreset

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
    others wait in the client, their clock running). ``seed`` draws the lengths and the arrivals. ``goodput``: the
    service-level objectives whose met requests a second the report counts (vllm bench serve's ``--goodput``)."""

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
    # vllm bench serve's --goodput: (metric, seconds) pairs, metric ttft, tpot or e2el; the report counts the
    # requests a second that meet all of them
    goodput: tuple = ()
    # vllm bench serve's --metric-percentiles: the percentiles (0-100) of TTFT, TPOT, ITL and e2e the report gives
    percentiles: tuple = ()
    # a prefix shared by requests (a system prompt, a document): its tokens, the first of each sharing prompt, and the
    # share of requests that start with it (spread evenly over the requests)
    prefix_len: int = 0
    prefix_share: float = 0.0
    # conversations of this many turns: each turn's prompt holds the conversation so far (the turns before, their
    # prompts and outputs) and its own input_len tokens; a turn is sent as the one before finishes
    turns: int = 1

    @property
    def reuses_cache(self) -> bool:
        """Whether the requests find tokens in the engine's prefix cache (a shared prefix, or conversations), which
        only the simulation of one aggregated engine models."""
        return self.turns > 1 or bool(self.prefix_len and self.prefix_share)

    def conversations(self, prompts: np.ndarray, outputs: np.ndarray) -> tuple[np.ndarray, tuple | None]:
        """The prompts as the engine gets them and the prefix cache's view of them, (group, reusable tokens,
        turns) per request (None without a shared prefix or conversations): a shared prefix is group 0 for the
        requests that start with it; turn t of conversation c is group c and may reuse the whole turn before."""
        if self.turns > 1:
            c = len(prompts) // self.turns
            inputs = prompts.reshape(c, self.turns)
            turn = inputs + outputs.reshape(c, self.turns)
            before = np.cumsum(turn, axis=1) - turn
            group = np.repeat(np.arange(c), self.turns)
            return (before + inputs).reshape(-1), (group, before.reshape(-1), self.turns)
        if self.prefix_len and self.prefix_share:
            shared = self.shared(len(prompts))
            if (prompts[shared] <= self.prefix_len).any():
                raise CostModelError(
                    f"a shared prefix of {self.prefix_len} tokens needs longer prompts: a sharing request's prompt of "
                    f"{int(prompts[shared].min())} tokens holds no token of its own (raise --input-len or lower "
                    "--prefix-len)"
                )
            tokens = np.where(shared, self.prefix_len, 0)
            return prompts, (np.where(shared, 0, -1), tokens, 1)
        return prompts, None

    def shared(self, total: int) -> np.ndarray:
        """Which of ``total`` requests start with the shared prefix: request i where floor((i + 1) share) passes
        floor(i share), so that any first n of them hold the share within one request."""
        i = np.arange(total)
        return np.floor((i + 1) * self.prefix_share + 1e-9) > np.floor(i * self.prefix_share + 1e-9)

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


def checked_load(m: ModelPreset, hw: HardwareProfile, load: Load) -> int:
    """Every check of a load; the number of measured requests (ten per client by default)."""
    checks.instance("model", m, ModelPreset, "a ModelPreset (load_model(...))")
    checks.instance("hw", hw, HardwareProfile, "a HardwareProfile (load_profile(...))")
    checks.instance("load", load, Load, "a Load(input_len=..., output_len=..., concurrency=...)")
    checks.count("input_len", load.input_len)
    checks.count("output_len", load.output_len)
    concurrency, request_rate, burstiness = load.concurrency, load.request_rate, load.burstiness
    if (concurrency is None) == (request_rate is None):
        raise CostModelError("give one of concurrency (closed loop) and request_rate (Poisson arrivals)")
    if concurrency is not None:
        checks.count("concurrency", concurrency)
    if request_rate is not None and (
        isinstance(request_rate, bool) or not isinstance(request_rate, (int, float)) or not 0 < request_rate < 1e9
    ):
        raise CostModelError(f"request rate must be a positive number of requests per second, got {request_rate!r}")
    if isinstance(burstiness, bool) or not isinstance(burstiness, (int, float)) or not burstiness > 0:
        raise CostModelError(
            f"burstiness must be a positive number (1: Poisson arrivals; below 1 burstier, above 1 "
            f"more even; inf: evenly spaced), got {burstiness!r}"
        )
    if burstiness != 1 and request_rate is None:
        raise CostModelError("burstiness shapes an open loop's arrivals: give a request rate, not a concurrency")
    if load.prefix_len:
        checks.count("prefix_len", load.prefix_len)
        checks.number("prefix_share", load.prefix_share, most=1.0)
    checks.count("turns", load.turns, most=1000)
    if load.turns > 1 and (load.prefix_len or load.warmup_requests % load.turns):
        raise CostModelError(
            "conversations (turns) reuse their own turns: give no shared prefix with them, and warm-up requests in "
            f"whole conversations (a multiple of {load.turns})"
        )
    if m.architecture != "decoder":
        raise CostModelError(f"serving is modelled for decoder-only models; {m.id} is {m.architecture}")
    n = load.num_requests if load.num_requests is not None else REQUESTS_PER_CLIENT * (concurrency or 100)
    checks.count("num_requests", n)
    checks.count("warmup_requests", load.warmup_requests, least=0)
    if n + load.warmup_requests > MAX_REQUESTS:
        raise CostModelError(
            f"num_requests + warmup_requests must be at most {MAX_REQUESTS}, got {n + load.warmup_requests}"
        )
    checks.count("client_connections", load.client_connections, optional=True)
    if load.client_connections is not None and concurrency is None:
        raise CostModelError(
            "client_connections caps a closed loop's requests in flight: give a concurrency, not a request rate"
        )
    return n


def engine_share(load: Load, n: int, layout: Layout) -> tuple[Load, int]:
    """One engine's even share of ``load`` (``n`` measured requests) under ``layout``'s replicas and attention
    data parallel groups: the clients (or the rate), the connections and the requests."""
    checks.count("attention_dp", layout.attention_dp)
    checks.count("replicas", layout.replicas)
    for share, what, each in ((layout.replicas, "replicas", "replica"), (layout.attention_dp, "attention_dp", "group")):
        if share == 1:
            continue
        c, conn, rate = load.concurrency, load.client_connections, load.request_rate
        if c is not None and c % share:
            raise CostModelError(
                f"concurrency {c} must be a multiple of {what} {share} (each {each} takes an even share of the clients)"
            )
        load = load.with_(
            concurrency=c // share if c is not None else None,
            client_connections=max(1, conn // share) if conn is not None else None,
            request_rate=rate / share if rate is not None else None,
            warmup_requests=load.warmup_requests // share,
        )
        n = max(1, n // share)
    return load, n

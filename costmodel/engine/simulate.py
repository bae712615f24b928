"""An engine under load, iteration by iteration (continuous batching).

Each iteration the scheduler runs, in this order: one decode token for every running sequence whose prompt is
done; the next chunk of every running prompt not yet done; then waiting requests, oldest first, while the
sequence limit, the token budget and the KV pages allow. A prompt longer than what is left of the budget is
split when the engine chunks prefills, and waits otherwise. An engine that does not mix (SGLang's default)
runs an iteration of prompts alone whenever a prompt is waiting and can be admitted, and decode iterations
otherwise.

KV pages are taken as tokens are cached. An engine that reserves (TensorRT-LLM's no-evict scheduler) admits a
request only with pages for its prompt and whole output; the others take pages as they go and, when a decode
token finds no free page, preempt the most recently admitted running request: its pages are freed and it goes
back to the head of the queue; an iteration that preempted admits nothing new. Without prefix caching a
preempted request is recomputed when it returns (its prompt and the tokens it has produced prefilled again);
with it (vLLM's default) its KV is still in the pages it freed and only its last token is computed again.

The iteration's time is :class:`costmodel.engine.iteration.IterationTable`'s for its mix, plus the engine's fixed cost
per iteration and the host's time where one is fitted (:meth:`costmodel.engine.served.Setup.wall`). A prompt's last
chunk produces the request's first token at the end of that iteration (TTFT counts from the request's arrival),
every decode iteration one token per sequence. Load is a closed loop
(``concurrency`` clients each sending a new request when their last one finishes; all start at time 0, as
benchmark clients do) or an open one (Poisson arrivals at ``request_rate``).

Under attention data parallel one group is simulated; the routed experts it shares with the others see their
tokens too, taken as copies of this group in the mean (as many running sequences, each decoding a token and
prefilling a prompt's worth per output token).

Stretches of decode-only iterations with nothing to admit are advanced at once (their step times evaluated as an
array), which keeps 1,000 requests well under a second.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from costmodel.core.errors import CostModelError
from costmodel.engine.config import EngineConfig
from costmodel.engine.iteration import IterationTable
from costmodel.engine.queue import Engine
from costmodel.engine.scheduler import Admission


@dataclass
class SimResult:
    """Per-request times and per-iteration facts of one simulated run."""

    arrival: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    output: np.ndarray
    iterations: int
    prefill_iterations: int
    iteration_s: list = field(default_factory=list)  # (duration, decode tokens) of each stretch
    batch_tokens_max: int = 0
    seqs_max: int = 0
    kv_pages_max: int = 0
    kv_pages: int = 0
    preemptions: int = 0
    prefill_tokens: int = 0  # tokens prefilled, prompts and returns of preempted requests alike
    recomputed_tokens: int = 0  # of those, tokens whose KV a preemption lost and that were computed again
    resumed: int = 0  # preempted requests that had their first token (each returns with one token to compute)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    comm_s: float = 0.0
    overhead_s: float = 0.0
    seq_iterations: float = 0.0  # sum over iterations of running sequences (mean batch = this / iterations)
    violations: list = field(default_factory=list)
    prefix_hits: int = 0  # admissions that found the shared prefix cached
    prefix_hit_tokens: int = 0  # prompt tokens those admissions did not compute
    prefix_evictions: int = 0
    prefix_len: int = 0  # the load's shared prefix (0: none)
    turns: int = 1  # the load's conversations' turns (1: none)
    stretches: list = field(default_factory=list)  # (running, prefill tokens, KV pages taken) of each stretch

    def after(self, warmup: int) -> SimResult:
        """The same run with its first ``warmup`` requests left out of the per-request times."""
        kept = slice(warmup, None)
        return dataclasses.replace(
            self, arrival=self.arrival[kept], first=self.first[kept], finish=self.finish[kept], output=self.output[kept]
        )

    def record(self, times: np.ndarray, decode: int, running: int, tokens: int, kv_used: int) -> None:
        """Iterations of ``times`` seconds, each with ``decode`` decode tokens, ``running`` sequences and
        ``tokens`` tokens in all, ``kv_used`` pages taken after them."""
        self.iterations += len(times)
        self.seq_iterations += len(times) * running
        self.iteration_s.append((times, decode))
        self.stretches.append((running, tokens - decode, kv_used))
        self.batch_tokens_max = max(self.batch_tokens_max, tokens)
        self.seqs_max = max(self.seqs_max, running)
        self.kv_pages_max = max(self.kv_pages_max, kv_used)

    def timeline(self, times: np.ndarray, points: int = 400) -> dict[str, list]:
        """The run iteration by iteration (``times``: every iteration's, in order), in at most ``points`` spans of
        consecutive iterations: when each span ended (s), and the most running sequences, prefilled tokens in one
        iteration and share of KV pages taken over its iterations (so no prefill is lost between points)."""
        counts = np.array([len(t) for t, _ in self.iteration_s])
        ends = np.cumsum(times)
        each = np.repeat(np.array(self.stretches, float).reshape(-1, 3), counts, axis=0)
        starts = np.unique(np.linspace(0, len(ends), min(points, len(ends)) + 1).astype(int)[:-1])
        most = np.maximum.reduceat(each, starts, axis=0)
        last = np.append(starts[1:], len(ends)) - 1
        return {
            "t_s": ends[last].tolist(),
            "batch": most[:, 0].astype(int).tolist(),
            "prefill_tokens": most[:, 1].astype(int).tolist(),
            "kv_use": (most[:, 2] / max(self.kv_pages, 1)).tolist(),
        }

    @property
    def ttft(self) -> np.ndarray:
        return self.first - self.arrival

    @property
    def tpot(self) -> np.ndarray:
        more = self.output > 1
        return (self.finish[more] - self.first[more]) / (self.output[more] - 1)

    @property
    def e2e(self) -> np.ndarray:
        return self.finish - self.arrival


def client_queue(res: SimResult, clients: int) -> SimResult:
    """``res`` (a closed loop of as many requests in flight as the benchmark client has connections) as
    ``clients`` clients see it: the first ``clients`` requests are sent at time 0 and each later one when its
    client's last request finishes; a request waits in the client for a connection (the finish of an earlier
    request frees one) with its clock running, so its arrival is when it was sent, not when the engine got it.
    Request n (in the order the engine got them) was sent at the (n - clients)-th finish."""
    order = np.argsort(res.arrival, kind="stable")
    done = np.sort(res.finish)
    sent = np.zeros(len(order))
    later = np.arange(clients, len(order))
    sent[later] = done[later - clients]
    arrival = np.empty_like(res.arrival, dtype=float)
    arrival[order] = sent
    return dataclasses.replace(res, arrival=arrival)


def simulate(
    table: IterationTable,
    eng: EngineConfig,
    *,
    kv_tokens: int,
    prompts: np.ndarray,
    outputs: np.ndarray,
    concurrency: int | None = None,
    request_rate: float | None = None,
    burstiness: float = 1.0,
    overhead_s: float = 0.0,
    seed: int = 0,
    check: bool = False,
    wall=None,
    spec=None,
    prefix: tuple | None = None,
) -> SimResult:
    """Run ``len(prompts)`` requests through the engine. ``check``: record every violated invariant (token
    budget, sequence limit, KV pages) instead of trusting them. ``wall(gpu, sequences)``: an iteration's time
    from its GPU work and its running sequences (:meth:`costmodel.engine.served.Setup.wall`); by default the work plus
    ``overhead_s``. ``spec``: speculative decoding (:class:`costmodel.engine.speculation.Drafting`). ``prefix``: (each
    request's group, the tokens it may find cached, a conversation's turns) for the engine's prefix cache
    (:meth:`costmodel.engine.load.Load.conversations`), where the engine reuses prefixes."""
    if wall is None:

        def wall(gpu, sequences):
            return gpu + overhead_s

    if (concurrency is None) == (request_rate is None):
        raise CostModelError("give a concurrency or a request rate, not both")
    rule = Admission.of(eng)
    pages_total = kv_tokens // rule.page
    need_whole = int(max(prompts)) + (int(max(outputs)) if eng.reserve_output else 1 if spec is None else spec.slots)
    if rule.pages(need_whole) > pages_total:
        raise CostModelError(
            f"one request of {need_whole} tokens needs {rule.pages(need_whole)} KV pages; the "
            f"engine has {pages_total:,} ({kv_tokens:,} tokens) on this device"
        )
    if not eng.chunked_prefill and int(max(prompts)) > rule.budget:
        raise CostModelError(
            f"a prompt of {int(max(prompts))} tokens exceeds the token budget {rule.budget} and chunked prefill is off"
        )
    n = len(prompts)
    res = SimResult(np.zeros(n), np.zeros(n), np.zeros(n), np.array(outputs, float), 0, 0, kv_pages=pages_total)
    if prefix is not None:
        res.prefix_len, res.turns = int(np.max(prefix[1])) if prefix[2] == 1 else 0, int(prefix[2])
    run = Engine(table, eng, rule, pages_total, prompts, outputs, wall, check, res, spec, prefix)
    run.load(concurrency, request_rate, burstiness, seed)
    return run.run()

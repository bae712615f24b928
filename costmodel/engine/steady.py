"""The steady state of an engine under load, in closed form: means only, for sweeps and capacity searches.

In steady state ``B`` sequences run (the clients, capped by the sequence limit and by the KV cache at each
sequence's peak of prompt + output tokens). A request spends ``k = ceil(isl / (budget - B))`` iterations
prefilling (its prompt in chunks beside the other sequences' decode tokens; one iteration of its own when the
engine does not mix) and ``osl - 1`` decoding, so ``B / (osl - 1 + k)`` requests start per iteration and a
share ``f = min(1, k B / (osl - 1 + k))`` of iterations carries a prompt. With ``t_mix`` the time of an
iteration carrying a chunk beside the other decode tokens and ``t_dec`` that of a decode-only iteration, both
at the mean context ``isl + osl / 2``:

    TPOT = f t_mix + (1 - f) t_dec          (a decode token's mean iteration)
    TTFT = front-end delay + k t_mix + queueing (+ t_iter under an overlap scheduler)

Each iteration's time is its GPU work plus the engine's fixed cost and the host's time where one is fitted
(:meth:`costmodel.engine.served.Setup.wall`, at the running sequences ``B``).

An overlap scheduler (TensorRT-LLM's, SGLang's) plans each iteration while the one before runs, so a request
starts an iteration later than it would under a scheduler that plans each iteration as the last one ends.

An engine that does not mix (SGLang) runs each prompt's ``k`` iterations alone (``t_mix`` is then the prompt's
chunk by itself) and every decoding sequence waits through the ``B`` prompts that start in its lifetime:
``TPOT = t_dec + B k t_mix / (osl - 1)``.

Queueing, when the clients outnumber the sequences the engine runs: each of ``C`` clients cycles through a
request of ``R = TTFT + (osl - 1) TPOT``, so the throughput is ``X = B / R_run`` requests per unit time and by
Little's law a client's request waits ``C / X - R_run`` before it starts.

Open loop below saturation: the running count follows Little's law, ``B = lambda x (TTFT + (osl - 1) TPOT)``. An
arrival lands inside an iteration and waits out its rest, on average ``E[t^2] / (2 E[t])`` over the iteration
times (a share ``f`` of them ``t_mix`` long, the rest ``t_dec``: longer ones are likelier to be landed in), and its
prompt queues behind the prompts that came before it, each adding ``s`` to the iterations it runs in (alone where
the engine does not mix): an M/D/1 queue, ``rho s / (2 (1 - rho))`` with ``rho = lambda s``.

Saturation (:func:`saturation`): with every sequence the engine can hold running (``B = cap``), it completes
``X_max = cap / R_run(cap)`` requests per unit time, the most it serves. Poisson arrivals at ``lambda >= X_max``
(open loop) overload it: its queue grows for as long as requests arrive. The first ``cap`` requests start as
they come; request ``i = q cap + r`` starts when request ``i - cap`` ends, ``q R_run`` after its own slot's first
start, so it waits ``q cap (1 / X_max - 1 / lambda)``: over ``N`` requests (a multiple of ``cap``) the mean wait is
``(N - cap) / 2 x (1 / X_max - 1 / lambda)``, and the mean TTFT depends on how many requests the benchmark sends.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from costmodel.engine.energy import steady_energy
from costmodel.engine.reports import LoadPrediction, Saturation, Stats, TimeSplit, load_report


class Times(NamedTuple):
    """One running count's closed-form times: a request's first-token time (its prompt's iterations), the mean
    TPOT, the share of iterations carrying a prompt, an iteration's mean step, and, asked for an open loop's waits,
    the mean rest of the iteration an arrival lands in and the time one prompt's prefill adds to its iterations."""

    tagged: float
    tpot: float
    f: float
    step: float
    landed: float = 0.0
    alone: float = 0.0


def _cap(setup, isl: int, osl: int, in_flight: int | None) -> tuple[int, str]:
    """What runs at once: the engine's sequence limit, its KV cache (every sequence at its peak of prompt + output
    tokens), and the benchmark client's connections (the requests beyond any of them wait, their clock running: in
    the engine's queue or in the client's); and which of them binds."""
    eng = setup.eng
    kv_seqs = max(1, setup.kv_tokens // (eng.page_size * math.ceil((isl + osl) / eng.page_size)))
    limits = [(eng.max_num_seqs, "sequence limit"), (kv_seqs, "kv cache")]
    if in_flight:
        limits.append((in_flight, "client connections"))
    return min(limits, key=lambda x: x[0])


def saturation(setup, *, input_len: int, output_len: int, in_flight: int | None = None) -> Saturation:
    """The most requests per second one engine of ``setup`` completes: every sequence it can hold running (the
    closed loop of that many clients, as :func:`steady_state` prices it), their number and what limits it."""
    cap, binds = _cap(setup, input_len, output_len, in_flight)
    p = steady_state(
        setup,
        concurrency=cap,
        request_rate=None,
        input_len=input_len,
        output_len=output_len,
        num_requests=cap,
        in_flight=in_flight,
    )
    # the closed loop's time in the engine, without the front end's latency (it does not hold the engine)
    return Saturation(cap / (p.ttft_s - setup.request_s + (output_len - 1) * p.tpot_s), cap, binds)


class _Form:
    """One engine's iterations at a steady running count, in closed form (the module's docstring)."""

    def __init__(self, setup, isl: int, osl: int):
        self.setup, self.eng, self.table = setup, setup.eng, setup.table
        self.isl, self.osl, self.ctx = isl, osl, isl + osl / 2

    def iteration(
        self, decode: float, prompt_tokens: float, outputs: float, start: int = 0, others=None, running: float = 1.0
    ) -> float:
        """An iteration of ``decode`` decode tokens and ``prompt_tokens`` of prompts: whole prompts, then a part
        (or, from ``start``, the chunk of one prompt that begins there), with ``running`` sequences; ``others``: what
        each other attention data parallel group runs (:meth:`IterationTable.others_for`)."""
        d = int(round(decode)) if self.eng.mixes else 0
        chunks, left = [], int(round(prompt_tokens))
        while left > 0:
            c = min(self.isl - start, left)
            chunks.append((start, c))
            left -= c
            start = 0
        return self.setup.wall(
            self.table.time(
                decode_seqs=d,
                decode_context_sum=d * self.ctx,
                chunks=chunks,
                outputs=d + int(round(outputs)),
                others=others,
            ).total_s,
            running,
        )

    def times(self, b: float, waits: bool = False) -> Times:
        b_dec = max(b - 1, 0)
        room = self.eng.max_num_batched_tokens - (b_dec if self.eng.mixes else 0)
        k = math.ceil(self.isl / max(room, 1))
        starts = b / (self.osl - 1 + k) if self.osl > 1 else b / k  # requests starting per iteration
        others = self.table.others_for(
            b, self.isl / self.osl
        )  # attention data parallel: the other groups, copies of this one
        dec = self.setup.wall(
            float(self.table.decode_run(max(int(round(b)), 1), max(int(round(b)), 1) * self.ctx, 1, others)[0]), b
        )
        if k > 1:  # a prompt longer than the room: its chunks fill k iterations, each after the ones before
            # (the others' prompts sharing those iterations are left out: TTFT up to ~17% low here)
            tagged = sum(
                self.iteration(
                    b_dec, min(room, self.isl - i * room), i == k - 1, start=i * room, others=others, running=b
                )
                for i in range(k)
            )
            load = starts * self.isl  # prompt tokens per iteration, on average
            f = min(1.0, load / room) if self.eng.mixes else k * b / (self.osl - 1 + k * b)
            avg = (
                self.iteration(b_dec, min(load / f, room), starts / f, others=others, running=b)
                if self.eng.mixes
                else tagged / k
            )
        else:
            f = min(1.0, starts) if self.eng.mixes else starts / (1 + starts)
            # a prompt shares its iteration with the others starting then (size-biased: its own plus the mean)
            tagged = self.iteration(b_dec, min(self.isl * (1 + starts), room), 1 + starts, others=others, running=b)
            avg = self.iteration(
                b_dec, min(self.isl * max(starts, 1.0), room), max(starts, 1.0), others=others, running=b
            )
        if self.eng.mixes:
            tpot = f * avg + (1 - f) * dec
        else:  # every prompt's own iterations stall the decoding sequences: about b prompts per lifetime
            tpot = dec + b * k * self.iteration(0, self.isl, 1, others=others, running=b) / max(self.osl - 1, 1)
        step = tpot if self.eng.mixes else dec
        if not waits:
            return Times(tagged, tpot, f, step)
        # an open loop's waits (the module's docstring): the rest of the iteration an arrival lands in, the mean of
        # the iteration times weighted by their length (f of them carrying prompts, avg long, the rest dec), and the
        # time one prompt's prefill adds to its iterations (alone where the engine does not mix; a prompt of k > 1
        # chunks has them alone already in tagged)
        landed = (f * avg**2 + (1 - f) * dec**2) / (2 * (f * avg + (1 - f) * dec))
        alone = (tagged if k > 1 else self.iteration(b_dec, min(self.isl, room), 1, others=others, running=b)) - (
            k * dec if self.eng.mixes else 0.0
        )
        return Times(tagged, tpot, f, step, landed, max(alone, 0.0))

    def first(self, t: Times) -> float:
        """A closed loop's first-token time in the engine: the prompt's iterations, half a decode iteration waited
        out where the engine does not mix (a request comes while one runs), an iteration more under an overlap
        scheduler."""
        return t.tagged + (self.eng.lag + (0 if self.eng.mixes else 0.5)) * t.step


def steady_state(
    setup,
    *,
    concurrency: int | None,
    request_rate: float | None,
    input_len: int,
    output_len: int,
    num_requests: int,
    in_flight: int | None = None,
    burstiness: float = 1.0,
) -> LoadPrediction:
    """Means of ``setup``'s engine under the load, in closed form (the module's docstring); an open loop's
    ``burstiness`` is only reported: the means here do not depend on how the arrivals bunch."""
    isl, osl = input_len, output_len
    peak = isl + osl
    cap, binds = _cap(setup, isl, osl, in_flight)
    form = _Form(setup, isl, osl)
    most = None  # an open loop's saturation
    if concurrency is not None:
        b, ttft, tpot, f, rps = _closed_loop(form, concurrency, cap)
    else:
        b, ttft, tpot, f, rps, most = _open_loop(form, request_rate, num_requests, cap, binds)
    e2e = ttft + (osl - 1) * tpot
    out_tps = rps * osl
    one = lambda x: Stats(mean=x, median=x, p90=x, p99=x)  # noqa: E731 - a closed form has means only
    return load_report(
        setup,
        "steady-state",
        concurrency,
        request_rate,
        in_flight=in_flight,
        most=most,
        burstiness=burstiness,
        num_requests=num_requests,
        input_len=float(isl),
        output_len=float(osl),
        ttft=one(ttft),
        tpot=one(tpot),
        itl=one(tpot),
        e2e=one(e2e),
        requests_per_s=rps,
        output_tokens_per_s=out_tps,
        output_tokens_per_s_per_user=osl / e2e,
        mean_batch=float(b),
        max_batch=int(math.ceil(b)),
        kv_use_max=b * peak / max(setup.kv_tokens, 1),
        preemptions=0,
        prefill_iteration_share=f,
        iterations=int(num_requests * osl / max(b, 1)),
        time_split=TimeSplit(prefill_s=0.0, decode_s=0.0, comm_s=0.0, overhead_s=0.0),
        energy=steady_energy(setup, batch=float(b), requests_per_s=rps, input_len=isl, output_len=osl),
    )


def _closed_loop(form: _Form, concurrency: int, cap: int):
    """(running sequences, TTFT, TPOT, share of iterations carrying prompts, requests per second) of a closed loop
    of ``concurrency`` clients, at most ``cap`` of them running."""
    setup, osl = form.setup, form.osl
    b = min(concurrency, cap)
    t = form.times(b)
    ttft, tpot, f = form.first(t), t.tpot, t.f
    run = ttft + (osl - 1) * tpot
    rate = b / run
    wait = max(concurrency / rate - run, 0.0) if concurrency > b else 0.0
    ttft += wait + setup.request_s
    rps = concurrency / (ttft + (osl - 1) * tpot)
    return b, ttft, tpot, f, rps


def _open_loop(form: _Form, request_rate: float, num_requests: int, cap: int, binds: str):
    """(running sequences, TTFT, TPOT, share of iterations carrying prompts, requests per second, saturation) of
    arrivals at ``request_rate``: the running count by Little's law, the waits of an M/D/1 queue, or the growing
    queue past the most the engine completes."""
    setup, osl = form.setup, form.osl
    # open loop: the running count follows Little's law, B = rate x time in the engine
    b = 1.0
    for _ in range(50):
        at = min(b, cap)
        ttft, tpot, f, step = form.times(at)[:4]
        b_new = request_rate * (ttft + (osl - 1) * tpot)
        if abs(b_new - b) < 1e-3 * max(b, 1):
            b = b_new
            break
        b = 0.5 * b + 0.5 * b_new
    # every sequence running, as in the closed loop of cap clients: does the engine keep up with the arrivals?
    full = form.times(cap)
    most = Saturation(cap / (form.first(full) + (osl - 1) * full.tpot), cap, binds)
    if request_rate >= most.requests_per_s:
        # overloaded: the engine completes its most, the queue grows for as long as requests arrive (the
        # module's docstring); the TTFT is that of these num_requests
        ttft, tpot, f = form.first(full), full.tpot, full.f
        ttft += max((num_requests - cap) / 2 * (1 / most.requests_per_s - 1 / request_rate), 0.0)
        rps = most.requests_per_s
    else:
        # Poisson arrivals land inside an iteration and wait out its rest, and queue for the prefill behind
        # the prompts that came before them: an M/D/1 queue of one prompt's prefill time (the module's
        # docstring)
        landed, alone = form.times(at, waits=True)[4:]
        busy = min(request_rate * alone, 0.99)
        ttft += setup.eng.lag * step + landed + busy * alone / (2 * (1 - busy))
        rps = request_rate
    b = min(b, cap)
    ttft += setup.request_s
    return b, ttft, tpot, f, rps, most

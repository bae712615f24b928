"""A disaggregated deployment in closed form: means of a closed loop in steady state, and the most its pools complete."""

from __future__ import annotations

import numpy as np

from costmodel.deploy.pools import Pool, prefill_time
from costmodel.deploy.workers import DECODE_RESERVES_FIRST
from costmodel.engine.reports import Stats
from costmodel.engine.served import Setup


def steady_state(
    pre: Setup, dec: Setup, p: Pool, d: Pool, *, concurrency: int, input_len: int, output_len: int, transfer_s: float
) -> dict:
    """Means of a closed loop of ``concurrency`` clients in steady state, in closed form.

    A request cycles through its prefill ``s_p`` (alone on a worker), the transfer, and ``k = osl - 1`` decode
    iterations of ``tau(b)`` at ``b`` sequences per decode worker (at the mean context ``isl + osl / 2``; by
    Little's law ``b = X k tau(b) / D`` for a throughput of ``X`` requests per second). Unhindered, ``X = C /
    (s_p + transfer + k tau(b))``. The prefill pool serves at most ``P m / t(m)`` requests per second (a busy
    worker batches ``m`` waiting prompts, up to its limits), the decode pool at most ``D cap / (k tau(cap))``
    (``cap``: its sequence limit or its KV cache at each request's peak, or, where the decode worker reserves first,
    at each request's mean tokens and headroom); past either the clients wait, by
    Little's law ``C / X`` less the cycle, for a prefill worker (in TTFT) or a decode slot (in TPOT; in TTFT where
    the decode worker reserves its pages before the prefill, :data:`DECODE_RESERVES_FIRST`, and pages bind). Under an
    overlap scheduler a request joins a busy decode worker one iteration later (in TPOT)."""
    isl, osl = input_len, output_len
    k = osl - 1
    ctx = isl + osl / 2
    s_p, m, x_prefill = prefill_pool(pre, p, isl)
    fit, cap, tau, occupancy = decode_pool(dec, d, isl, osl, ctx, k)
    x_decode = d.engines * cap / (k * tau(cap)) if k else float("inf")
    x = concurrency / (s_p + transfer_s + k * tau(1.0))
    for _ in range(100):
        b = occupancy(x)
        new = concurrency / (s_p + transfer_s + k * tau(b))
        if abs(new - x) <= 1e-9 * new:
            break
        x = 0.5 * (x + new)
    x = min(x, x_prefill, x_decode)
    b = occupancy(x)
    slack = max(0.0, concurrency / x - (s_p + transfer_s + k * tau(b)))
    # the clients wait before the prefill where it binds, or where the decode pool's pages bind and its engine
    # reserves them before the prefill; for a decode slot (a sequence limit), after the first token
    before_prefill = x_prefill <= x_decode or (dec.eng.name in DECODE_RESERVES_FIRST and fit < dec.eng.max_num_seqs)
    wait_p, wait_d = (slack, 0.0) if before_prefill else (0.0, slack)
    front = pre.request_s
    # an overlap scheduler plans a worker's next iteration while one runs: a request that finds the worker busy
    # joins an iteration later. A decode worker at b >= 1 is always busy; a prefill worker's queueing below its
    # capacity, that lag's included, is left out like the rest of it (the TTFT here is a lower bound)
    late_d = dec.eng.lag * tau(b) if b >= 1 else 0.0
    ttft = s_p + wait_p + transfer_s + front
    tpot = tau(b) + ((wait_d + late_d) / k if k else 0.0)
    e2e = ttft + k * tpot

    return {
        "ttft": _means(ttft),
        "tpot": _means(tpot),
        "e2e": _means(e2e),
        "queue_s": wait_p,
        "prefill_s": s_p,
        "requests_per_s": x,
        "per_user": osl / e2e,
        "waits": None,
        "most": saturation(x_prefill, x_decode),
        "prefill": {
            "mean_batch": 1.0 if x < x_prefill else float(m),
            "iterations": None,
            "busy_share": min(1.0, x * s_p / p.engines) if x < x_prefill else 1.0,
        },
        "decode": {"mean_batch": b, "iterations": None, "busy_share": min(1.0, b)},
    }


def saturation(x_prefill: float, x_decode: float) -> tuple[float, str]:
    """The most requests per second a disaggregated deployment completes, the lesser of its pools' (each busy all
    the time: :func:`steady_state`), and which pool that is."""
    return (x_prefill, "prefill pool") if x_prefill <= x_decode else (x_decode, "decode pool")


def _means(v: float) -> Stats:
    """A closed form's statistics: the mean stands for every one."""
    return Stats(mean=v, median=v, p90=v, p99=v)


def prefill_pool(pre: Setup, p: Pool, isl: int) -> tuple[float, int, float]:
    """(one prompt alone through a prefill worker, the prompts a busy worker batches, the most requests per second
    the pool prefills)."""
    s_p = prefill_time(pre, isl)
    budget = pre.eng.max_num_batched_tokens
    m = max(1, min(pre.eng.max_num_seqs, budget // isl, pre.kv_tokens // isl)) if isl <= budget else 1
    t_m = (
        pre.wall(pre.table.time(decode_seqs=0, decode_context_sum=0.0, chunks=[(0, isl)] * m, outputs=m).total_s, m)
        if m > 1
        else s_p
    )
    x_prefill = p.engines * m / t_m
    return s_p, m, x_prefill


def decode_pool(dec: Setup, d: Pool, isl: int, osl: int, ctx: float, k: int):
    """(requests a decode worker's cache holds, the most it runs at once, its iteration time at b sequences
    ``tau(b)``, the sequences per worker at a throughput ``occupancy(x)``)."""
    page = dec.eng.page_size
    if dec.eng.name in DECODE_RESERVES_FIRST:
        # its requests hold their tokens so far (on average the prompt and half the output) and a headroom each
        fit = int(dec.kv_tokens // (isl + osl / 2 + dec.eng.reserved_decode_tokens))
    else:
        fit = dec.kv_tokens // (page * -(-(isl + osl) // page))  # requests whose pages a decode worker holds
    cap = max(1, min(dec.eng.max_num_seqs, fit))

    grid = np.unique(np.concatenate([np.geomspace(1, cap, 64), np.arange(1, min(cap, 16) + 1)]))
    taus = dec.wall(np.array([float(dec.table.decode_run(b, b * ctx, 1)[0]) for b in grid]), grid)

    def tau(b: float) -> float:
        return float(np.interp(min(max(b, 1.0), cap), grid, taus))

    def occupancy(x: float) -> float:
        """Sequences per decode worker at throughput x: the least b >= 1 with b = x k tau(b) / D (Little's law),
        the limit where none is."""
        gap = grid - x * k * taus / d.engines
        if gap[0] >= 0:
            return max(x * k * taus[0] / d.engines, 0.0)
        up = np.nonzero(gap >= 0)[0]
        if not up.size:
            return float(cap)
        i = up[0]
        w = -gap[i - 1] / (gap[i] - gap[i - 1])
        return float(grid[i - 1] + w * (grid[i] - grid[i - 1]))

    return fit, cap, tau, occupancy

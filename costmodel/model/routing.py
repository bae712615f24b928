"""How a mixture of experts' tokens fall on its experts: the experts a batch touches, and the rows each expert gets under even or power-law routing."""

from __future__ import annotations

from functools import lru_cache

import numpy as np


def experts_touched(experts: int, top_k: int, tokens):
    """Expected distinct experts ``tokens`` tokens route to when each picks ``top_k`` of ``experts``
    uniformly at random: E (1 - (1 - k/E)^T). One token touches k; a large batch touches them all."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


def local_experts_touched(moe, tokens):
    """Distinct experts of one device that ``tokens`` tokens route to: each of its experts is touched with the
    probability 1 - (1 - k/E)^T of the whole model's E experts."""
    return moe.experts * (1 - (1 - moe.experts_per_token / moe.routed_experts) ** tokens)


#: Draws of a power-law routing averaged (fixed seed: the same answer every time).
POWER_LAW_DRAWS = 64


#: The tile heights (rows of M) in whose whole blocks a grouped kernel's experts are counted under skewed routing.
ROW_TILES = (16, 32, 64, 128, 256)


@lru_cache(maxsize=4096)
def _power_law_load(experts: int, top: int, ranks: int, alpha: float, tokens: int) -> tuple[float, float, tuple]:
    """(rows, experts touched, blocks) of the busiest of ``ranks`` devices, each holding a contiguous 1/ranks of
    the ``experts``, when ``tokens`` tokens' ``top`` rows fall on experts in proportion to loads drawn from a power
    law of exponent ``alpha`` over [1, 0.8 T] (over [0.01, 2] when there are fewer rows than experts), rounded to
    whole rows, the total kept (:func:`_restore_total`): the mean over :data:`POWER_LAW_DRAWS` draws. This is how
    aiconfigurator's MoE tables make their skewed routing (collector/helper.py power_law_logits_v3), timing the
    busiest device. ``blocks``: for each height
    of :data:`ROW_TILES`, the whole blocks of that many rows its experts' rows fill, each expert's own (a grouped
    kernel pads every expert's rows to whole blocks: vLLM's moe_align_block_size)."""
    rows = tokens * top
    lo, hi = (1.0, 0.8 * tokens) if rows > experts else (0.01, 2.0)
    u = np.random.default_rng(0).random((POWER_LAW_DRAWS, experts))
    a = 1.0 - alpha
    x = ((hi**a - lo**a) * u + lo**a) ** (1.0 / a)
    loads = np.round(x / x.sum(axis=1, keepdims=True) * rows)
    for draw in loads:  # the rows rounding gained or lost, as the collector puts them back
        _restore_total(draw, rows)
    loads = loads.reshape(POWER_LAW_DRAWS, ranks, experts // ranks)
    per_rank = loads.sum(axis=2)
    busiest = per_rank.argmax(axis=1)
    chosen = loads[np.arange(POWER_LAW_DRAWS), busiest]
    blocks = tuple(float(np.ceil(chosen / tm).sum(axis=1).mean()) for tm in ROW_TILES)
    return float(per_rank.max(axis=1).mean()), float((chosen > 0).sum(axis=1).mean()), blocks


def _restore_total(loads: np.ndarray, total: int) -> None:
    """Rounded loads brought back to ``total`` rows in place, as the collector does (power_law_logits_v3): a row
    each to the busiest experts in turn where rounding lost rows, a row each from the least busy expert that has
    one (else the busiest) where it gained them."""
    delta = int(total - loads.sum())
    order = np.argsort(-loads, kind="stable")
    for i in range(abs(delta)):
        if delta > 0:
            loads[order[i % len(order)]] += 1
        else:
            j = order[-(i % len(order)) - 1]
            loads[j if loads[j] > 0 else int(np.argmax(loads))] -= 1


def routed_load(moe, tokens):
    """(rows routed to the busiest device's experts, distinct experts of its own they touch) when ``tokens``
    tokens are routed as ``moe.routing`` says: ``uniform``, T k / ranks rows and
    :func:`local_experts_touched`; ``balanced``, T k / ranks rows on as many distinct experts as there are rows
    (at most the device's); ``power-law:ALPHA``, :func:`_power_law_load`."""
    rows = tokens * moe.experts_per_token / moe.expert_ranks
    if moe.routing == "uniform":
        return rows, local_experts_touched(moe, tokens)
    if moe.routing == "balanced":
        return rows, np.minimum(moe.experts, rows)
    pairs = [(rows, touched) for rows, touched, _ in _power_law_loads(moe, tokens)]
    if not np.ndim(tokens):
        return pairs[0]
    pairs = np.array(pairs).reshape(*np.shape(tokens), 2)
    return pairs[..., 0], pairs[..., 1]


def _power_law_loads(moe, tokens) -> list[tuple]:
    """:func:`_power_law_load` of every token count of ``tokens`` (a number or an array), flattened."""
    alpha = float(moe.routing.split(":")[1])
    return [
        _power_law_load(
            moe.routed_experts, moe.experts_per_token, moe.expert_ranks, alpha, max(1, int(round(float(n))))
        )
        for n in np.ravel(tokens)
    ]


def routed_blocks(moe, tokens) -> dict | None:
    """Under power-law routing, for each tile height of :data:`ROW_TILES`, the whole blocks of that many rows the
    busiest device's experts fill, each expert's rows padded on their own (an array over ``tokens``); None under
    uniform and balanced routing, whose experts' rows the mean per touched expert gives."""
    if not moe.routing.startswith("power-law"):
        return None
    blocks = np.array([b for _, _, b in _power_law_loads(moe, tokens)])
    return {
        tm: blocks[:, i].reshape(np.shape(tokens)) if np.ndim(tokens) else float(blocks[0, i])
        for i, tm in enumerate(ROW_TILES)
    }

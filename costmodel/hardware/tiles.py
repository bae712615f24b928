"""How a kernel's work falls on the device: GEMM tiles, dispatch and waves, systolic passes, and the score pairs of causal and windowed attention."""

from __future__ import annotations

import numpy as np

from costmodel.hardware.kernels import (
    KernelFacts,
)

#: The kernel facts a caller gives none of (a device states its own: costmodel.hardware.kernels.KernelFacts).
DEFAULT_KERNELS = KernelFacts()


def causal_pairs(n, m):
    """Query-key pairs a causal kernel computes when ``n`` queries are the last of ``m`` positions."""
    n, m = np.asarray(n, float), np.asarray(m, float)
    return n * m - n * (n - 1) / 2


def _floor_sum(count, step, start, divisor) -> np.ndarray:
    """``sum(floor((step * i + start) / divisor) for i in range(count))`` for non-negative integer arrays, in
    O(log) steps (the Euclidean-like reduction of floor sums)."""
    n, a, b, m = (np.asarray(x, np.int64).copy() for x in np.broadcast_arrays(count, step, start, divisor))
    total = np.zeros(n.shape, np.int64)
    while True:
        q = a // m
        total += (n - 1) * n // 2 * q
        a = a - q * m
        q = b // m
        total += n * q
        b = b - q * m
        y_max = a * n + b
        live = (n > 0) & (y_max >= m)
        if not live.any():
            return total
        n = np.where(live, y_max // np.maximum(m, 1), 0)
        b = np.where(live, y_max % np.maximum(m, 1), 0)
        m, a = np.where(live, a, 1), np.where(live, m, 0)


def blocked_causal_pairs(n, m, B: int = DEFAULT_KERNELS.prefill_block, keys: int | None = None):
    """Query-key pairs a causal kernel computes in whole blocks of ``B`` queries by ``keys`` keys (``B`` both ways
    where ``keys`` is None): query tile ``i`` of ``ceil(n / B)`` reads the key blocks up to its last query's
    position (queries are the last ``n`` of ``m`` positions), counted exactly."""
    n, m = np.asarray(n, float), np.asarray(m, float)
    T = np.ceil(n / B)
    if keys is None or np.all(np.asarray(keys) == B):
        offset = np.ceil(np.maximum(m - n, 0) / B)
        # tile i reads offset + i + 1 key blocks; only the last can overrun the ceil(m / B) there are, by one
        blocks = T * offset + T * (T + 1) / 2 - np.maximum(offset + T - np.ceil(m / B), 0)
        return blocks * B * B
    # tile i (0-based) ends at position o + (i + 1) B and reads ceil((o + (i + 1) B) / K) key blocks, o = m - n;
    # only the last tile's end can pass the m positions (the tile before it ends inside them)
    K = np.asarray(keys, float)
    o = np.ceil(np.maximum(m - n, 0))  # ceil((o + c) / K) = ceil((ceil(o) + c) / K) for whole c and K
    blocks = _floor_sum(T, B, o + B + K - 1, K).astype(float)
    blocks = blocks - np.maximum(np.ceil((o + T * B) / K) - np.ceil(m / K), 0)
    return blocks * B * K


def windowed_pairs(n, m, window, blocked: bool, B: int = DEFAULT_KERNELS.prefill_block, keys=None):
    """Query-key pairs of a causal kernel whose queries (the last ``n`` of ``m`` positions) attend to at
    most ``window`` positions each: exact, or in whole ``B`` blocks (query tile ``i`` reads
    at most ceil((window - 1) / B) + 1 key blocks: the window's span, rounded out to blocks). The block
    count is exact when the queries start on a block boundary, as a prefill's do (n = m). Tiles of ``B`` queries
    by ``keys`` keys (``keys`` not ``B``) are counted exactly: tile ``i`` reads the key blocks from the one holding
    its first query's earliest key to the one holding its last query."""
    n, m, w = (np.asarray(x, float) for x in (n, m, window))
    if blocked and keys is not None and not np.all(np.asarray(keys) == B):
        K = np.asarray(keys, float)
        T, o = np.ceil(n / B), np.ceil(np.maximum(m - n, 0))
        ends = blocked_causal_pairs(n, m, B, keys) / (B * K)  # key blocks up to each tile's last query
        # tile i's earliest key is o + i B - w + 1, in block floor(.. / K) once it is past position 0
        i0 = np.clip(np.ceil((w - 1 - o) / B), 0, T)
        starts = _floor_sum(T - i0, B, np.maximum(o + i0 * B - w + 1, 0), K)
        return (ends - starts) * B * K
    if not blocked:
        # query j (0-based among the last n) sits at position m - n + j and attends to min(m - n + j + 1, w)
        first = m - n + 1
        full = np.clip(w - first + 1, 0, n)  # queries that see their whole causal prefix (fewer than w keys)
        return full * first + full * (full - 1) / 2 + (n - full) * w
    T = np.ceil(n / B)
    a = np.ceil(np.maximum(m - n, 0) / B) + 1  # key blocks of the first query tile
    cap = np.ceil((w - 1) / B) + 1
    t = np.clip(cap - a + 1, 0, T)  # tiles below the cap read a, a + 1, ... blocks
    return (t * a + t * (t - 1) / 2 + (T - t) * np.minimum(cap, a + t)) * B * B


def m_tiles(batch, M, tm, m_blocks: dict | None = None, cluster=1):
    """Tiles of ``tm`` rows down the M side of ``batch`` products of ``M`` rows: ``batch x ceil(M / tm)`` (each
    product's rounded up to whole clusters of ``cluster`` tiles), or where the products' rows differ (``m_blocks``,
    by tile height: each product padded on its own), their sum."""
    out = np.asarray(batch, float) * _whole(np.ceil(np.asarray(M, float) / tm), cluster)
    for height, blocks in (m_blocks or {}).items():
        out = np.where(tm == height, np.asarray(blocks, float), out)
    return out


def gemm_candidates(
    batch,
    M,
    K,
    N,
    sms: float,
    small_tile_exponent: float,
    k_overhead: float = 0.0,
    kernels: KernelFacts = DEFAULT_KERNELS,
    m_blocks: dict | None = None,
):
    """(FLOPs, split-K chunks) of every configuration a library can run a GEMM in: each tile of
    ``kernels.gemm_tiles``, in whole waves of whole tiles at the largest tile's rate, with the reduction split over the
    SMs when there are too few tiles to fill them (chunks of at least ``kernels.split_k_min``) and without
    (``m_blocks``: :func:`m_tiles`)."""
    batch, M, K, N = (np.asarray(x, float) for x in (batch, M, K, N))
    largest = kernels.largest_tile
    for tm, tn in kernels.gemm_tiles:
        tiles = m_tiles(batch, M, tm, m_blocks) * np.ceil(N / tn)
        split = np.clip(np.floor(sms / np.maximum(tiles, 1)), 1, np.maximum(np.floor(K / kernels.split_k_min), 1))
        for splits in (split, np.ones_like(split)):
            waves = np.ceil(tiles * splits / sms)
            yield (
                waves * sms * tm * tn * (K / splits + k_overhead) * 2 / (tm * tn / largest) ** small_tile_exponent,
                splits,
            )


def _whole(tiles, cluster):
    """``tiles`` rounded up to whole clusters of ``cluster`` tiles."""
    return np.ceil(tiles / cluster) * cluster


def dispatched_tiles(rules, M, K, N) -> tuple[np.ndarray, ...]:
    """(tile rows, tile columns, SMs a tile runs on, cluster tiles along M, along N) a fixed dispatch
    (:class:`costmodel.hardware.profile.GemmDispatch` rules, the first that matches) runs for each problem (``M``: what
    the rules' M bounds are matched on)."""
    M, K, N = (np.asarray(x, float) for x in (M, K, N))
    tm, tn = np.zeros(np.broadcast(M, K, N).shape), np.zeros(np.broadcast(M, K, N).shape)
    per, cm, cn = np.ones(tm.shape), np.ones(tm.shape), np.ones(tm.shape)
    left = np.ones(tm.shape, bool)
    for rule in rules:
        hit = left.copy()
        if rule.m_min is not None:
            hit &= M >= rule.m_min
        if rule.m_max is not None:
            hit &= M <= rule.m_max
        if rule.n_max is not None:
            hit &= N <= rule.n_max
        if rule.k_max is not None:
            hit &= K <= rule.k_max
        tm, tn = np.where(hit, rule.tile[0], tm), np.where(hit, rule.tile[1], tn)
        per = np.where(hit, rule.sms, per)
        cm, cn = np.where(hit, rule.cluster[0], cm), np.where(hit, rule.cluster[1], cn)
        left &= ~hit
    return tm, tn, per, cm, cn


def dispatched_flops(
    rules,
    batch,
    M,
    K,
    N,
    sms: float,
    small_tile_exponent: float,
    k_overhead: float,
    largest: float,
    m_blocks: dict | None = None,
    keyed=None,
) -> np.ndarray:
    """FLOPs (at the largest tile's rate) of a GEMM whose tile a fixed dispatch chooses: whole waves of its tiles
    over the SMs, the whole reduction in each; a tile of a pair of SMs takes two of them, each with half its rows
    (``m_blocks``: :func:`m_tiles`; ``keyed``: what the rules' M bounds are matched on where it is not ``M``, a
    grouped kernel's tokens)."""
    tm, tn, per, cm, cn = dispatched_tiles(rules, M if keyed is None else keyed, K, N)
    tiles = m_tiles(batch, M, tm, m_blocks, cm) * _whole(np.ceil(np.asarray(N, float) / tn), cn)
    waves = np.ceil(tiles * per / sms)
    return (
        waves
        * sms
        * tm
        / per
        * tn
        * (np.asarray(K, float) + k_overhead)
        * 2
        / (tm * tn / largest) ** small_tile_exponent
    )


def gemm_tiled_flops(
    batch,
    M,
    K,
    N,
    sms: float,
    small_tile_exponent: float,
    k_overhead: float = 0.0,
    kernels: KernelFacts = DEFAULT_KERNELS,
):
    """FLOPs a GEMM costs in its cheapest configuration of :func:`gemm_candidates` (an optimising library
    picks it), as if done at the largest tile's rate."""
    return np.minimum.reduce(
        [c for c, _ in gemm_candidates(batch, M, K, N, sms, small_tile_exponent, k_overhead, kernels)]
    )


def systolic_flops(flops, shape: dict, tile) -> np.ndarray:
    """FLOPs at which a systolic matrix unit of ``tile`` (rows x columns of its stationary operand, a TPU's MXU
    128 x 128) does an op's products, as if every pass used the whole array: the stationary operand (a weight
    matrix; the keys, then the values, of one key/value head) is taken in whole tiles, and each tile holds the
    array for at least as many cycles as loading it takes (one per row of the tile), however few rows stream
    through it. A product of M streamed rows over a K x N stationary operand costs
    ``max(M, rows) x ceil(K / rows) rows x ceil(N / cols) cols`` multiply-adds; attention streams the query rows
    that share a key/value head (h / g per position) over that head's keys and values. ``shape``: the fields of a
    GEMM (``batch, M, K, N``), decode (``b, g, h, positions, k``) or prefill (``b, h, g, n, m, k``) shape; any
    other op's FLOPs are kept."""
    rows, cols = tile[0], tile[1]
    flops = np.asarray(flops, float)

    def scale(m, k, n):
        m, k, n = (np.maximum(np.asarray(x, float), 1) for x in (m, k, n))
        return np.maximum(m, rows) / m * (np.ceil(k / rows) * rows / k) * (np.ceil(n / cols) * cols / n)

    if "M" in shape:
        return flops * scale(shape["M"], shape["K"], shape["N"])
    if "k" not in shape:
        return flops
    group = np.asarray(shape["h"], float) / np.asarray(shape["g"], float)
    if "positions" in shape:  # decode: a query row per head of the group, over the cached positions
        return flops * scale(group, shape["k"], shape["positions"])
    return flops * scale(np.asarray(shape["n"], float) * group, shape["k"], shape["m"])

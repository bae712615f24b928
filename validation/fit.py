"""Fitting the efficiency mechanisms to published timings, and predicting published tables.

Every parameter is fitted by least squares on log(predicted / measured) (relative error, so a 10 us
op counts as much as a 10 ms one), with a Levenberg-Marquardt search from a few starting points; bounded
parameters are searched through a logistic map. numpy only.
"""

from __future__ import annotations

import numpy as np

from costmodel.hardware.mechanisms import MECHANISMS
from costmodel.hardware.profile import ClassEfficiency
from costmodel.price.op import Conventions, KernelOp, price
from costmodel.price.origin import TimeModel

#: Parameters fitted per class on its primary table, with (lower, upper, log-scaled) bounds.
BOUNDS = {
    "compute_efficiency": (0.001, 1.0, True),
    "small_tile_exponent": (0.0, 1.0, False),
    "tile_k_overhead": (0.0, 2048.0, False),
    "pack_passes": (0.0, 8.0, False),
    "bandwidth_ceiling": (0.05, 1.0, False),
    "bandwidth_half_bytes": (1e3, 1e11, True),
    "bandwidth_exponent": (0.05, 1.0, False),
    "unit_sm_s": (1e-9, 1e-4, True),
    "split_s": (1e-8, 1e-4, True),
    "score_s": (1e-16, 1e-10, True),
    "tile_s": (0.0, 2e-5, False),
    "unsplit_sm_bandwidth": (1e8, 1e12, True),
    "group_copy_s": (1e-8, 1e-4, True),
    "combine_split_s": (1e-9, 1e-5, True),
    "cache_write_ceiling": (0.05, 1.0, False),
    "fixed": (1e-8, 1e-3, True),
}
FREE = {
    "gemm": (
        "fixed",
        "compute_efficiency",
        "small_tile_exponent",
        "tile_k_overhead",
        "bandwidth_ceiling",
        "bandwidth_half_bytes",
        "bandwidth_exponent",
        "split_s",
    ),
    "decode_attention": (
        "fixed",
        "bandwidth_ceiling",
        "bandwidth_half_bytes",
        "bandwidth_exponent",
        "unit_sm_s",
        "split_s",
    ),
    # fp8 GEMMs (one scale per tensor, or per 128 x 128 block) are GEMM kernels of their own: the same mechanisms.
    # Per-tensor fp8 runs vLLM's CUTLASS kernel, whose tile a fixed dispatch picks, never split (no split_s), and
    # streams its weights through the memory the bf16 GEMM's curve describes (SHARED)
    "gemm_fp8": ("fixed", "compute_efficiency", "small_tile_exponent", "tile_k_overhead"),
    "gemm_fp8_block": (
        "fixed",
        "compute_efficiency",
        "small_tile_exponent",
        "tile_k_overhead",
        "bandwidth_ceiling",
        "bandwidth_half_bytes",
        "bandwidth_exponent",
        "split_s",
    ),
    # NVFP4 (Blackwell's W4A4 linear layer, its input quantization included): a block-scaled GEMM like fp8's
    "gemm_nvfp4": (
        "fixed",
        "compute_efficiency",
        "small_tile_exponent",
        "tile_k_overhead",
        "bandwidth_ceiling",
        "bandwidth_half_bytes",
        "bandwidth_exponent",
        "split_s",
    ),
    # the memory side of a prefill is mostly K and V re-read by every query tile (from L2), more than the
    # bytes counted once: its own curve, not decode attention's
    "prefill_attention": (
        "fixed",
        "compute_efficiency",
        "score_s",
        "tile_s",
        "bandwidth_ceiling",
        "bandwidth_half_bytes",
        "bandwidth_exponent",
    ),
    "norm": ("fixed", "bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent"),
    "elementwise": ("fixed", "bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent"),
    "activation": ("fixed", "bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent"),
    "softmax": ("fixed", "bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent"),
    # torch's LayerNorm is timed on the host only (eager): there a curve's ramp and the launch are the same
    # constant, so the launch and the ceiling are fitted and the kernel has no ramp of its own
    "layernorm": ("fixed", "bandwidth_ceiling"),
    "rotary": ("fixed", "bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent"),
}


#: A kernel's discrete behaviours, chosen by fitting each way and keeping the smaller error: per class, the
#: fields chosen and the ways (the starting parameters, and the parameters only that way has).
#: Parameters a class takes from another class of the same device instead of fitting them: per-tensor fp8
#: GEMMs read their operands through the same memory system as bf16 GEMMs, so they share the bf16 class's
#: achieved-bandwidth curve (fitted freely on the fp8 table alone, its ceiling went to 1.0, the bound).
SHARED = {"gemm_fp8": ("gemm", ("bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent"))}

CHOICES = {
    # a decode kernel splits every context, or only those whose query heads share a key/value head
    "decode_attention": (
        ("split_kv",),
        [
            ({"split_kv": "always"}, ()),
            ({"split_kv": "grouped"}, ("unsplit_sm_bandwidth", "group_copy_s", "combine_split_s")),
        ],
    ),
    # a prefill call writes the prompt's cache or not; a tile holds one query head or a group's
    "prefill_attention": (
        ("pack_gqa",),
        [
            (
                {"cache_write_ceiling": 0.5 if write else None, "pack_gqa": pack},
                ("cache_write_ceiling",) if write else (),
            )
            for write in (False, True)
            for pack in (False, True)
        ],
    ),
}
# a low-precision linear layer quantizes its activations in a kernel of its own before the GEMM (vLLM's
# scaled_fp8_quant with the static input scale the per-tensor table's layers carry; a per-token-group or NVFP4
# quantize before a block-scaled GEMM), or not (fused into the GEMM or an earlier kernel)
CHOICES |= {
    cls: (("quantize_input",), [({"quantize_input": False}, ()), ({"quantize_input": True}, ())])
    for cls in ("gemm_fp8", "gemm_fp8_block", "gemm_nvfp4")
}


def predict_table(table, hw, eff: ClassEfficiency, on=frozenset(MECHANISMS)) -> np.ndarray:
    """Predicted seconds of every row of a published table with a class's parameters."""
    op = KernelOp(table.op_class, table.op_class, table.dtype, table.flops, table.nbytes, kernel=table.priced_class)
    t = price(op, table.shape, hw, Conventions(TimeModel(None, table.timing, frozenset(on))), params=eff).time
    t = np.broadcast_to(np.asarray(t, float), table.measured_s.shape)
    return t * (table.count if table.count is not None else 1)


def unfitted_write_s(table, hw, eff, gemm=None, on=frozenset(MECHANISMS)) -> np.ndarray | float:
    """Seconds of the cache write a table's prompt calls hold (its engine version writes the prompt's keys and values
    inside the timed call: ``write_bytes`` in its shape) where the class's parameters price none:
    :func:`costmodel.price.transfer.held_write_s`, as ``costmodel predict --prompt-write in-call`` prices it. 0 for
    any other class."""
    from costmodel.price.transfer import held_write_s

    if table.priced_class != "prefill_attention":
        return 0.0
    seconds = held_write_s(eff, (table.shape or {}).get("write_bytes"), hw, gemm, table.timing, on)
    return seconds * (table.count if table.count is not None else 1)


def _to_value(name, z):
    lo, hi, log = BOUNDS[name]
    u = 1 / (1 + np.exp(-np.clip(z, -50, 50)))
    if not log and u < 1e-9:  # a linear parameter driven to its lower bound is the bound (0: the mechanism is absent)
        return float(lo)
    return float(np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo)))) if log else float(lo + u * (hi - lo))


def to_z(name, value):
    lo, hi, log = BOUNDS[name]
    u = (np.log(value) - np.log(lo)) / (np.log(hi) - np.log(lo)) if log else (value - lo) / (hi - lo)
    u = min(max(u, 1e-4), 1 - 1e-4)
    return float(np.log(u / (1 - u)))


def with_fitted(eff: ClassEfficiency, names, z, timing) -> ClassEfficiency:
    update, fixed = {}, dict(eff.fixed_s)
    for name, zi in zip(names, z):
        if name == "fixed":
            fixed[timing] = _to_value(name, zi)
        else:
            update[name] = _to_value(name, zi)
    return eff.model_copy(update={**update, "fixed_s": fixed})


def levenberg_marquardt(residual, z0, iterations=60):
    """Levenberg-Marquardt on a residual vector function; returns (z, cost)."""
    z, lam = np.array(z0, float), 1e-2
    r = residual(z)
    cost = float(r @ r)
    for _ in range(iterations):
        J = np.empty((r.size, z.size))
        for j in range(z.size):
            step = np.zeros_like(z)
            step[j] = 1e-5
            J[:, j] = (residual(z + step) - r) / 1e-5
        A, g = J.T @ J, J.T @ r
        while True:
            dz = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
            r_new = residual(z + dz)
            c_new = float(r_new @ r_new)
            if c_new < cost:
                z, r, lam = z + dz, r_new, max(lam / 3, 1e-9)
                improved = cost - c_new
                cost = c_new
                break
            lam *= 4
            if lam > 1e9:
                return z, cost
        if improved < 1e-10 * max(cost, 1e-30):
            break
    return z, cost


def fit_class(
    tables, hw, names=None, start: ClassEfficiency | None = None, starts=3, on=frozenset(MECHANISMS)
) -> ClassEfficiency:
    """Fit a class's parameters (``names``, default :data:`FREE`) to tables of one timing, with the
    mechanisms ``on``. A fit of a class's default parameters also chooses its kernel's behaviours
    (:data:`CHOICES`): each way is fitted and the one with the smaller error kept."""
    cls = tables[0].priced_class
    if names is None and cls in CHOICES:
        chosen, ways = CHOICES[cls]
        if not any("write_bytes" in t.shape for t in tables):  # timed calls that hold no cache write
            ways = [(way, more) for way, more in ways if not way.get("cache_write_ceiling")]
        base = start.model_dump() if start is not None else {}
        return _best_way(
            tables,
            hw,
            [(ClassEfficiency(**{**base, **way}), (*FREE[cls], *more)) for way, more in ways],
            chosen,
            starts,
            on,
        )
    return _fit(tables, hw, names, start, starts, on)[0]


def fit_overlap(tables, hw, names, on=frozenset(MECHANISMS), starts=3) -> ClassEfficiency:
    """Fit a class's ``names`` each way its kernel may run, compute hiding memory traffic (``max``) or the
    two in turn (``sum``), and keep the way with the smaller error (a class without FLOPs: ``max``)."""
    return _best_way(
        tables, hw, [(ClassEfficiency(overlap=way), names) for way in ("max", "sum")], ("overlap",), starts, on
    )


def _best_way(tables, hw, ways, chosen, starts, on) -> ClassEfficiency:
    """Fit each way (its starting parameters and the names it fits), keep the one with the smaller error,
    and mark the ``chosen`` fields fitted."""
    fits = [_fit(tables, hw, names, start, starts, on) for start, names in ways]
    eff = min(fits, key=lambda f: f[1])[0]
    return eff.model_copy(update={"fitted": tuple(sorted({*eff.fitted, *chosen}))})


def _fit(tables, hw, names, start, starts, on) -> tuple[ClassEfficiency, float]:
    cls, timing = tables[0].priced_class, tables[0].timing
    names = tuple(names or FREE[cls])
    start = start or ClassEfficiency()
    measured = np.concatenate([t.measured_s for t in tables])

    def residual(z):
        eff = with_fitted(start, names, z, timing)
        pred = np.concatenate([predict_table(t, hw, eff, on) for t in tables])
        return np.log(pred / measured)

    # starting points: the first three serve the GPU fits; the last two reach far-from-peak kernels (a CPU's)
    inits = {
        "fixed": [5e-6, 2e-6, 2e-5, 1e-5, 5e-5],
        "compute_efficiency": [0.7, 0.5, 0.9, 0.05, 0.01],
        "small_tile_exponent": [0.2, 0.5, 0.05, 0.2, 0.2],
        "tile_k_overhead": [64, 256, 16, 64, 64],
        "bandwidth_ceiling": [0.8, 0.6, 0.95, 0.3, 0.1],
        "bandwidth_half_bytes": [1e7, 1e6, 1e8, 1e5, 1e6],
        "bandwidth_exponent": [0.7, 1.0, 0.4, 0.7, 1.0],
        "unit_sm_s": [2e-6, 5e-7, 5e-6, 2e-6, 2e-6],
        "split_s": [3e-6, 1e-6, 1e-5, 3e-6, 3e-6],
        "score_s": [2e-13, 1e-14, 1e-12, 2e-13, 2e-13],
        "tile_s": [1e-6, 3e-7, 3e-6, 1e-6, 1e-6],
        "pack_passes": [1.0, 2.0, 0.5, 3.0, 1.0],
        "unsplit_sm_bandwidth": [2e10, 5e10, 1e10, 2e10, 2e10],
        "group_copy_s": [3e-6, 1e-6, 1e-5, 3e-6, 3e-6],
        "combine_split_s": [2e-7, 5e-8, 1e-6, 2e-7, 2e-7],
        "cache_write_ceiling": [0.5, 0.3, 0.8, 0.5, 0.5],
    }
    best = None
    for i in range(starts):
        z0 = [to_z(n, inits[n][i % 5]) for n in names]
        z, cost = levenberg_marquardt(residual, z0)
        if best is None or cost < best[1]:
            best = (z, cost)
    eff = with_fitted(start, names, best[0], timing)
    return eff.model_copy(update={"fitted": tuple(sorted(set(eff.fitted) | set(names)))}), best[1]


def errors(pred, measured) -> dict:
    e = np.abs(pred / measured - 1) * 100
    return {
        "n": int(e.size),
        "median_abs_error_pct": round(float(np.median(e)), 2),
        "p90_abs_error_pct": round(float(np.percentile(e, 90)), 2),
    }

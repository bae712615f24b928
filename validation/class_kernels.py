"""What one kernel of each op class reaches on a device, measured with the validation's own timer: the
bandwidth (and, for fused attention, the FLOP rate) of a representative kernel, as the slope between a large
operand and a tiny one, and its time on the tiny one, written as a measured profile's per-class ``efficiency``
(:func:`measured_efficiency`). A GPU's calibration uses them; a CPU's classes are fitted to curves over sizes
instead (:mod:`costmodel.validation.calibrate`).

An eager kernel's time is its fixed cost per call (on a GPU, mostly the host's dispatch of the torch op, about
17 µs for a scale and 43 µs for an einsum on an H200 under torch 2.11) plus its bytes over the bandwidth it
reaches. So the bandwidth is the bytes' difference over the time's difference between the two sizes, not the
large operand's bytes over its whole time, which would count the fixed cost twice (once as itself, once as a
lower bandwidth); and the large operand is large enough (1 GiB on a GPU) that its bytes take many times the
fixed cost.
"""

from __future__ import annotations

import torch

from costmodel.counts.program import build_program
from costmodel.validation.kernels import TORCH_DTYPES
from costmodel.validation.timing import Timer


def _decode_einsums() -> tuple[str, str]:
    """The equations of a decode step's query projection and logits, from the program itself."""
    ops = {op.name: op for op in build_program("gqa", "incremental").ops}
    return ops["q_proj"].einsum, ops["logits"].einsum


def _class_benchmarks(
    device: str, dtype: str, nbytes: int, flops_per_s: float | None = None
) -> dict[str, dict[str, tuple]]:
    """Per op class: {"bandwidth" | "flops": (callable, bytes or FLOPs it moves or does)}, at about ``nbytes``."""
    import torch.nn.functional as F

    from costmodel.validation.kernels import copy_free_order, grouped_attention

    t = TORCH_DTYPES[dtype]
    width = torch.finfo(t).bits // 8
    new = lambda *shape: torch.randn(shape, device=device, dtype=t)  # noqa: E731
    heads, k = 16, 128
    # projection: x [8, d] through a weight [h, d, k] stored GEMM-ready (a decode step's projection)
    d = max(128, int((nbytes / width) ** 0.5) // 128 * 128)
    h = d // k
    project, logits = _decode_einsums()
    order = copy_free_order(project, ((8, d), (h, d, k)), 1)
    weight = new(*((h, d, k)[j] for j in order)).permute(*sorted(range(3), key=order.__getitem__))
    x = new(8, d)
    # attention: a decode step's logits over a cache of m positions, (b, g, m, k) with g = 16 heads
    m = max(2, nbytes // width // (heads * k))
    q1, cache = new(1, heads, 1, k), new(1, heads, m, k)
    # elementwise: scale; copy: write one position of a (b, g, 2, k) cache in place
    y = new(max(8, nbytes // width // 2))
    rows = max(1, nbytes // width // (2 * 8 * k))
    slots, step = new(rows, 8, 2, k), new(rows, 8, k)

    def append():
        slots[:, :, 1] = step

    # fused decode: SDPA of one query position; MHA-shaped for bandwidth, MQA-shaped for its FLOP rate
    mk = max(2, nbytes // width // (2 * heads * k))
    qd, kv = new(1, heads, 1, k), new(1, heads, mk, k)
    one = new(1, 1, mk, k)
    # fused prefill: SDPA of n = m positions, compute-bound
    n = 2 if nbytes < (1 << 20) else 512
    while flops_per_s and n < PREFILL_MAX and 4 * heads * n * n * k / flops_per_s < 1e-3:
        n *= 2  # at least about 1 ms of FLOPs at the peak, so the call's fixed cost is a small part of it
    while flops_per_s and n > 64 and 4 * heads * n * n * k / flops_per_s > 0.05:
        n //= 2  # keep one prefill call under about 50 ms where this dtype's matmuls are slow
    qp, kp = new(1, heads, n, k), new(1, heads, n, k)
    return {
        "projection": {
            "bandwidth": (lambda: torch.einsum(project, x, weight), width * (8 * d + d * h * k + 8 * h * k))
        },
        "attention": {
            "bandwidth": (lambda: torch.einsum(logits, q1, cache), width * (2 * heads * k + heads * m * k + heads * m))
        },
        "elementwise": {"bandwidth": (lambda: y * 0.5, 2 * width * y.numel())},
        "copy": {"bandwidth": (append, 2 * width * step.numel())},
        "fused_decode": {
            "bandwidth": (
                lambda: F.scaled_dot_product_attention(qd, kv, kv),
                width * (2 * kv.numel() + 2 * qd.numel()),
            ),
            "flops": (lambda: grouped_attention(qd, one, one), 4 * heads * mk * k),
        },
        "fused_prefill": {"flops": (lambda: F.scaled_dot_product_attention(qp, kp, kp), 4 * heads * n * n * k)},
    }


#: The large operand per device: on a GPU, 1 GiB (its bytes take about 200 µs at 5 TB/s, many times an eager
#: call's fixed cost); on a CPU, 16 MiB (far larger outputs measure page faults, not bandwidth).
LARGE_BYTES = {"cuda": 1 << 30, "cpu": 16 << 20}
#: The tiny operand, whose time is the call's fixed cost.
TINY_BYTES = 1024
#: The longest prefill of the FLOP-rate kernel (positions).
PREFILL_MAX = 8192


def rate(amount: float, seconds: float, tiny_amount: float, tiny_seconds: float) -> float:
    """What a kernel moves or does per second beyond its fixed cost: the slope between a large and a tiny
    call, ``(amount - tiny_amount) / (seconds - tiny_seconds)``; where noise makes the tiny call take as long
    as the large one, the large call's plain rate (a lower bound)."""
    if seconds > tiny_seconds and amount > tiny_amount:
        return (amount - tiny_amount) / (seconds - tiny_seconds)
    return amount / seconds


def measure_op_classes(device: str, peaks: dict[str, float], quick: bool) -> dict:
    """Bandwidth (and, for fused attention, FLOP rate) per op class and dtype, as the slope between a large
    and a tiny operand (:func:`rate`), and the tiny call's time (the fixed cost), the median over dtypes."""
    import statistics

    large = LARGE_BYTES[device]
    timer = Timer(device, budget_s=0.1 if quick else 0.3, wall_budget=quick)
    classes: dict[str, dict] = {}
    fixed: dict[str, list[float]] = {}
    from costmodel.core.progress import bar

    with bar(len(peaks), "op class dtypes") as advance:
        for dtype in peaks:
            tiny = {
                kind: {q: (timer.time(fn).median_s, amount) for q, (fn, amount) in benches.items()}
                for kind, benches in _class_benchmarks(device, dtype, TINY_BYTES).items()
            }
            for kind, benches in _class_benchmarks(device, dtype, large, peaks[dtype]).items():
                entry = classes.setdefault(kind, {"flops_per_s": {}, "bandwidth_bytes_per_s": {}})
                for quantity, (fn, amount) in benches.items():
                    key = "flops_per_s" if quantity == "flops" else "bandwidth_bytes_per_s"
                    tiny_s, tiny_amount = tiny[kind][quantity]
                    entry[key][dtype] = rate(amount, timer.time(fn).median_s, tiny_amount, tiny_s)
                fixed.setdefault(kind, []).append(next(iter(tiny[kind].values()))[0])
            if device == "cuda":
                torch.cuda.empty_cache()
            advance()
    for kind, times in fixed.items():
        classes[kind]["overhead_s"] = statistics.median(times)
    return {"classes": classes, "large_bytes": large, "timing_method": timer.method}


#: The efficiency classes each measured kernel stands for: a program op kind's kernel prices every class of
#: that kind (an RMSNorm, a softmax and an activation run elementwise kernels like the measured scale).
MEASURED_CLASSES = {
    "projection": ("gemm",),
    "attention": ("attention_einsum",),
    "copy": ("copy",),
    "elementwise": ("elementwise", "norm", "layernorm", "softmax", "activation", "rotary"),
    "fused_decode": ("decode_attention",),
    "fused_prefill": ("prefill_attention",),
}


def measured_efficiency(measured: dict, peaks: dict[str, float], read_bytes_per_s: float, device: str) -> dict:
    """The profile's ``efficiency`` block from one measured kernel per op class (:func:`measure_op_classes`):
    per class, a fixed cost per call (eager timing: each kernel timed alone) and the fractions of the measured
    matmul peak and read bandwidth its kernel reached, the median over dtypes, at most 1 (the profile's rates
    are the ceilings the time model scales). Nothing is fitted: each number is one kernel's measurement."""
    import statistics

    classes = {}
    for kind, c in measured["classes"].items():
        entry = {"fixed_s": {"eager": float(c["overhead_s"])}, "fitted": ["fixed"]}
        if c["flops_per_s"]:
            entry["compute_efficiency"] = min(
                1.0, statistics.median(rate / peaks[dt] for dt, rate in c["flops_per_s"].items())
            )
            entry["fitted"].append("compute_efficiency")
        if c["bandwidth_bytes_per_s"]:
            entry["bandwidth_ceiling"] = min(
                1.0, statistics.median(c["bandwidth_bytes_per_s"].values()) / read_bytes_per_s
            )
            entry["fitted"].append("bandwidth_ceiling")
        for cls in MEASURED_CLASSES[kind]:
            classes[cls] = entry
    method = (
        f"measured, not fitted: one kernel per op class on about {measured['large_bytes'] >> 20} MiB and on "
        f"about {TINY_BYTES >> 10} KiB (bandwidth of a projection einsum with 8 rows, a decode logits einsum, a "
        "scale, a cache-slice write and a decode-step SDPA of 16 heads; FLOP rate of a decode SDPA with one "
        f"key/value head and of a prefill SDPA of up to {PREFILL_MAX} positions), each rate the slope between "
        "the two sizes (bytes or FLOPs beyond the tiny call's over the time beyond it), as fractions of the "
        "matmul peak and read bandwidth (median over dtypes, at most 1); fixed cost per call: the tiny call's "
        f"time (median over dtypes); {measured['timing_method']}"
    )
    return {
        "data": [f"costmodel calibrate on {device}"],
        "method": method,
        "classes": classes,
        "mechanisms": ["fixed", "bandwidth", "compute"],
    }

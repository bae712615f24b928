"""Measure a device and write a hardware profile in the shipped schema, marked as measured.

What is measured, each a physical quantity with a name (nothing is fitted to validation cases):

* matmul FLOP/s per dtype: an N x N x N matmul, 2 N^3 FLOPs over the median time;
* memory bandwidth: reading a large buffer (a sum) and copying it (read + write counted); the
  profile's bandwidth is the read figure, since attention's traffic is mostly reads (K, V, weights);
* per-op overhead: back-to-back launches of a one-element add, which on a CPU is torch's eager
  dispatch and on a GPU the launch cost;
* per op class (einsum, elementwise, copy, fused attention) and dtype: the bandwidth a
  representative kernel of that class reaches on a large operand (a projection-shaped einsum with 8
  rows, a scale, a cache-slice write, a decode-step SDPA), and the same kernel's time at a tiny size
  (its overhead). These use the validation's own timer, cache flush included, at fixed sizes that do
  not depend on any validation case.
"""

from __future__ import annotations

import datetime
import os
import time

import torch

from costmodel.files import write_text
from costmodel.program import build_program
from costmodel.validation.kernels import TORCH_DTYPES
from costmodel.validation.timing import Timer, environment

SIZES = {  # (matmul N, bandwidth buffer bytes) per device and mode
    ("cpu", True): (512, 64 << 20), ("cpu", False): (2048, 512 << 20),
    ("cuda", True): (2048, 256 << 20), ("cuda", False): (8192, 2 << 30),
}


#: Longest one matmul of the peak measurement may take (quick, full): a dtype without fast kernels on this
#: device (bf16 on a CPU without AVX-512 BF16 runs at about 1 GFLOP/s) is measured on a smaller N.
MATMUL_SECONDS = {True: 0.02, False: 0.1}


def _matmul_size(device: str, dtype: str, largest: int, seconds: float) -> int:
    """The largest power-of-two N <= ``largest`` whose N x N x N matmul takes at most about ``seconds``."""
    size = 128
    while size < largest:
        a = torch.randn(size, size, device=device, dtype=TORCH_DTYPES[dtype])
        a @ a  # warm-up: the first product of a size pays for kernel selection
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ a
        if device == "cuda":
            torch.cuda.synchronize()
        if (time.perf_counter() - start) * 8 > seconds:  # the next size takes 8x as long
            break
        size *= 2
    return size


def _dtypes(device: str) -> list[str]:
    if device == "cuda":
        return ["fp32", "tf32", "bf16", "fp16"]
    return ["fp32", "bf16"]


def measure(device: str, quick: bool = False) -> dict:
    """Achievable matmul FLOP/s per dtype, read and copy bandwidth, and per-op overhead."""
    n, buffer_bytes = SIZES[(device, quick)]
    timer = Timer(device, flush_bytes=0, budget_s=0.3 if quick else 1.0)
    peaks, sizes = {}, {}
    for dt in _dtypes(device):
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        sizes[dt] = size = _matmul_size(device, dt, n, MATMUL_SECONDS[quick])
        a = torch.randn(size, size, device=device, dtype=TORCH_DTYPES[dt])
        b = torch.randn(size, size, device=device, dtype=TORCH_DTYPES[dt])
        peaks[dt] = 2 * size**3 / timer.time(lambda: a @ b).median_s
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    src = torch.ones(buffer_bytes // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    read = buffer_bytes / timer.time(lambda: src.sum()).median_s
    copy = 2 * buffer_bytes / timer.time(lambda: dst.copy_(src)).median_s
    tiny = torch.ones(1, device=device)
    launches = 200

    def burst():
        for _ in range(launches):
            torch.add(tiny, 1.0)
        if device == "cuda":
            torch.cuda.synchronize()
    overhead = Timer(device, flush_bytes=0, budget_s=0.2).time(burst).median_s / launches
    return {
        "peak_flops_per_s": peaks, "read_bytes_per_s": read, "copy_bytes_per_s": copy, "launch_overhead_s": overhead,
        "matmul_n": sizes, "buffer_bytes": buffer_bytes, "timing_method": timer.method,
    }


def _decode_einsums() -> tuple[str, str]:
    """The equations of a decode step's query projection and logits, from the program itself."""
    ops = {op.name: op for op in build_program("gqa", "incremental").ops}
    return ops["q_proj"].einsum, ops["logits"].einsum


def _class_benchmarks(device: str, dtype: str, nbytes: int, flops_per_s: float | None = None
                      ) -> dict[str, dict[str, tuple]]:
    """Per op class: {"bandwidth" | "flops": (callable, bytes or FLOPs it moves or does)}, at about ``nbytes``."""
    import torch.nn.functional as F

    from costmodel.validation.kernels import copy_free_order

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
    while flops_per_s and n > 64 and 4 * heads * n * n * k / flops_per_s > 0.05:
        n //= 2  # keep one prefill call under about 50 ms where this dtype's matmuls are slow
    qp, kp = new(1, heads, n, k), new(1, heads, n, k)
    return {
        "projection": {"bandwidth": (lambda: torch.einsum(project, x, weight),
                                     width * (8 * d + d * h * k + 8 * h * k))},
        "attention": {"bandwidth": (lambda: torch.einsum(logits, q1, cache),
                                    width * (2 * heads * k + heads * m * k + heads * m))},
        "elementwise": {"bandwidth": (lambda: y * 0.5, 2 * width * y.numel())},
        "copy": {"bandwidth": (append, 2 * width * step.numel())},
        "fused_decode": {
            "bandwidth": (lambda: F.scaled_dot_product_attention(qd, kv, kv), width * (2 * kv.numel() + 2 * qd.numel())),
            "flops": (lambda: F.scaled_dot_product_attention(qd, one, one, enable_gqa=True), 4 * heads * mk * k),
        },
        "fused_prefill": {"flops": (lambda: F.scaled_dot_product_attention(qp, kp, kp), 4 * heads * n * n * k)},
    }


def measure_op_classes(device: str, peaks: dict[str, float], quick: bool) -> dict:
    """Bandwidth (and, for fused attention, FLOP rate) per op class and dtype, and overhead on tiny sizes."""
    large = 16 << 20  # the order of a decode step's tensors; far larger outputs measure page faults, not bandwidth
    timer = Timer(device, budget_s=0.1 if quick else 0.3)
    classes: dict[str, dict] = {}
    dtypes = list(peaks)
    for dtype in dtypes:
        for kind, benches in _class_benchmarks(device, dtype, large, peaks[dtype]).items():
            entry = classes.setdefault(kind, {"flops_per_s": {}, "bandwidth_bytes_per_s": {}})
            for quantity, (fn, amount) in benches.items():
                key = "flops_per_s" if quantity == "flops" else "bandwidth_bytes_per_s"
                entry[key][dtype] = amount / timer.time(fn).median_s
    for kind, benches in _class_benchmarks(device, dtypes[0], 1024).items():
        fn = next(iter(benches.values()))[0]
        classes[kind]["overhead_s"] = timer.time(fn).median_s
    return {"classes": classes, "large_bytes": large, "timing_method": timer.method}


def _capacity_and_cache(device: str) -> tuple[float, float, str]:
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        return float(props.total_memory), float(getattr(props, "L2_cache_size", 0) or 50 << 20), "L2"
    capacity = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cache = 32 << 20
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size", encoding="utf-8") as f:
            text = f.read().strip()
        cache = int(text.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}[text[-1]]
    except (OSError, ValueError, KeyError):
        pass
    return float(capacity), float(cache), "L3"


def profile_from(m: dict, device: str) -> dict:
    """A profile dict in the shipped schema, every number measured."""
    env = environment(device)
    today = datetime.date.today().isoformat()
    capacity, cache, cache_kind = _capacity_and_cache(device)
    slug = "".join(c if c.isalnum() else "_" for c in env["device_name"].lower()).strip("_")
    sizes = ", ".join(f"{dt} {n}" for dt, n in m["matmul_n"].items())
    method = (f"costmodel calibrate: N^3 matmul per dtype (N: {sizes}); read (sum) and copy of a "
              f"{m['buffer_bytes'] >> 20} MiB buffer, bandwidth = read; per-op overhead from 200 back-to-back "
              f"one-element adds; {m['timing_method']}")
    classes = m.get("op_classes")
    if classes:
        method += (f". Op classes, on about {classes['large_bytes'] >> 20} MiB: bandwidth of a projection einsum "
                   f"with 8 rows, a decode logits einsum, a scale, a cache-slice write and a decode-step SDPA "
                   f"(16 heads); FLOP rate of a decode SDPA with one key/value head and of a prefill SDPA of up to 512 "
                   f"positions; overheads of the same kernels on about 1 KiB; {classes['timing_method']}")

    def measured(value: float) -> dict:
        return {"value": float(value), "source": "measured", "confidence": "measured"}
    return {
        "id": f"measured_{slug}"[:60], "aliases": [], "name": f"{env['device_name']} (measured)",
        "vendor": "measured", "kind": "gpu" if device == "cuda" else "cpu",
        "peak_flops_per_s": {dt: measured(v) for dt, v in m["peak_flops_per_s"].items()},
        "memory_bandwidth_bytes_per_s": measured(m["read_bytes_per_s"]),
        "memory_capacity_bytes": {"value": capacity, "source": "system", "confidence": "high"},
        "on_chip_memory_bytes": {"value": cache, "source": "system", "confidence": "high"},
        "on_chip_memory_kind": cache_kind,
        "launch_overhead_s": measured(m["launch_overhead_s"]),
        "op_classes": {
            kind: {"flops_per_s": {dt: measured(v) for dt, v in c["flops_per_s"].items()},
                   "bandwidth_bytes_per_s": {dt: measured(v) for dt, v in c["bandwidth_bytes_per_s"].items()},
                   "overhead_s": measured(c["overhead_s"])}
            for kind, c in (classes or {}).get("classes", {}).items()
        },
        "measured": {"device": f"{env['device_name']} ({env['backend']})", "date": today,
                     "torch_version": env["torch_version"], "method": method},
        "sources": {
            "measured": f"measured on {env['device_name']} on {today} with torch {env['torch_version']}: {method}",
            "system": "reported by the system (torch device properties, sysconf, /sys cache sizes)",
        },
        "notes": f"copy bandwidth (read + write counted) {m['copy_bytes_per_s'] / 1e9:.1f} GB/s; "
                 f"read bandwidth {m['read_bytes_per_s'] / 1e9:.1f} GB/s.",
    }


def calibrate(device: str, out: str | None = None, quick: bool = False) -> dict:
    """Measure ``device`` and (optionally) write the profile to ``out`` atomically; returns the profile dict."""
    import yaml

    start = time.perf_counter()
    m = measure(device, quick)
    m["op_classes"] = measure_op_classes(device, m["peak_flops_per_s"], quick)
    profile = profile_from(m, device)
    profile["notes"] += f" Calibration took {time.perf_counter() - start:.1f} s."
    if out:
        header = ("# A MEASURED profile written by `costmodel calibrate`; see `measured` for on what, when and how.\n")
        write_text(out, header + yaml.safe_dump(profile, sort_keys=False, width=110))
    return profile

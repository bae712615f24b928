"""Measure a device and write a hardware profile in the shipped schema, marked as measured.

What is measured, each a physical quantity with a name (nothing is fitted to validation cases):

* matmul FLOP/s per dtype: an N x N x N matmul, 2 N^3 FLOPs over the median time;
* memory bandwidth: reading a large buffer (a sum) and copying it (read + write counted); the
  profile's bandwidth is the read figure, since attention's traffic is mostly reads (K, V, weights);
* per-op overhead: back-to-back launches of a one-element add, which on a CPU is torch's eager
  dispatch and on a GPU the launch cost;
* on a GPU, per op class (einsum, elementwise, copy, fused attention) and dtype: the bandwidth a
  representative kernel of that class reaches on a large operand (a projection-shaped einsum with 8
  rows, a scale, a cache-slice write, a decode-step SDPA), and the same kernel's time at a tiny size
  (its overhead), written as the profile's per-class ``efficiency`` (:func:`measured_efficiency`). These
  use the validation's own timer, cache flush included, at fixed sizes that do not depend on any
  validation case;
* on a CPU, the same classes' mechanisms fitted to curves over sizes (:func:`fit_curves`).
"""

from __future__ import annotations

import datetime
import os
import time

import torch

from costmodel.core.files import write_text
from costmodel.validation.class_kernels import measure_op_classes, measured_efficiency
from costmodel.validation.curves import CurveRun, fit_curves
from costmodel.validation.rates import (
    MATMUL_SECONDS,
    SIZES,
    matmul_rate,
    matmul_size,
    measured_dtypes,
    rates_timer,
    read_bandwidth,
)
from costmodel.validation.timing import Timer, environment


def measure(device: str, quick: bool = False) -> dict:
    """Achievable matmul FLOP/s per dtype, read and copy bandwidth, and per-op overhead."""
    n, buffer_bytes = SIZES[(device, quick)]
    timer = rates_timer(device, quick)
    peaks, sizes = {}, {}
    from costmodel.core.progress import bar

    dtypes = measured_dtypes(device)
    with bar(len(dtypes), "matmul dtypes") as advance:
        for dt in dtypes:
            if device == "cuda":
                torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
            sizes[dt] = size = matmul_size(device, dt, n, MATMUL_SECONDS[quick])
            peaks[dt] = matmul_rate(device, dt, size, timer)
            advance()
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    read = read_bandwidth(device, buffer_bytes, timer)
    src = torch.ones(buffer_bytes // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
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
        "peak_flops_per_s": peaks,
        "read_bytes_per_s": read,
        "copy_bytes_per_s": copy,
        "launch_overhead_s": overhead,
        "matmul_n": sizes,
        "buffer_bytes": buffer_bytes,
        "timing_method": timer.method,
    }


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
    method = (
        f"costmodel calibrate: N^3 matmul per dtype (N: {sizes}); read (sum) and copy of a "
        f"{m['buffer_bytes'] >> 20} MiB buffer, bandwidth = read; per-op overhead from 200 back-to-back "
        f"one-element adds; {m['timing_method']}"
    )

    def measured(value: float) -> dict:
        return {"value": float(value), "source": "measured", "confidence": "measured"}

    return {
        "id": f"measured_{slug}"[:60],
        "aliases": [],
        "name": f"{env['device_name']} (measured)",
        "vendor": "measured",
        "kind": "gpu" if device == "cuda" else "cpu",
        "peak_flops_per_s": {dt: measured(v) for dt, v in m["peak_flops_per_s"].items()},
        "memory_bandwidth_bytes_per_s": measured(m["read_bytes_per_s"]),
        "memory_capacity_bytes": {"value": capacity, "source": "system", "confidence": "high"},
        "on_chip_memory_bytes": {"value": cache, "source": "system", "confidence": "high"},
        "on_chip_memory_kind": cache_kind,
        "launch_overhead_s": measured(m["launch_overhead_s"]),
        "measured": {
            "device": f"{env['device_name']} ({env['backend']})",
            "date": today,
            "torch_version": env["torch_version"],
            "method": method,
        },
        "sources": {
            "measured": f"measured on {env['device_name']} on {today} with torch {env['torch_version']}: {method}",
            "system": "reported by the system (torch device properties, sysconf, /sys cache sizes)",
        },
        "notes": f"copy bandwidth (read + write counted) {m['copy_bytes_per_s'] / 1e9:.1f} GB/s; "
        f"read bandwidth {m['read_bytes_per_s'] / 1e9:.1f} GB/s.",
    }


HEADER = "# A MEASURED profile written by `costmodel calibrate`; see `measured` for on what, when and how.\n"


def write_profile(path: str, profile: dict) -> None:
    """A measured profile dict as YAML with its header, written atomically."""
    import yaml

    write_text(path, HEADER + yaml.safe_dump(profile, sort_keys=False, width=110))


def calibrate(device: str, out: str | None = None, quick: bool = False, threads: int | None = None) -> dict:
    """Measure ``device`` and (optionally) write the profile to ``out`` atomically; returns the profile dict.
    On a CPU, ``threads`` sets torch's thread count first, and the op classes' mechanisms are fitted to
    curves over sizes (:func:`fit_curves`); the profile's ``noise`` records how quiet the machine was."""
    return finish(device, quick, *measure_profile(device, quick, threads), out=out)


def measure_profile(device: str, quick: bool, threads: int | None = None) -> tuple[dict, float | None, float]:
    """The profile's measured rates (matmul peaks, bandwidths, overheads; on a GPU each op class's measured
    kernel as its efficiency), without a CPU's fitted curves; the load average before and the start time."""
    if device == "cpu" and threads:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    m = measure(device, quick)
    profile = profile_from(m, device)
    profile["architecture"] = {
        "generation": "measured",
        "compute_units": {
            "value": int(torch.cuda.get_device_properties(0).multi_processor_count)
            if device == "cuda"
            else int(torch.get_num_threads()),
            "source": "system",
            "confidence": "high",
        },
    }
    if device == "cuda":  # a CPU's classes are fitted to curves over sizes instead (finish)
        profile["efficiency"] = measured_efficiency(
            measure_op_classes(device, m["peak_flops_per_s"], quick),
            m["peak_flops_per_s"],
            m["read_bytes_per_s"],
            profile["measured"]["device"],
        )
    return profile, load_before, start


def finish(
    device: str,
    quick: bool,
    profile: dict,
    load_before: float | None,
    start: float,
    curves: CurveRun | None = None,
    out: str | None = None,
) -> dict:
    """A measured profile with its curves fitted (on a CPU: ``curves`` already timed alongside a validation,
    else timed here) and its noise check, written to ``out``."""
    from costmodel.validation.timing import noise_check

    spreads: list[float] = []
    if device == "cpu":
        profile["efficiency"], spreads = curves.fit(profile) if curves else fit_curves(device, profile, quick)
    profile["noise"] = noise_check(load_before, spreads, torch.get_num_threads())
    took = time.perf_counter() - start
    profile["notes"] += (
        f" Its curves were timed alongside {curves.alongside}; the whole run took {took:.1f} s."
        if curves is not None and curves.alongside
        else f" Calibration took {took:.1f} s."
    )
    if out:
        write_profile(out, profile)
    return profile

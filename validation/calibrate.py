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
from costmodel.validation.kernels import TORCH_DTYPES
from costmodel.validation.timing import PASSES, Timer, environment, merge

SIZES = {  # (matmul N, bandwidth buffer bytes) per device and mode
    ("cpu", True): (512, 64 << 20),
    ("cpu", False): (2048, 512 << 20),
    ("cuda", True): (2048, 256 << 20),
    ("cuda", False): (8192, 2 << 30),
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


def read_bandwidth(device: str, nbytes: int, timer: Timer) -> float:
    """Bytes per second of reading (summing) an ``nbytes`` float32 buffer."""
    src = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
    return nbytes / timer.time(lambda: src.sum()).median_s


def matmul_rate(device: str, dtype: str, size: int, timer: Timer) -> float:
    """FLOP/s of a ``size`` x ``size`` x ``size`` matmul."""
    a = torch.randn(size, size, device=device, dtype=TORCH_DTYPES[dtype])
    b = torch.randn(size, size, device=device, dtype=TORCH_DTYPES[dtype])
    return 2 * size**3 / timer.time(lambda: a @ b).median_s


def rates_timer(device: str, quick: bool) -> Timer:
    """The timer of the peak-rate measurements: no cache flush (the operands are the point)."""
    return Timer(device, flush_bytes=0, budget_s=0.3 if quick else 1.0)


def measure(device: str, quick: bool = False) -> dict:
    """Achievable matmul FLOP/s per dtype, read and copy bandwidth, and per-op overhead."""
    n, buffer_bytes = SIZES[(device, quick)]
    timer = rates_timer(device, quick)
    peaks, sizes = {}, {}
    for dt in _dtypes(device):
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        sizes[dt] = size = _matmul_size(device, dt, n, MATMUL_SECONDS[quick])
        peaks[dt] = matmul_rate(device, dt, size, timer)
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


#: The workloads whose ops make the CPU curves (quick, full): the validation's own kernels at shapes of
#: their own (d 1024, 8 heads, MHA and MQA; the validation grid is d 2048, 16 heads, GQA), so the curves
#: cover the sizes the kernels run at without being fitted to any validation case.
CURVES = {
    True: {"batches": (2,), "contexts": (256, 2048), "prefill": (64,)},
    False: {"batches": (1, 4, 16), "contexts": (128, 1024, 8192), "prefill": (32, 128, 256)},
}
#: Mechanisms a CPU fit covers: no GPU tiles or waves, no split-KV work units; the validation's
#: prefill and mask are not causal.
CPU_MECHANISMS = ("fixed", "bandwidth", "compute")
_CURVE = ("fixed", "compute_efficiency", "bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent")
#: Parameters fitted per class on a CPU.
CPU_FREE = {
    "gemm": (*_CURVE, "pack_passes"),
    "attention_einsum": (*_CURVE, "pack_passes"),
    "decode_attention": _CURVE,
    "prefill_attention": ("fixed", "compute_efficiency"),
    "norm": ("fixed", "bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent"),
    "softmax": ("fixed", "bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent"),
    "elementwise": ("fixed", "bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent"),
    # a cache append writes a slice in place: no output to allocate, its own dispatch cost
    "copy": ("fixed", "bandwidth_ceiling", "bandwidth_half_bytes", "bandwidth_exponent"),
}


def _curve_workloads(quick: bool):
    from costmodel.attention.workload import Workload

    c = CURVES[quick]
    for variant in ("mha", "mqa"):
        for execution in ("unfused", "fused"):
            for b in c["batches"]:
                for m in c["contexts"]:
                    yield Workload.create(
                        variant,
                        "incremental",
                        batch=b,
                        context=m,
                        d_model=1024,
                        heads=8,
                        dtype="fp32",
                        execution=execution,
                    )
            for n in c["prefill"]:
                yield Workload.create(
                    variant, "batched", batch=1, seq=n, d_model=1024, heads=8, dtype="fp32", execution=execution
                )


class CurveRun:
    """The calibration's curves: every op of :data:`CURVES`' workloads, timed a workload at a time (:meth:`time`)
    in passes, alone (:func:`fit_curves`) or interleaved with a validation's grid so that both see the same
    minutes of a shared machine; :meth:`fit` fits the mechanisms to them."""

    def __init__(self, device: str, quick: bool):
        self.device, self.quick = device, quick
        self.passes = PASSES[quick]
        self.timer = Timer(
            device,
            budget_s=(0.05 if quick else 0.1) / self.passes,
            min_reps=5 if quick else 3,
            warmup=3 if quick else 2,
            wall_budget=quick,
        )
        self.workloads = list(_curve_workloads(quick))
        self.taken: dict[int, list[list]] = {}
        self.alongside = ""  # what else was timed in the same passes
        self.rates: list[tuple[float, float]] = []  # (fp32 matmul FLOP/s, read bytes/s), once per pass
        self.matmul_n: int | None = None  # the fp32 matmul size of those measurements, found at the first

    def time(self, j: int) -> None:
        """One pass over workload ``j``: each op's timing. A pass's first workload also re-measures the fp32
        matmul peak and the read bandwidth (:meth:`fit` keeps the fastest), so the rates the curves are
        fractions of are taken across the same minutes as the curves."""
        from costmodel.validation.kernels import build_kernels

        if j == 0:
            timer = rates_timer(self.device, self.quick)
            n, buffer_bytes = SIZES[(self.device, self.quick)]
            if self.matmul_n is None:
                self.matmul_n = _matmul_size(self.device, "fp32", n, MATMUL_SECONDS[self.quick])
            self.rates.append(
                (
                    matmul_rate(self.device, "fp32", self.matmul_n, timer),
                    read_bandwidth(self.device, buffer_bytes, timer),
                )
            )
        self.taken.setdefault(j, []).append(
            [self.timer.time(k.run) for k in build_kernels(self.workloads[j], self.device)]
        )

    def fit(self, profile: dict) -> tuple[dict, list[float]]:
        """Group the points by efficiency class and fit the mechanisms of :mod:`costmodel.hardware.mechanisms` to
        each class's curve (eager timing: what a host timer sees around one call), each op's time the
        median over its passes; returns the efficiency block and each point's p90/median spread.

        A peak is the best a device does: ``profile``'s fp32 matmul peak and read bandwidth become the
        fastest of its own measurement and those taken in the passes (the profile dict is updated), not one
        taken in whatever minute of a shared machine the run began."""
        import numpy as np

        from costmodel.core.vocab import dtype_bytes
        from costmodel.counts.compiled import compile_program
        from costmodel.hardware.mechanisms import efficiency_class
        from costmodel.hardware.op_shapes import op_shape
        from costmodel.hardware.profile import HardwareProfile
        from costmodel.hardware.shapes import fields
        from costmodel.validation.fit import errors, fit_overlap, predict_table
        from costmodel.validation.published import Table

        device, quick, passes, timer, workloads, taken = (
            self.device,
            self.quick,
            self.passes,
            self.timer,
            self.workloads,
            self.taken,
        )
        keep_fastest(profile, self.rates)
        hw = HardwareProfile.model_validate(profile)
        on = frozenset(CPU_MECHANISMS)
        points: dict[str, list[tuple]] = {}
        spreads: list[float] = []
        for j, w in enumerate(workloads):
            compiled = compile_program(w.variant, w.mode, w.execution, w.cache_append)
            dims = w.dims()
            flops, elements, _, _ = compiled.at(dims)
            gemms = compiled.gemm_shapes(dims)
            width = dtype_bytes(w.dtype)
            for i in range(len(compiled.names)):
                cls = efficiency_class(compiled.kinds[i], compiled.names[i])
                tm = merge([t[i] for t in taken[j]])
                spreads.append(tm.p90_s / tm.median_s)
                shape = fields(op_shape(cls, dims, w.mode, gemms[i], compiled.names[i], width))
                points.setdefault(cls, []).append((float(flops[i]), float(elements[i]) * width, shape, tm.median_s))
        classes, report = {}, {}
        for cls, pts in points.items():
            keys = sorted({k for p in pts for k in p[2]})
            shape = {k: np.array([float(p[2].get(k, 0)) for p in pts]) for k in keys}
            table = Table(
                source="calibrate",
                gpu=device,
                profile=hw.id,
                op_class=cls,
                timing="eager",
                dtype="fp32",
                file="",
                fields={},
                measured_s=np.array([p[3] for p in pts]),
                flops=np.array([p[0] for p in pts]),
                nbytes=np.array([p[1] for p in pts]),
                shape=shape,
            )
            eff = fit_overlap([table], hw, CPU_FREE[cls], on=on, starts=5)
            classes[cls] = eff.model_dump(mode="json")
            report[f"{cls}/eager"] = errors(predict_table(table, hw, eff, on), table.measured_s)
        env = environment(device)
        c = CURVES[quick]
        block = {
            "data": [
                f"costmodel calibrate on {env['device_name']} ({env['backend']}), torch {env['torch_version']}, "
                f"{datetime.date.today().isoformat()}: every op of {len(workloads)} workloads (d 1024, 8 heads, "
                f"MHA and MQA, fp32, unfused and fused; decode b {c['batches']} x m {c['contexts']}, prefill "
                f"n {c['prefill']})"
            ],
            "method": (
                "each op timed as the validation times it; per class, least squares on log(predicted/measured) "
                "(Levenberg-Marquardt) of the mechanisms " + ", ".join(CPU_MECHANISMS) + ", each class fitted "
                "with compute and memory time overlapping and adding up and the smaller error kept; "
                + timer.method
                + (f"; median over {passes} passes over all the workloads" if passes > 1 else "")
                + (f"; timed interleaved with {self.alongside}" if self.alongside else "")
            ),
            "error": report,
            "classes": classes,
            "mechanisms": list(CPU_MECHANISMS),
        }
        return block, spreads


def keep_fastest(profile: dict, rates: list[tuple[float, float]]) -> None:
    """Set ``profile``'s fp32 matmul peak and read bandwidth to the fastest of its own and ``rates`` (fp32
    FLOP/s, read bytes/s), and say so in its method and source."""
    if not rates:
        return
    peak, read = profile["peak_flops_per_s"]["fp32"], profile["memory_bandwidth_bytes_per_s"]
    first = (peak["value"], read["value"])
    peak["value"] = max(peak["value"], *(r[0] for r in rates))
    read["value"] = max(read["value"], *(r[1] for r in rates))
    best = (
        f". fp32 matmul peak and read bandwidth: the fastest of {len(rates) + 1} measurements, the first "
        f"before the curves and one at the start of each pass over them (first {first[0] / 1e9:.1f} GFLOP/s "
        f"and {first[1] / 1e9:.1f} GB/s; kept {peak['value'] / 1e9:.1f} and {read['value'] / 1e9:.1f})"
    )
    profile["measured"]["method"] += best
    profile["sources"]["measured"] += best


def fit_curves(device: str, profile: dict, quick: bool) -> tuple[dict, list[float]]:
    """Time the calibration's curves alone, every pass over all the workloads before the next (as the
    validation times its grid), and fit them (:meth:`CurveRun.fit`)."""
    run = CurveRun(device, quick)
    for _ in range(run.passes):
        for j in range(len(run.workloads)):
            run.time(j)
    return run.fit(profile)


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

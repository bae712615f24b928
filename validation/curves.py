"""A device's measured curves for calibration: the workloads each kernel class is timed over, a run of them, and the fit of each class's curve."""

from __future__ import annotations

import datetime

from costmodel.validation.rates import MATMUL_SECONDS, SIZES, matmul_rate, matmul_size, rates_timer, read_bandwidth
from costmodel.validation.timing import PASSES, Timer, environment, merge

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
                self.matmul_n = matmul_size(self.device, "fp32", n, MATMUL_SECONDS[self.quick])
            self.rates.append(
                (
                    matmul_rate(self.device, "fp32", self.matmul_n, timer),
                    read_bandwidth(self.device, buffer_bytes, timer),
                )
            )
        self.taken.setdefault(j, []).append(
            [self.timer.time(k.run) for k in build_kernels(self.workloads[j], self.device)]
        )

    def points(self) -> tuple[dict[str, list[tuple]], list[float]]:
        """Every op of every workload as (FLOPs, bytes, shape, median time), by efficiency class, and each op's
        p90/median spread over the passes."""
        from costmodel.core.vocab import dtype_bytes
        from costmodel.counts.compiled import compile_program
        from costmodel.hardware.mechanisms import efficiency_class
        from costmodel.hardware.op_shapes import op_shape
        from costmodel.hardware.shapes import fields

        points: dict[str, list[tuple]] = {}
        spreads: list[float] = []
        for j, w in enumerate(self.workloads):
            compiled = compile_program(w.variant, w.mode, w.execution, w.cache_append)
            dims = w.dims()
            flops, elements, _, _ = compiled.at(dims)
            gemms = compiled.gemm_shapes(dims)
            width = dtype_bytes(w.dtype)
            for i in range(len(compiled.names)):
                cls = efficiency_class(compiled.kinds[i], compiled.names[i])
                tm = merge([t[i] for t in self.taken[j]])
                spreads.append(tm.p90_s / tm.median_s)
                shape = fields(op_shape(cls, dims, w.mode, gemms[i], compiled.names[i], width))
                points.setdefault(cls, []).append((float(flops[i]), float(elements[i]) * width, shape, tm.median_s))
        return points, spreads

    def fit(self, profile: dict) -> tuple[dict, list[float]]:
        """Group the points by efficiency class and fit the mechanisms of :mod:`costmodel.hardware.mechanisms` to
        each class's curve (eager timing: what a host timer sees around one call), each op's time the
        median over its passes; returns the efficiency block and each point's p90/median spread.

        A peak is the best a device does: ``profile``'s fp32 matmul peak and read bandwidth become the
        fastest of its own measurement and those taken in the passes (the profile dict is updated), not one
        taken in whatever minute of a shared machine the run began."""
        import numpy as np

        from costmodel.hardware.profile import HardwareProfile
        from costmodel.validation.fit import errors, fit_overlap, predict_table
        from costmodel.validation.tables import Table

        device, quick, passes, timer, workloads = self.device, self.quick, self.passes, self.timer, self.workloads
        keep_fastest(profile, self.rates)
        hw = HardwareProfile.model_validate(profile)
        on = frozenset(CPU_MECHANISMS)
        points, spreads = self.points()
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
    from costmodel.core.progress import bar

    run = CurveRun(device, quick)
    with bar(run.passes * len(run.workloads), "curve timings") as advance:
        for _ in range(run.passes):
            for j in range(len(run.workloads)):
                run.time(j)
                advance()
    return run.fit(profile)

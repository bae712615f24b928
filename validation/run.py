"""Measure every op and whole step of a grid of workloads and compare with the predictions.

Each case (variant x mode x batch x context x dtype x execution) is built from the same program as the
prediction; every op is timed (:mod:`costmodel.validation.timing`), its FLOPs counted by torch's
FlopCounterMode and compared with the symbolic count, and its time predicted with a datasheet profile
and a measured (calibrated) one. The report carries per-row errors, per-group summaries and the
measured against predicted speed-ups of GQA and MQA over MHA.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from costmodel.attention.roofline import predict
from costmodel.attention.workload import Workload
from costmodel.core.vocab import SIDE_BY_SIDE
from costmodel.hardware.profile import HardwareProfile
from costmodel.validation.kernels import build_kernels, counted, run_step
from costmodel.validation.timing import PASSES, Timer, Timing, environment, merge

PROJECTIONS = {"q_proj", "k_proj", "v_proj", "out_proj"}
GROUPS = ("decode attention", "projections", "batched attention", "whole step")


@dataclass(frozen=True)
class Grid:
    d: int
    h: int
    g: int
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    prefill: tuple[int, ...]  # n = m of batched self-attention (batch 1)
    dtypes: tuple[str, ...]
    executions: tuple[str, ...] = ("unfused", "fused")

    def workloads(self) -> Iterator[Workload]:
        # the executions and variants of one shape back to back: a drift of a shared machine's speed
        # during the run then moves the cases that are compared with each other together
        for dtype in self.dtypes:
            for b in self.batches:
                for m in self.contexts:
                    for execution in self.executions:
                        for v in SIDE_BY_SIDE:
                            yield self._make(v, "incremental", dtype, execution, batch=b, context=m)
            for n in self.prefill:
                for execution in self.executions:
                    for v in SIDE_BY_SIDE:
                        yield self._make(v, "batched", dtype, execution, batch=1, seq=n)

    def _make(self, variant, mode, dtype, execution, **dims) -> Workload:
        return Workload.create(
            variant,
            mode,
            d_model=self.d,
            heads=self.h,
            groups=self.g if variant == "gqa" else None,
            dtype=dtype,
            execution=execution,
            **dims,
        )


GRIDS = {
    ("cpu", True): Grid(d=256, h=8, g=2, batches=(2,), contexts=(256,), prefill=(64,), dtypes=("fp32",)),
    ("cpu", False): Grid(
        d=2048, h=16, g=4, batches=(1, 8), contexts=(1024, 8192), prefill=(512,), dtypes=("fp32", "bf16")
    ),
    ("cuda", True): Grid(d=4096, h=32, g=8, batches=(16,), contexts=(4096,), prefill=(1024,), dtypes=("bf16",)),
    ("cuda", False): Grid(
        d=4096,
        h=32,
        g=8,
        batches=(1, 16, 64),
        contexts=(1024, 4096, 16384),
        prefill=(1024, 4096),
        dtypes=("bf16", "fp16"),
    ),
}


def group_of(mode: str, op: str) -> str:
    if op == "step":
        return "whole step"
    if op in PROJECTIONS:
        return "projections"
    return "decode attention" if mode == "incremental" else "batched attention"


def _error(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured


@dataclass(frozen=True)
class Op:
    """What a row needs of a kernel once its tensors are freed."""

    name: str
    kind: str
    expected_flops: int
    aten: tuple[str, ...] = ()  # the aten ops its call dispatched (costmodel.validation.kernels.counted)


def time_case(w: Workload, device: str, timer: Timer) -> tuple[list, list[int], list[Timing], Timing]:
    """One pass over a workload: its ops (name, kind, symbolic FLOPs, the aten ops each dispatched), their counted
    FLOPs, each op's timing and the whole step's. The kernels and their tensors are freed on return."""
    kernels = build_kernels(w, device)
    watched = [counted(k) for k in kernels]
    ops = [Op(k.name, k.kind, k.expected_flops, aten) for k, (_, aten) in zip(kernels, watched)]
    return ops, [flops for flops, _ in watched], [timer.time(k.run) for k in kernels], timer.time(run_step(kernels))


def case_rows(
    w: Workload,
    profiles: dict[str, HardwareProfile],
    kernels: list[Op],
    flops: list[int],
    timings: list[Timing],
    step: Timing,
    timing: str = "eager",
) -> list[dict]:
    """The report's rows of one workload from its timings (taken under the ``timing`` convention: one eager
    call per op, or one CUDA-graph replay): every op, then the whole step."""
    # the fused prefill kernels here are not causal
    predictions = {name: predict(w, hw, timing=timing, without=("causal",)) for name, hw in profiles.items()}
    case = {
        "variant": w.variant,
        "mode": w.mode,
        "b": w.b,
        "n": w.n,
        "m": w.m,
        "d": w.d,
        "h": w.h,
        "g": w.g,
        "k": w.k,
        "dtype": w.dtype,
        "execution": w.execution,
    }
    rows = []
    for i, (kernel, timing) in enumerate(zip(kernels, timings)):
        row = {
            **case,
            "op": kernel.name,
            "group": group_of(w.mode, kernel.name),
            "kind": kernel.kind,
            "aten_ops": list(kernel.aten),
            "flops_symbolic": kernel.expected_flops,
            "flops_counted": flops[i],
            "flop_check": flops[i] == kernel.expected_flops,
            "measured": timing.to_dict(),
        }
        for name, p in predictions.items():
            row[f"predicted_{name}_s"] = p.ops[i].time_s
            row[f"error_{name}_pct"] = _error(p.ops[i].time_s, timing.median_s)
        rows.append(row)
    timing = step
    row = {
        **case,
        "op": "step",
        "group": "whole step",
        "kind": "step",
        "flops_symbolic": sum(k.expected_flops for k in kernels),
        "flops_counted": sum(r["flops_counted"] for r in rows),
        "measured": timing.to_dict(),
    }
    row["flop_check"] = row["flops_symbolic"] == row["flops_counted"]
    for name, p in predictions.items():
        row[f"predicted_{name}_s"] = p.total.time_s
        row[f"error_{name}_pct"] = _error(p.total.time_s, timing.median_s)
    rows.append(row)
    return rows


def summarize(rows: list[dict], profile_names: list[str]) -> dict:
    """Median and 90th-percentile absolute error per group and profile, and over all op rows."""
    out = {}
    for name in profile_names:
        per = {}
        for group in (*GROUPS, "all ops"):
            sel = [r for r in rows if (r["group"] == group if group != "all ops" else r["op"] != "step")]
            errors = sorted(abs(r[f"error_{name}_pct"]) for r in sel)
            if errors:
                per[group] = {
                    "n": len(errors),
                    "median_abs_error_pct": statistics.median(errors),
                    "p90_abs_error_pct": _quantile(errors, 0.9),
                }
        out[name] = per
    return out


def _quantile(sorted_values: list[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    return statistics.quantiles(sorted_values, n=10, method="inclusive")[int(q * 10) - 1]


def speedups(rows: list[dict], profile_names: list[str]) -> list[dict]:
    """Measured against predicted step-time speed-up of GQA and MQA over MHA, per workload."""
    steps = {}
    for r in rows:
        if r["op"] == "step":
            key = (r["mode"], r["b"], r["n"], r["m"], r["dtype"], r["execution"])
            steps.setdefault(key, {})[r["variant"]] = r
    out = []
    for (mode, b, n, m, dtype, execution), by in steps.items():
        if "mha" not in by:
            continue
        for variant in ("gqa", "mqa"):
            if variant not in by:
                continue
            measured = by["mha"]["measured"]["median_s"] / by[variant]["measured"]["median_s"]
            item = {
                "variant": variant,
                "over": "mha",
                "mode": mode,
                "b": b,
                "n": n,
                "m": m,
                "dtype": dtype,
                "execution": execution,
                "g": by[variant]["g"],
                "measured": measured,
            }
            for name in profile_names:
                predicted = by["mha"][f"predicted_{name}_s"] / by[variant][f"predicted_{name}_s"]
                item[f"predicted_{name}"] = predicted
                item[f"error_{name}_pct"] = _error(predicted, measured)
            out.append(item)
    return out


def speed_drift(device: str, calibrated: HardwareProfile | None, quick: bool) -> float | None:
    """This machine's read bandwidth now over the calibrated profile's (measured the same way, on the
    buffer a calibration of the same mode reads): a shared machine whose speed moved since calibration
    makes every calibrated prediction wrong by that factor."""
    if calibrated is None or calibrated.measured is None:
        return None
    from costmodel.validation.rates import SIZES, read_bandwidth

    timer = Timer(device, flush_bytes=0, budget_s=0.3)
    return read_bandwidth(device, SIZES[(device, quick)][1], timer) / calibrated.bandwidth


#: A dtype is validated only where the device runs it natively: its measured matmul rate at least this
#: share of fp32's (bf16 on a CPU without AVX-512 BF16 or AMX runs at about 1% of fp32 and would take an
#: hour to time, measuring an emulation rather than the kernels the model describes).
NATIVE_SHARE = 0.25


def native_dtypes(dtypes: tuple[str, ...], calibrated: HardwareProfile | None) -> tuple[tuple[str, ...], dict]:
    """The grid's dtypes this device runs natively, and why each other one is skipped."""
    if calibrated is None or "fp32" not in calibrated.peak_flops_per_s:
        return dtypes, {}
    fp32 = calibrated.peak("fp32")
    keep, slow = [], {}
    for dt in dtypes:
        rate = calibrated.peak_flops_per_s.get(dt)
        if rate is not None and rate.value < NATIVE_SHARE * fp32:
            slow[dt] = (
                f"not native here: measured {dt} matmul {rate.value / 1e9:.1f} GFLOP/s against fp32 "
                f"{fp32 / 1e9:.1f} (below {NATIVE_SHARE:.0%})"
            )
        else:
            keep.append(dt)
    return tuple(keep), slow


def _time_grid(cases: list, device: str, timer, passes: int, curves, progress, skipped: list) -> dict[int, list]:
    """Each case's timings over ``passes`` passes of the whole grid, the calibration's ``curves`` timed among
    them; a case that runs out of memory is skipped (added to ``skipped``) and timed no more."""
    # every pass runs the whole grid before the next begins, so one case's passes are minutes apart; the
    # calibration's workloads, when timed here, are spread evenly among the cases
    work = [("case", i, (i + 0.5) / len(cases)) for i in range(len(cases))]
    if curves is not None:
        curves.alongside = f"the validation's grid ({len(cases)} cases, {passes} pass{'es' if passes > 1 else ''})"
        work += [("curve", j, (j + 0.5) / len(curves.workloads)) for j in range(len(curves.workloads))]
    work.sort(key=lambda item: item[2])
    order = [(kind, i) for _ in range(passes) for kind, i, _ in work]
    taken: dict[int, list] = {}
    failed: set[int] = set()
    for kind, i in progress(order) if progress else order:
        if kind == "curve":
            curves.time(i)
            continue
        if i in failed:
            continue
        try:
            taken.setdefault(i, []).append(time_case(cases[i], device, timer))
        except RuntimeError as err:  # torch.OutOfMemoryError is a subclass
            if (
                not isinstance(err, torch.OutOfMemoryError)
                and "out of memory" not in str(err).lower()
                and "not enough memory" not in str(err).lower()
            ):
                raise
            skipped.append({**cases[i].model_dump(), "reason": f"out of memory: {str(err).splitlines()[0]}"})
            failed.add(i)
            taken.pop(i, None)
            if device == "cuda":
                torch.cuda.empty_cache()
    return taken


def validate(
    device: str,
    profiles: dict[str, HardwareProfile],
    quick: bool,
    progress: Callable[[list], Iterator] | None = None,
    threads: int | None = None,
    calibration=None,
    timing: str = "eager",
) -> dict:
    """Run the grid on ``device``; returns the whole report as a JSON-ready dict, with a noise check.

    ``timing``: ``eager`` (each op one eager call, timed with the host's dispatch) or ``graph`` (each op and
    step captured in a CUDA graph and replayed: GPU time alone, predicted under the graph convention).

    ``calibration``: (measured profile without curves, :class:`CurveRun`, finish) to calibrate in the same
    passes: the calibration's curve workloads are timed interleaved with the grid's cases, so that both
    see the same minutes of a shared machine, and ``finish()`` then returns the calibrated profile (a dict,
    as ``costmodel calibrate`` writes it; the report carries it whole)."""
    import os

    from costmodel.validation.timing import noise_check

    if device == "cpu" and threads:
        torch.set_num_threads(threads)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    drift = speed_drift(device, profiles.get("calibrated"), quick)
    measured, curves, finish = calibration or (profiles.get("calibrated"), None, None)
    grid = GRIDS[(device, quick)]
    passes = PASSES[quick]
    timer = Timer(
        device,
        budget_s=(0.05 if quick else 0.25) / passes,
        min_reps=5 if quick else 3,
        warmup=2,
        graph=timing == "graph",
        wall_budget=quick,
    )
    dtypes, slow = native_dtypes(grid.dtypes, measured)
    grid = dataclasses.replace(grid, dtypes=dtypes)
    cases = list(grid.workloads())
    rows, skipped = [], [{"dtype": dt, "reason": why} for dt, why in slow.items()]
    taken = _time_grid(cases, device, timer, passes, curves, progress, skipped)
    calibrated = finish() if finish is not None else None
    if calibrated is not None:
        profiles = {**profiles, "calibrated": HardwareProfile.model_validate(calibrated)}
    for i, w in enumerate(cases):
        if i in taken:
            runs = taken[i]
            ops, flops = runs[0][0], runs[0][1]
            timings = [merge([r[2][j] for r in runs]) for j in range(len(ops))]
            rows += case_rows(w, profiles, ops, flops, timings, merge([r[3] for r in runs]), timer.timing)
    names = list(profiles)
    return {
        "environment": environment(device, timer),
        "profiles": {
            name: {"id": hw.id, "name": hw.name, "measured": hw.measured.model_dump() if hw.measured else None}
            for name, hw in profiles.items()
        },
        "grid": {**grid.__dict__, "quick": quick, "timing": timer.timing},
        "flop_check_passed": all(r["flop_check"] for r in rows),
        "rows": rows,
        "skipped": skipped,
        "summary": summarize(rows, names),
        "speedups": speedups(rows, names),
        "noise": noise_check(
            load_before,
            [r["measured"]["p90_s"] / r["measured"]["median_s"] for r in rows],
            torch.get_num_threads(),
            drift,
        ),
        # a profile calibrated in this run, whole, so that the report alone reproduces its predictions
        **({"calibrated_profile": calibrated} if calibrated is not None else {}),
    }

"""Validation and calibration on the CPU: report structure, FLOP cross-check, errors. Not accuracy:
a shared CPU cannot promise timings, so no test asserts an error threshold."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from costmodel.attention.workload import Workload  # noqa: E402
from costmodel.cli.commands import main  # noqa: E402
from costmodel.hardware.catalog import load_profile  # noqa: E402
from costmodel.validation import run as validation_run  # noqa: E402
from costmodel.validation.curves import CPU_FREE  # noqa: E402
from costmodel.validation.kernels import _CopyCounter, build_kernels, counted_flops  # noqa: E402


@pytest.fixture(scope="module")
def quick_report(quick_cpu_run):
    """The quick CPU calibration and validation (conftest.QUICK_CPU_RUN): the report, the validation's output, the
    figure and the calibrated profile."""
    folder, results = quick_cpu_run
    for result in results:
        assert result.exit_code == 0, result.output
    return (
        json.loads((folder / "report.json").read_text()),
        results[1].output,
        folder / "report.png",
        folder / "my_cpu.yaml",
    )


def test_report_structure(quick_report):
    report, output, plot, _ = quick_report
    env = report["environment"]
    assert {"torch_version", "device", "device_name", "backend", "timing_method"} <= set(env)
    assert env["device"] == "cpu" and "threads" in env["backend"] and "median" in env["timing_method"]
    rows = report["rows"]
    grid = list(validation_run.GRIDS[("cpu", True)].workloads())
    assert {(r["variant"], r["mode"], r["execution"]) for r in rows} == {(w.variant, w.mode, w.execution) for w in grid}
    for r in rows:
        m = r["measured"]
        assert 0 < m["p10_s"] <= m["median_s"] <= m["p90_s"] and m["reps"] >= 5
        for name in ("datasheet", "calibrated"):
            assert r[f"predicted_{name}_s"] > 0
            assert r[f"error_{name}_pct"] == pytest.approx(
                100 * (r[f"predicted_{name}_s"] - m["median_s"]) / m["median_s"]
            )
        assert r["dtype"] and r["group"] in validation_run.GROUPS
    assert sum(r["op"] == "step" for r in rows) == len(grid)
    for name in ("datasheet", "calibrated"):
        assert set(report["summary"][name]) == {*validation_run.GROUPS, "all ops"}
    assert {(s["variant"], s["mode"], s["execution"]) for s in report["speedups"]} == {
        (v, mode, ex) for v in ("gqa", "mqa") for mode in ("incremental", "batched") for ex in ("unfused", "fused")
    }
    assert report["profiles"]["calibrated"]["measured"] is not None
    assert report["profiles"]["datasheet"]["measured"] is None
    assert "FLOP cross-check" in output and "speed-up over MHA" in output
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_flop_cross_check(quick_report):
    report = quick_report[0]
    assert report["flop_check_passed"]
    for r in report["rows"]:
        assert r["flops_counted"] == r["flops_symbolic"], (r["variant"], r["mode"], r["op"])
    assert any(r["op"] == "attention" and r["flops_counted"] > 0 for r in report["rows"])  # SDPA counted too


def test_calibrated_profile_is_marked_measured(quick_report):
    profile = load_profile(str(quick_report[3]))
    assert profile.measured is not None and profile.measured.torch_version == str(torch.__version__)
    assert {"fp32", "bf16"} <= set(profile.peak_flops_per_s)
    assert all(item.confidence == "measured" for f, item in profile.sourced_items() if "peak" in f)
    # one per-class block: a CPU's classes are the mechanisms fitted to its curves (those its workloads run)
    assert set(profile.efficiency.classes) <= set(CPU_FREE) and set(profile.efficiency.error)
    assert "op_classes" not in profile.model_dump()


def test_a_gpu_calibration_prices_each_class_at_its_measured_kernel():
    """What `calibrate --device cuda` writes, run on the CPU: one kernel per op class measured, written as that
    class's efficiency; every op of a decode and a prefill program then costs, by hand, its class's measured
    overhead + max(FLOPs at the measured rate, bytes at the measured bandwidth)."""
    import statistics

    from costmodel.counts.compiled import compile_program
    from costmodel.hardware.mechanisms import efficiency_class
    from costmodel.hardware.profile import HardwareProfile
    from costmodel.price.op import Conventions, Precision, price
    from costmodel.price.program_ops import program_ops
    from costmodel.validation.class_kernels import MEASURED_CLASSES, measure_op_classes, measured_efficiency

    peak, read = 50e9, 10e9  # deliberately not this machine's: the fractions are of the stated ceilings
    measured = measure_op_classes("cpu", {"fp32": peak}, quick=True)
    src = {"value": 1.0, "source": "m", "confidence": "measured"}
    hw = HardwareProfile.model_validate(
        {
            "id": "measured_test",
            "name": "t",
            "vendor": "measured",
            "kind": "gpu",
            "peak_flops_per_s": {"fp32": {**src, "value": peak}},
            "memory_bandwidth_bytes_per_s": {**src, "value": read},
            "memory_capacity_bytes": {**src, "value": 1e10},
            "on_chip_memory_bytes": {**src, "value": 1e6},
            "on_chip_memory_kind": "L2",
            "launch_overhead_s": {**src, "value": 1e-6},
            "sources": {"m": "measured"},
            "architecture": {"generation": "measured", "compute_units": {**src, "value": 8}},
            "efficiency": measured_efficiency(measured, {"fp32": peak}, read, "cpu"),
        }
    )
    conv = Conventions.of(hw, "eager")
    assert conv.model.active and all(o.kind == "fitted" for o in conv.model.resolved.origin.values())
    seen = set()
    for mode, dims in (("incremental", {"b": 4, "n": 1, "m": 512}), ("batched", {"b": 2, "n": 64, "m": 64})):
        for execution in ("unfused", "fused"):
            dims = {**dims, "d": 256, "h": 4, "g": 2, "k": 64, "v": 64}
            for op, shape, _, _ in program_ops(
                compile_program("gqa", mode, execution), dims, mode, Precision.of(4, "fp32")
            ):
                kind = next(
                    k for k, classes in MEASURED_CLASSES.items() if efficiency_class(op.kind, op.name) in classes
                )
                c = measured["classes"][kind]
                flops_rate = min(peak, statistics.median(c["flops_per_s"].values())) if c["flops_per_s"] else peak
                bw = (
                    min(read, statistics.median(c["bandwidth_bytes_per_s"].values()))
                    if c["bandwidth_bytes_per_s"]
                    else read
                )
                expected = c["overhead_s"] + max(op.flops / flops_rate, op.bytes / bw)
                assert price(op, shape, hw, conv).time == pytest.approx(expected, rel=1e-9), (mode, op.name)
                seen.add(kind)
    assert seen == set(MEASURED_CLASSES)


def test_a_class_kernels_rate_is_the_slope_beyond_its_fixed_cost():
    """An eager call takes its fixed cost plus its bytes over the bandwidth: by hand, 17 µs + 1 GiB at 4 TB/s
    and 17 µs + 1 KiB at 4 TB/s give back 4 TB/s exactly, where the large call's bytes over its whole time
    would say less (the fixed cost counted twice)."""
    from costmodel.validation.class_kernels import rate

    fixed, bw, large, tiny = 17e-6, 4e12, float(1 << 30), 1024.0
    t_large, t_tiny = fixed + large / bw, fixed + tiny / bw
    assert rate(large, t_large, tiny, t_tiny) == pytest.approx(bw, rel=1e-9)
    assert large / t_large == pytest.approx(1 / (1 / bw + fixed / large))  # the plain rate: 3.76 TB/s, not 4
    assert large / t_large < 0.95 * bw
    # noise that makes the tiny call as slow as the large one: the plain rate, a lower bound
    assert rate(large, 1e-3, tiny, 2e-3) == large / 1e-3


def test_a_calibration_keeps_the_fastest_peak_and_bandwidth_it_measured(quick_report):
    from costmodel.validation.curves import keep_fastest

    profile = {
        "peak_flops_per_s": {"fp32": {"value": 100e9}, "bf16": {"value": 1e9}},
        "memory_bandwidth_bytes_per_s": {"value": 20e9},
        "measured": {"method": "m"},
        "sources": {"measured": "s"},
    }
    keep_fastest(profile, [(90e9, 25e9), (130e9, 18e9), (120e9, 22e9)])
    assert profile["peak_flops_per_s"]["fp32"]["value"] == 130e9
    assert profile["peak_flops_per_s"]["bf16"]["value"] == 1e9  # the curves are fp32: bf16 is measured once
    assert profile["memory_bandwidth_bytes_per_s"]["value"] == 25e9
    assert (
        "fastest of 4 measurements" in profile["measured"]["method"] and "kept 130.0" in profile["sources"]["measured"]
    )
    # the quick calibration above re-measured at its one pass: two measurements, the fastest kept
    assert "the fastest of 2 measurements" in load_profile(str(quick_report[3])).measured.method


def test_each_row_names_the_aten_ops_its_kernel_dispatched(quick_report):
    """Which of torch's kernels a row timed is in the report: an einsum dispatches a matrix product, a fused
    attention call one of torch's SDPA backends, a cache append a copy into the cache (torch's own dispatch names,
    recorded as the call runs)."""
    from costmodel.validation.kernels import dispatched

    report = quick_report[0]
    rows = [r for r in report["rows"] if r["op"] != "step"]
    assert rows and all(r["aten_ops"] for r in rows)
    for r in rows:
        if r["kind"] == "einsum":
            assert {"bmm", "mm"} & set(r["aten_ops"]), r
        if r["kind"] == "fused":
            assert any(op.startswith("_scaled_dot_product") for op in r["aten_ops"]), r
    w = Workload.create("mqa", "incremental", batch=2, context=8, d_model=64, heads=4, dtype="fp32", execution="fused")
    ops = {k.name: dispatched(k) for k in build_kernels(w, "cpu")}
    assert "copy_" in ops["k_append"] and "_scaled_dot_product_flash_attention_for_cpu" in ops["attention"]


@pytest.mark.parametrize("variant", ["mha", "gqa", "mqa"])
@pytest.mark.parametrize("mode", ["incremental", "batched"])
@pytest.mark.parametrize("execution", ["unfused", "fused"])
def test_kernels_count_the_symbolic_flops_and_copy_no_weights(variant, mode, execution):
    w = Workload.create(
        variant,
        mode,
        batch=3,
        seq=8 if mode == "batched" else None,
        context=12 if mode == "incremental" else None,
        d_model=64,
        heads=4,
        groups=2 if variant == "gqa" else None,
        dtype="fp32",
        execution=execution,
    )
    # elements of P_q, P_o (h = 4 heads) and P_k, P_v (g = 4, 2, 1): no activation here has these counts
    weight_sizes = {4 * 64 * 16, 2 * 64 * 16, 1 * 64 * 16}
    for kernel in build_kernels(w, "cpu"):
        assert counted_flops(kernel) == kernel.expected_flops, kernel.name
        if kernel.kind == "einsum":
            with _CopyCounter() as counter:
                kernel.run()
            # an activation may be transposed (O before out_proj, as implementations do); a weight never
            copied = {math.prod(shape) for shape in counter.copied_shapes}
            assert not weight_sizes & copied, (kernel.name, counter.copied_shapes)


@pytest.mark.parametrize("h,g,n", [(4, 2, 1), (8, 1, 1), (6, 3, 5), (4, 4, 3)])
def test_fused_attention_reads_each_kv_head_once_and_computes_grouped_attention(h, g, n):
    import torch.nn.functional as F

    from costmodel.validation.kernels import grouped_attention

    torch.manual_seed(0)
    q, keys, values = torch.randn(2, h, n, 8), torch.randn(2, g, 7, 8), torch.randn(2, g, 7, 8)
    # oracle: every query head over its own copy of its group's K/V (torch's repeat_interleave assignment)
    reference = F.scaled_dot_product_attention(
        q, keys.repeat_interleave(h // g, 1), values.repeat_interleave(h // g, 1)
    )
    seen = []

    class Watch(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append((func.overloadpacket.__name__, [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]))
            return func(*args, **(kwargs or {}))

    with Watch():
        out = grouped_attention(q, keys, values)
    torch.testing.assert_close(out, reference)
    attention = [shapes for name, shapes in seen if "attention" in name]
    # one flash-attention call whose work units are the g K/V heads, each with h/g x n query rows; no copy
    assert attention == [[(2, g, h // g * n, 8), (2, g, 7, 8), (2, g, 7, 8)]]
    assert not {name for name, _ in seen} & _CopyCounter.COPIES


def test_out_of_memory_case_is_skipped_and_the_run_goes_on(monkeypatch):
    real = validation_run.time_case
    calls = []

    def flaky(w, *args):
        calls.append(w)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(w, *args)

    monkeypatch.setattr(validation_run, "time_case", flaky)
    monkeypatch.setitem(
        validation_run.GRIDS,
        ("cpu", True),
        validation_run.Grid(
            d=64, h=4, g=2, batches=(1,), contexts=(16,), prefill=(), dtypes=("fp32",), executions=("unfused",)
        ),
    )
    hw = load_profile("zen4-2vcpu")
    report = validation_run.validate("cpu", {"datasheet": hw, "calibrated": hw}, quick=True)
    assert len(report["skipped"]) == 1 and "out of memory" in report["skipped"][0]["reason"]
    assert {r["variant"] for r in report["rows"]} == {"gqa", "mqa"}


def test_interrupt_leaves_no_file(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(validation_run, "time_case", interrupted)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        main,
        [
            "validate",
            "--device",
            "cpu",
            "--quick",
            "--gpu",
            "zen4-2vcpu",
            "--profile",
            str(tmp_path / "missing.yaml"),
            "--json",
            str(out),
        ],
    )
    assert result.exit_code != 0 and not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_slow_spell_in_one_pass_is_outvoted():
    from costmodel.validation.timing import Timing, merge

    # three passes of one op: the second ran while the machine was 50% slower
    passes = [Timing(1.00, 0.90, 1.20, 7, "m"), Timing(1.50, 1.40, 1.90, 5, "m"), Timing(1.04, 0.95, 1.10, 6, "m")]
    t = merge(passes)
    assert (t.median_s, t.p10_s, t.p90_s, t.reps) == (1.04, 0.95, 1.20, 18)
    assert "median over 3 passes" in t.method
    assert merge(passes[:1]) == passes[0]


def test_passes_run_the_whole_grid_before_repeating_and_each_op_takes_the_median(monkeypatch):
    from costmodel.validation.timing import Timing

    seen = []
    speed = iter([1.0] * 3 + [3.0] * 3 + [1.2] * 3)  # three cases; the second pass ran 3x slower

    def fake(w, device, timer):
        seen.append(w.variant)
        s = next(speed)
        ops = [validation_run.Op("only", "projection", 10)]
        return ops, [10], [Timing(s, s, s, 3, "m")], Timing(2 * s, 2 * s, 2 * s, 3, "m")

    monkeypatch.setattr(validation_run, "time_case", fake)
    monkeypatch.setitem(validation_run.PASSES, True, 3)
    monkeypatch.setitem(
        validation_run.GRIDS,
        ("cpu", True),
        validation_run.Grid(
            d=64, h=4, g=2, batches=(1,), contexts=(16,), prefill=(), dtypes=("fp32",), executions=("unfused",)
        ),
    )
    monkeypatch.setattr(
        validation_run,
        "case_rows",
        lambda w, profiles, ops, counted, timings, step, timing: [
            {
                "variant": w.variant,
                "op": ops[0].name,
                "group": "projections",
                "measured": timings[0].to_dict(),
                "step": step.median_s,
                "flop_check": True,
                "measured_s": timings[0].median_s,
            }
        ],
    )
    monkeypatch.setattr(validation_run, "summarize", lambda rows, names: {})
    monkeypatch.setattr(validation_run, "speedups", lambda rows, names: [])
    hw = load_profile("zen4-2vcpu")
    report = validation_run.validate("cpu", {"datasheet": hw}, quick=True)
    cases = seen[: len(seen) // 3]
    assert cases == ["mha", "gqa", "mqa"] and seen == cases * 3  # the whole grid, then again, then again
    # each case's op: the median of its three passes' medians, the slow pass outvoted
    assert [r["measured"]["median_s"] for r in report["rows"]] == [1.2] * 3
    assert [r["step"] for r in report["rows"]] == [2.4] * 3


def test_a_calibration_in_the_same_run_times_its_curves_among_the_grids_cases(monkeypatch):
    from costmodel.validation.timing import Timing

    seen = []

    def fake(w, device, timer):
        seen.append(("case", w.variant))
        return [validation_run.Op("only", "projection", 10)], [10], [Timing(1, 1, 1, 3, "m")], Timing(2, 2, 2, 3, "m")

    class Curves:  # four calibration workloads
        workloads = [0, 1, 2, 3]
        alongside = ""

        def time(self, j):
            seen.append(("curve", j))

    hw = load_profile("zen4-2vcpu")
    finished = []

    def finish():
        finished.append(len(seen))
        return hw.model_dump(mode="json", exclude_none=True)

    monkeypatch.setattr(validation_run, "time_case", fake)
    monkeypatch.setitem(validation_run.PASSES, True, 2)
    monkeypatch.setitem(
        validation_run.GRIDS,
        ("cpu", True),
        validation_run.Grid(
            d=64, h=4, g=2, batches=(1,), contexts=(16,), prefill=(), dtypes=("fp32",), executions=("unfused",)
        ),
    )
    monkeypatch.setattr(
        validation_run,
        "case_rows",
        lambda w, profiles, *rest: [
            {
                "variant": w.variant,
                "group": "projections",
                "measured": {"median_s": 1, "p90_s": 1},
                "flop_check": True,
                "calibrated": profiles["calibrated"].id,
            }
        ],
    )
    monkeypatch.setattr(validation_run, "summarize", lambda rows, names: {})
    monkeypatch.setattr(validation_run, "speedups", lambda rows, names: [])
    curves = Curves()
    report = validation_run.validate("cpu", {"datasheet": hw}, quick=True, calibration=(hw, curves, finish))
    # cases at 1/6, 3/6, 5/6 of a pass, curves at 1/8, 3/8, 5/8, 7/8: evenly spread, the same in both passes
    one = [("curve", 0), ("case", "mha"), ("curve", 1), ("case", "gqa"), ("curve", 2), ("case", "mqa"), ("curve", 3)]
    assert seen == one * 2
    assert finished == [len(seen)]  # the profile is fitted once every pass is done, and predicts every row
    assert [r["calibrated"] for r in report["rows"]] == [hw.id] * 3
    assert report["calibrated_profile"]["id"] == hw.id
    assert curves.alongside == "the validation's grid (3 cases, 2 passes)"


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--device", "cpu", "--timing", "graph"],
            "Error: --timing graph replays CUDA graphs: it needs --device cuda, not --device cpu",
        ),
        (
            ["--device", "cuda", "--timing", "graph", "--save-profile", "p.yaml"],
            "Error: --save-profile writes the profile an eager run calibrates; --timing graph calibrates none (drop "
            "--save-profile, or time eager)",
        ),
        (
            ["--published", "--timing", "graph"],
            "Error: --profile, --quick, --gpu, --save-profile and --timing do not apply with --published (each table names "
            "its GPU and its timing)",
        ),
    ],
)
def test_graph_timing_is_refused_where_it_cannot_run(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["validate", *args])
    assert result.exit_code == 1
    assert result.output.strip() == message
    assert not list(tmp_path.iterdir())  # nothing written
    with pytest.raises(ValueError, match="CUDA-graph timing needs a CUDA device, not cpu"):
        validation_run.Timer("cpu", graph=True)


def test_graph_timed_rows_are_predicted_under_the_graph_convention():
    """A CUDA-graph replay has no host dispatch in it: the rows it times are predicted with the profile's graph
    fixed costs, which for the H200's carried fit are far below its eager ones for the projections and the cache
    appends (the eager tables' times hold torch's dispatch, 23-47 µs a call), and so is the whole step's."""
    from costmodel.validation.timing import Timing

    hw = load_profile("h200_sxm")
    w = Workload.create(
        "mqa", "incremental", d_model=4096, heads=32, dtype="bf16", execution="fused", batch=16, context=4096
    )
    ops = [validation_run.Op(k.name, k.kind, k.expected_flops) for k in build_kernels(w, "meta")]
    one = Timing(1e-4, 1e-4, 1e-4, 3, "m")
    by = {
        t: validation_run.case_rows(
            w, {"datasheet": hw}, ops, [o.expected_flops for o in ops], [one] * len(ops), one, t
        )
        for t in ("eager", "graph")
    }
    checked = 0
    for eager, graph in zip(by["eager"], by["graph"]):
        assert graph["op"] == eager["op"]
        if graph["op"].endswith(("_proj", "_append")) or graph["op"] == "step":
            assert graph["predicted_datasheet_s"] < 0.5 * eager["predicted_datasheet_s"], graph["op"]
            checked += 1
    assert checked == 7  # four projections, two appends, the step


def test_cuda_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the error path cannot be taken")
    result = CliRunner().invoke(main, ["validate", "--device", "cuda", "--quick"])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: --device cuda: no CUDA GPU is available to torch here; use --device cpu"


def test_no_torch_says_how_to_install():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from costmodel.cli.commands import main\n"
        "main(['validate', '--device', 'cpu', '--quick'], prog_name='costmodel')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "Error: costmodel validate needs torch: python -m pip install torch==2.13.0 --index-url "
        "https://download.pytorch.org/whl/cpu, then python -m pip install -e '.[validation]' in the checkout"
    )


def test_a_quick_timer_counts_its_flushes_in_its_budget(monkeypatch):
    """With ``wall_budget`` (a quick run's timers) a budget of 50 ms over flushes of at least 10 ms each stops after
    at most 5 repetitions, at least the minimum of 2 (a sleep only ever lasts longer); without it the timed calls' own
    time (microseconds) never reaches the budget and the timer runs to max_reps."""
    import time

    from costmodel.validation.timing import Timer

    monkeypatch.setattr(Timer, "_flush", lambda self: time.sleep(0.01))
    kw = {"flush_bytes": 4096, "warmup": 0, "min_reps": 2, "max_reps": 20, "budget_s": 0.05}
    quick = Timer("cpu", wall_budget=True, **kw)
    assert 2 <= quick.time(lambda: None).reps <= 5
    assert "of wall time, flushes included" in quick.method
    full = Timer("cpu", **kw)
    assert full.time(lambda: None).reps == 20 and "wall time" not in full.method


def test_a_graph_replay_is_timed_behind_the_flush_with_no_host_wait(monkeypatch):
    """The graph timer's protocol, on a stand-in for CUDA that logs every call: warm-up calls on a side stream,
    one capture, then for each repetition a synchronise, the flush, the spin, the start event, the replay and the
    end event with no synchronise between the flush and the end event (a synchronise there would put the host's
    launch of the replay into the time, which the graph convention leaves out)."""
    from costmodel.validation import timing as timing_module

    log = []

    class Event:
        def __init__(self, enable_timing):
            self.at = None

        def record(self):
            log.append("record")
            self.at = len(log)

        def elapsed_time(self, end):
            return 1e-3 * (end.at - self.at)  # ms

    class Graph:
        def replay(self):
            log.append("replay")

    class Capture:
        def __init__(self, graph):
            pass

        def __enter__(self):
            log.append("capture")

        def __exit__(self, *exc):
            log.append("captured")

    class Stream:
        def wait_stream(self, other):
            pass

    cuda = torch.cuda
    monkeypatch.setattr(cuda, "Stream", Stream)
    monkeypatch.setattr(cuda, "current_stream", Stream)
    monkeypatch.setattr(cuda, "stream", lambda s: Capture(None))
    monkeypatch.setattr(cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(cuda, "graph", Capture)
    monkeypatch.setattr(cuda, "Event", Event)
    monkeypatch.setattr(cuda, "synchronize", lambda: log.append("sync"))
    monkeypatch.setattr(cuda, "_sleep", lambda cycles: log.append(f"spin {cycles}"))
    timer = timing_module.Timer("cuda", flush_bytes=0, warmup=2, min_reps=3, max_reps=3, graph=True)
    monkeypatch.setattr(timer, "_flush", lambda: log.append("flush"))
    result = timer.time(lambda: log.append("call"))
    # warm-up on the side stream (entered like a capture), the capture of one call, two warm-up replays
    assert log[:9] == ["capture", "call", "call", "captured", "capture", "call", "captured", "replay", "replay"]
    rep = ["sync", "flush", f"spin {timing_module.SPIN_CYCLES}", "record", "replay", "record", "sync"]
    assert log[9:] == rep * 3
    assert result.reps == 3 and result.median_s == pytest.approx(2e-6)  # two log entries between the events
    assert timer.timing == "graph" and "CUDA-graph replay" in result.method

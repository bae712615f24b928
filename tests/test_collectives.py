"""The collective curves (one line, or the faster of two): the errors each profile states are re-derived from the
published tables it was fitted on; carried to another GPU by the transfer rule, the H100's curves are scored on
that GPU's tables; and the price of a tensor-parallel all-reduce is the curve's, by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import costmodel
from costmodel.price.op import CUSTOM_ALL_REDUCE_MAX_BYTES, Conventions, KernelOp, collective_curves, price
from costmodel.validation.collectives import TABLES, errors, read_tables

COMM = Path(__file__).resolve().parents[2] / "shared" / "measurements" / "aiconfigurator" / "comm"


@pytest.fixture(scope="module")
def comm():
    if not COMM.is_dir():
        pytest.skip(f"the published tables are not beside this checkout ({COMM})")
    return COMM


@pytest.mark.parametrize("pid", sorted(TABLES))
def test_stated_errors_are_rederived(comm, pid):
    hw = costmodel.load_profile(pid)
    tables = read_tables(comm, pid)
    from costmodel.validation.collectives import read_nccl_ops

    others = {f"{op}/{n}" for op, n in read_nccl_ops(comm, pid)}  # NCCL's other collectives: the test below
    assert set(hw.collectives.error) == {f"{impl}/{n}" for impl, n in tables} | others
    for (impl, n), (size, sec) in tables.items():
        c = hw.collectives.curves[impl][n]
        k, med, p90 = errors(size, sec, n, c)
        stated = hw.collectives.error[f"{impl}/{n}"]
        assert (k, round(med, 2), round(p90, 2)) == (stated.n, stated.median_abs_error_pct, stated.p90_abs_error_pct)


@pytest.mark.parametrize("pid", ["a100_80gb_sxm", "b200"])
def test_transfer_from_h100_scored_on_other_tables(comm, pid):
    """The transfer rule (H100 latencies, bus bandwidth x the datasheet interconnect ratio) on a GPU whose own
    tables it did not see: worse than that GPU's own fit, and within 40% median (docs/serving.md states each)."""
    h100, hw = costmodel.load_profile("h100_sxm"), costmodel.load_profile(pid)
    scale = hw.interconnect_bytes_per_s.value / h100.interconnect_bytes_per_s.value
    own, moved = [], []
    for (impl, n), (size, sec) in read_tables(comm, pid).items():
        c = h100.collectives.curves[impl][n]
        moved.append(errors(size, sec, n, c, 2, scale)[1])
        own.append(hw.collectives.error[f"{impl}/{n}"].median_abs_error_pct)
    assert np.median(moved) > np.median(own)
    assert np.median(moved) < 40


def _by_hand(c, moved: float, scale: float = 1.0) -> float:
    """A curve's seconds for ``moved`` bytes per GPU: its line, or the faster of its two."""
    lines = [c.latency_s + moved / (c.bus_bytes_per_s * scale)]
    if c.large_latency_s is not None:
        lines.append(c.large_latency_s + moved / (c.large_bus_bytes_per_s * scale))
    return min(lines)


def test_price_is_the_curve_by_hand():
    """A 1 MiB all-reduce over 4 H100s under graph timing: vLLM's custom all-reduce in a graph; 16 MiB: NCCL; each
    the faster of its curve's two lines, which cross between the table's smallest and largest buffers."""
    hw = costmodel.load_profile("h100")
    conv = Conventions.of(hw, "graph")
    for size, impl in ((1 << 20, "custom_graph"), (16 << 20, "nccl")):
        c = hw.collectives.curves[impl][4]
        t = price(KernelOp("all_reduce", "all_reduce", "bf16", 0.0, float(size), devices=4), None, hw, conv).time
        assert t == pytest.approx(_by_hand(c, 2 * 3 / 4 * size), rel=1e-12)
    c = hw.collectives.curves["nccl"][8]  # two lines: the small buffers' below, the large ones' above the crossing
    assert c.large_latency_s > c.latency_s and c.large_bus_bytes_per_s > c.bus_bytes_per_s
    crossing = (c.large_latency_s - c.latency_s) / (1 / c.bus_bytes_per_s - 1 / c.large_bus_bytes_per_s)
    assert 1e3 < crossing < 1e9
    small, large = c.parts(crossing / 4), c.parts(crossing * 4)
    assert small[1] == c.latency_s and large[1] == c.large_latency_s
    assert CUSTOM_ALL_REDUCE_MAX_BYTES == 8 << 20
    # the datasheet roofline keeps the ring over the datasheet interconnect
    t = price(KernelOp("all_reduce", "all_reduce", "bf16", 0.0, 1e6, devices=4), None, hw, Conventions.datasheet()).time
    link = hw.interconnect_bytes_per_s.value / 2
    assert t == pytest.approx(2 * 3 / 4 * 1e6 / link + 2 * 3 * hw.interconnect_latency_s.value, rel=1e-12)


def test_vllms_all_reduce_is_its_own_entry_points_curve_at_every_size():
    """vLLM prices a tensor-parallel all-reduce on the curve of its own entry point (the table aiconfigurator times
    through tensor_model_parallel_all_reduce) at every size; the other engines take the custom kernel up to 8 MiB
    and NCCL above. A 42 MiB all-reduce over 8 B200s (a 4096-token prompt of a 5120-wide model): by hand."""
    from costmodel.engine.config import engine
    from costmodel.model.presets import load_model
    from costmodel.model.pricing import pricing
    from costmodel.model.step import phase_ops

    hw = costmodel.load_profile("b200")
    conv = Conventions.of(hw, "graph")
    size = 4096 * 5120 * 2
    op = lambda how: KernelOp(  # noqa: E731
        "all_reduce",
        "all_reduce",
        "bf16",
        0.0,
        float(size),
        devices=8,
        all_reduce=how,
    )
    for how, impl in (("engine", "custom_graph"), ("custom", "nccl")):
        assert price(op(how), None, hw, conv).time == pytest.approx(
            _by_hand(hw.collectives.curves[impl][8], 2 * 7 / 8 * size), rel=1e-12
        )
    # up to 8 MiB the two agree
    small = KernelOp("all_reduce", "all_reduce", "bf16", 0.0, float(4 << 20), devices=8)
    assert (
        price(small, None, hw, conv).time == price(dataclasses.replace(small, all_reduce="engine"), None, hw, conv).time
    )
    # each engine's convention reaches the model's all-reduces
    m = load_model("Qwen/Qwen3-32B")
    for name, how in (("vllm", "engine"), ("sglang", "custom"), ("trtllm", "custom")):
        kernels = engine(name, capacity_bytes=hw.engine_memory, device_name=hw.name, tp=8).kernels
        ops = phase_ops(m, pricing(m, hw, tp=8, **kernels), "prefill", 1, 4096, 0)
        assert {s.op.all_reduce for s in ops if s.op.kind == "all_reduce"} == {how}, name


def test_a_device_without_tables_borrows_by_the_interconnect_ratio():
    hw = costmodel.load_profile("h200")
    curves, scale, source = collective_curves(hw)
    ref = costmodel.load_profile(source)
    assert curves == ref.collectives.curves
    assert scale == pytest.approx(hw.interconnect_bytes_per_s.value / ref.interconnect_bytes_per_s.value)


@pytest.mark.parametrize("pid", sorted(TABLES))
def test_stated_errors_of_the_other_collectives_are_rederived(comm, pid):
    """NCCL's all-gather, reduce-scatter and all-to-all: each curve's stated error, from the table it was fitted on
    with the volume (n - 1) / n of the buffer."""
    from costmodel.validation.collectives import VOLUME, read_nccl_ops

    hw = costmodel.load_profile(pid)
    tables = read_nccl_ops(comm, pid)
    assert {op for op, _ in tables} == {"all_gather", "reduce_scatter", "all_to_all"} == set(hw.collectives.ops)
    for (op, n), (size, sec) in tables.items():
        c = hw.collectives.ops[op][n]
        k, med, p90 = errors(size, sec, n, c, VOLUME[op])
        stated = hw.collectives.error[f"{op}/{n}"]
        assert (k, round(med, 2), round(p90, 2)) == (stated.n, stated.median_abs_error_pct, stated.p90_abs_error_pct)


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_to_all"])
def test_an_empty_collective_costs_its_latency_and_a_full_one_its_curve(kind):
    """By hand: an all-to-all (all-gather, reduce-scatter) of 0 bytes over 8 H100s costs the curve's latency
    alone; of S bytes, the latency and (n - 1) / n of S at the bus bandwidth; an H200 (no tables) takes the H100's
    curve with the bus bandwidth scaled by the interconnect ratio; without a fit, a ring over the datasheet link."""
    hw, conv = costmodel.load_profile("h100"), Conventions.of(costmodel.load_profile("h100"), "graph")
    c = hw.collectives.ops[kind][8]
    op = lambda nbytes, devices=8: KernelOp(kind, kind, "bf16", 0.0, nbytes, devices=devices)  # noqa: E731
    empty = price(op(0.0), None, hw, conv)
    least = min(c.latency_s, c.large_latency_s or c.latency_s)
    assert (empty.time, empty.overhead, empty.memory) == (least, least, 0.0)
    assert price(op(64e6), None, hw, conv).time == pytest.approx(_by_hand(c, 7 / 8 * 64e6))
    assert price(op(64e6, devices=1), None, hw, conv).time == 0
    h200 = costmodel.load_profile("h200")
    scale = h200.interconnect_bytes_per_s.value / hw.interconnect_bytes_per_s.value
    assert price(op(64e6), None, h200, Conventions.of(h200, "graph")).time == pytest.approx(
        _by_hand(c, 7 / 8 * 64e6, scale)
    )
    bare = price(op(64e6), None, hw, Conventions.datasheet()).time
    assert bare == pytest.approx(
        7 / 8 * 64e6 / (hw.interconnect_bytes_per_s.value / 2) + 7 * hw.interconnect_latency_s.value
    )


def test_the_fit_finds_two_protocols_and_keeps_one_line_where_one_is_all():
    """Timings made from two lines (5 us + V / 100 GB/s for small buffers, 30 us + V / 400 GB/s for large, the faster
    at each size) give back both lines to the fit's grid (a few per cent), crossing where they do; timings of one
    line give one line."""
    from costmodel.validation.collectives import curve, fit_curve

    size = np.geomspace(1e3, 1e9, 31)
    moved = 2 * 7 / 8 * size
    two = np.minimum(5e-6 + moved / 1e11, 30e-6 + moved / 4e11)
    got = fit_curve(size, two, 8)
    assert got["latency_s"] == pytest.approx(5e-6, rel=0.05) and got["bus_bytes_per_s"] == pytest.approx(1e11, rel=0.05)
    assert got["large_latency_s"] == pytest.approx(30e-6, rel=0.05)
    assert got["large_bus_bytes_per_s"] == pytest.approx(4e11, rel=0.05)
    assert np.max(np.abs(curve(size, 8, got) / two - 1)) < 0.05
    one = fit_curve(size, 8e-6 + moved / 2e11, 8)
    assert "large_latency_s" not in one
    assert one["latency_s"] == pytest.approx(8e-6, rel=0.05) and one["bus_bytes_per_s"] == pytest.approx(2e11, rel=0.05)

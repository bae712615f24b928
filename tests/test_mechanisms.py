"""The fitted time model: each mechanism against a hand-computed case, the transfer rule, and the
comparison with published GPU timings (the JSON contract, the predict command of each attention row,
refusals)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main
from costmodel.hardware.catalog import load_all, load_profile
from costmodel.hardware.mechanisms import DEFAULT_KERNELS, class_times
from costmodel.hardware.profile import ClassEfficiency
from costmodel.hardware.tiles import causal_pairs, gemm_tiled_flops
from costmodel.price.origin import reference_for, resolve, time_model
from costmodel.price.transfer import attention_kind

DECODE_BLOCK = DEFAULT_KERNELS.decode_block


def test_causal_pairs_equal_a_brute_force_count():
    for n in range(1, 7):
        for m in range(n, 9):
            # query i (0-based, the last n of m positions) sees keys 0 .. m - n + i
            brute = sum(1 for i in range(n) for j in range(m) if j <= m - n + i)
            assert causal_pairs(n, m) == brute


def _brute_blocks(n, m, rows, keys, window=None):
    """Key blocks a tiled causal kernel reads, by walking every query tile: tile i holds queries m - n + i rows ..
    (capped at m - 1) and reads the key blocks from its first query's earliest key (window) to its last query."""
    total = 0
    for i in range(-(-n // rows)):
        first, last = m - n + i * rows, min(m - n + (i + 1) * rows, m) - 1
        lo = 0 if window is None else max(first - window + 1, 0)
        total += last // keys - lo // keys + 1
    return total


def test_rectangular_causal_blocks_equal_a_brute_force_count():
    from costmodel.hardware.tiles import blocked_causal_pairs, windowed_pairs

    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 700))
        m = n + int(rng.integers(0, 700)) * int(rng.integers(0, 2))
        rows, keys = int(rng.choice([16, 64, 128])), int(rng.choice([64, 128, 256]))
        window = int(rng.integers(1, 900))
        assert blocked_causal_pairs(n, m, rows, keys) == _brute_blocks(n, m, rows, keys) * rows * keys
        if rows != keys or m == n:  # square tiles: exact where the queries start on a block boundary (a prompt)
            assert (
                windowed_pairs(n, m, window, True, rows, keys) == _brute_blocks(n, m, rows, keys, window) * rows * keys
            )
    # arrays of tiles give each row its own count
    got = blocked_causal_pairs(np.array([300, 300]), np.array([300, 300]), 64, np.array([128, 256]))
    assert list(got) == [_brute_blocks(300, 300, 64, 128) * 64 * 128, _brute_blocks(300, 300, 64, 256) * 64 * 256]


def test_flash_attention_2_prompt_tiles_are_its_split_kv_forwards():
    """vLLM's FlashAttention-2 call reads a paged cache, so every prompt runs run_mha_fwd_splitkv_dispatch: 64 query
    rows, 256 / 128 / 64 key positions at head dimension <= 64 / <= 128 / above; other kernels keep the profile's
    square block."""
    from costmodel.hardware.kernels import prefill_tile

    a100, h100 = load_profile("a100"), load_profile("h100")
    assert prefill_tile(a100.kernels, 128) == (64, 128)
    assert prefill_tile(a100.kernels, None) == (64, 128)
    assert prefill_tile(a100.kernels, 64) == (64, 256)
    assert prefill_tile(a100.kernels, 256) == (64, 64)
    assert list(prefill_tile(a100.kernels, np.array([64, 128, 192]))[1]) == [256, 128, 64]
    assert prefill_tile(h100.kernels, 128) == (h100.kernels.prefill_block,) * 2


def test_a_synchronous_prompt_kernel_adds_its_loads_to_its_products_by_hand():
    """One 64-token prompt of one head (d 128) on 10 SMs: FlashAttention-2's one 64 x 128 tile does 64 x 128
    pairs of 4 x 128 FLOPs at one SM's tenth of a 1e15 peak; its bytes at 1e12 B/s follow, not beside, the
    products. A warp-specialized kernel's square 128 tile overlaps them."""
    from costmodel.hardware.kernels import KernelFacts

    eff = ClassEfficiency()
    shape = {"b": 1, "h": 1, "g": 1, "n": 64, "m": 64, "k": 128}
    kw = dict(
        peak=1e15,
        bandwidth=1e12,
        sms=10,
        timing="graph",
        flops=4 * 128 * 64 * 64,
        nbytes=2e6,
        shape=shape,
        on={"compute", "tiles", "causal"},
    )
    fa2 = class_times("prefill_attention", eff, kernels=KernelFacts(decode_kernel="flash_attention_2"), **kw)
    tile = 64 * 128 * 4 * 128 / (1e15 / 10)  # the tile's products on one SM
    assert fa2.compute == pytest.approx(tile)
    assert fa2.time == pytest.approx(tile + 2e-6)
    fa3 = class_times("prefill_attention", eff, kernels=KernelFacts(decode_kernel="flash_attention_3"), **kw)
    assert fa3.compute == pytest.approx(2 * tile)  # a 128 x 128 tile
    assert fa3.time == pytest.approx(max(2 * tile, 2e-6))


def test_gemm_tiles_by_hand():
    # M=1, N=64, K=256 on 2 SMs: one 64x64 tile, too short a reduction to split (256 / 256 = 1 chunk):
    # one wave of 2 SMs x a 64x64x256 tile, 2 FLOPs per multiply-add
    assert gemm_tiled_flops(1, 1, 256, 64, sms=2, small_tile_exponent=0) == 2 * 64 * 64 * 256 * 2
    # 1024 deep on 4 SMs: the 64x64 tile is split 4 ways (4 chunks of 256): one wave of 4 x 64x64x256
    assert gemm_tiled_flops(1, 64, 1024, 64, sms=4, small_tile_exponent=0) == 4 * 64 * 64 * 256 * 2
    # a large GEMM in whole waves loses nothing: 8 tiles of 128x256 (or 256x128) on 8 SMs
    assert gemm_tiled_flops(1, 512, 4096, 512, sms=8, small_tile_exponent=0) == 2 * 512 * 512 * 4096


def test_bandwidth_curve_and_fixed_cost_by_hand():
    eff = ClassEfficiency(
        fixed_s={"graph": 5e-6}, bandwidth_ceiling=0.8, bandwidth_half_bytes=1e6, bandwidth_exponent=0.5
    )
    t = class_times("norm", eff, peak=1e15, bandwidth=1e12, sms=100, timing="graph", flops=0, nbytes=1e6, shape={})
    # at the half-bandwidth size the achieved bandwidth is half the ceiling: 1 MB at 0.4 TB/s = 2.5 us
    assert t.memory == pytest.approx(2.5e-6)
    assert t.time == pytest.approx(7.5e-6)
    off = class_times(
        "norm", eff, peak=1e15, bandwidth=1e12, sms=100, timing="graph", flops=0, nbytes=1e6, shape={}, on={"compute"}
    )
    assert off.time == pytest.approx(1e-6)  # datasheet bandwidth, no fixed cost


def test_decode_work_units_and_split_kv_by_hand():
    eff = ClassEfficiency(unit_sm_s=2e-6, split_s=3e-6)
    short = {"b": 8, "g": 4, "positions": DECODE_BLOCK}
    long = {**short, "positions": DECODE_BLOCK + 1}
    kw = dict(peak=1e15, bandwidth=1e12, sms=16, timing="graph", flops=0, nbytes=0)
    assert class_times("decode_attention", eff, shape=short, **kw).units == pytest.approx(2e-6 * 32 / 16)
    assert class_times("decode_attention", eff, shape=long, **kw).units == pytest.approx(2e-6 * 32 / 16 + 3e-6)


def test_every_profile_has_sourced_architecture_facts():
    for p in load_all():
        assert p.architecture is not None, p.id
        assert p.architecture.compute_units.source in p.sources


def test_fitted_profiles_say_on_what_and_how_well():
    for pid in ("a100_80gb_sxm", "h100_sxm"):
        e = load_profile(pid).efficiency
        assert e is not None and e.data and "least squares" in e.method
        assert {"gemm/graph", "decode_attention/graph", "prefill_attention/graph"} <= set(e.error)
        # a handful per op class: named mechanisms, not a table per shape (the fixed cost counts once per timing)
        per_class = {c: len(v.fitted) + len(v.fixed_s) - ("fixed" in v.fitted) for c, v in e.classes.items()}
        assert e.parameters == sum(per_class.values())
        assert all(2 <= n <= 10 for n in per_class.values()), per_class


def test_transfer_rule_for_a_gpu_without_data():
    h100, h200 = load_profile("h100_sxm"), load_profile("h200_sxm")
    assert reference_for(h200).id == "h100_sxm"
    got = resolve(h200, "graph")
    assert str(got.origin["gemm"]) == "transferred from h100_sxm" and got.origin["gemm"].kind == "transferred"
    src, dst = h100.efficiency.classes["decode_attention"], got.classes["decode_attention"]
    assert dst.bandwidth_half_bytes == pytest.approx(src.bandwidth_half_bytes * h200.bandwidth / h100.bandwidth)
    assert dst.bandwidth_ceiling == src.bandwidth_ceiling and dst.fixed_s == src.fixed_s
    assert dst.unit_sm_s == pytest.approx(src.unit_sm_s)  # same clock
    # an Ada GPU borrows the nearest older generation's fit; a TPU has none and says so
    assert reference_for(load_profile("l40s")).id == "a100_80gb_sxm"
    assert resolve(load_profile("tpu_v5e"), "graph") is None


def test_a_vector_kernel_carries_its_bandwidth_per_sm_cycle_not_its_fraction_of_the_datasheet():
    from costmodel.hardware.mechanisms import VECTOR_CLASSES
    from costmodel.price.transfer import transfer, vector_bandwidth_scale

    h100, b200, h200 = load_profile("h100_sxm"), load_profile("b200"), load_profile("h200_sxm")
    # by hand from the datasheets: 148 SMs at 1.965 GHz over 8 TB/s against 132 at 1.98 GHz over 3.35 TB/s
    assert vector_bandwidth_scale(h100, b200) == pytest.approx(148 * 1.965 / (132 * 1.98) * 3.35 / 8.0)
    assert vector_bandwidth_scale(h100, h200) == pytest.approx(3.35 / 4.8)  # one die, the same SMs and clock
    src = resolve(h100, "graph").get("activation")
    got = transfer(src, h100, b200, "activation")
    per_sm_cycle = lambda eff, p: (  # noqa: E731
        eff.bandwidth_ceiling * p.bandwidth / (p.architecture.compute_units.value * p.architecture.clock_hz.value)
    )
    assert per_sm_cycle(got, b200) == pytest.approx(per_sm_cycle(src, h100))
    # the ramp lasts as long: half-bandwidth bytes over the achieved bandwidth
    ramp = lambda eff, p: eff.bandwidth_half_bytes / (eff.bandwidth_ceiling * p.bandwidth)  # noqa: E731
    assert ramp(got, b200) == pytest.approx(ramp(src, h100))
    # never above the datasheet bandwidth: the B200's elementwise kernel carried back to the H100
    back = transfer(src.model_copy(update={"bandwidth_ceiling": 0.9}), b200, h100, "elementwise")
    assert back.bandwidth_ceiling == 1.0
    # a device resolves its vector classes by the rule, its matrix classes keep their fraction of the datasheet
    mine = resolve(b200, "graph")
    for cls in set(VECTOR_CLASSES) & set(mine.classes):
        theirs = resolve(h100, "graph").get(cls)
        want = min(1.0, theirs.bandwidth_ceiling * vector_bandwidth_scale(h100, b200))
        assert mine.get(cls).bandwidth_ceiling == pytest.approx(want), cls
    h200_gemm = resolve(h200, "graph").get("gemm")
    assert h200_gemm.bandwidth_ceiling == h100.efficiency.classes["gemm"].bandwidth_ceiling


def test_attention_comes_from_a_gpu_running_the_same_kind_of_kernel():
    # the RTX 5090 (Blackwell) runs FlashAttention-2 under vLLM: its GEMMs from the B200 (same generation), its
    # attention classes from the A100, whose kernel computes the softmax between the matrix products as its own does
    rtx, a100 = load_profile("rtx_5090"), load_profile("a100_80gb_sxm")
    assert attention_kind(rtx) == attention_kind(a100) == "synchronous"
    assert attention_kind(load_profile("b200")) == attention_kind(load_profile("h100_sxm")) == "warp_specialized"
    assert reference_for(rtx).id == "b200"
    assert reference_for(rtx, cls="prefill_attention").id == reference_for(rtx, cls="decode_attention").id == a100.id
    got = resolve(rtx, "graph")
    assert got.origin["gemm"].device == "b200" and got.origin["prefill_attention"].device == a100.id
    assert got.origin["decode_attention"].device == a100.id
    mine = a100.efficiency.classes["prefill_attention"]
    assert got.classes["prefill_attention"].compute_efficiency == mine.compute_efficiency
    clock = a100.architecture.clock_hz.value / rtx.architecture.clock_hz.value
    sms = a100.architecture.compute_units.value / rtx.architecture.compute_units.value
    assert got.classes["prefill_attention"].score_s == pytest.approx(mine.score_s * clock * sms)
    # the H100 without its fit: attention from the B200 (warp-specialized, as FlashAttention-3 is), GEMMs from the
    # nearest older generation; the A100 shares its kind with no other fitted GPU: the generation order alone
    h100 = load_profile("h100_sxm")
    assert reference_for(h100, cls="decode_attention").id == "b200" and reference_for(h100).id == a100.id
    assert reference_for(a100, cls="prefill_attention").id == reference_for(a100).id == "h100_sxm"
    # a device that names no kernel (the V100) and the same-kind devices of one generation keep the generation order
    assert reference_for(load_profile("v100_sxm2_32gb"), cls="prefill_attention").id == a100.id
    assert reference_for(load_profile("h200_sxm"), cls="prefill_attention").id == "h100_sxm"
    shown = CliRunner().invoke(main, ["hardware", "show", "rtx_5090"]).output
    assert "transferred from b200" in shown and "attention classes from a100_80gb_sxm" in shown


def test_without_all_is_the_datasheet_roofline():
    from costmodel import Workload, predict

    hw = load_profile("a100")
    w = Workload.create(variant="mqa", batch=8, context=1000, execution="fused")
    p = predict(w, hw, without=("all",))
    assert p.mechanisms == []
    for op in p.ops:
        assert op.time_s == pytest.approx(
            max(
                op.flops / hw.peak("bf16")
                if op.einsum or op.name == "attention"
                else op.flops / hw.vector_peak("bf16"),
                op.bytes / hw.bandwidth,
            )
        )
    fitted = predict(w, hw)
    assert fitted.total.time_s > p.total.time_s  # the datasheet roofline is a lower bound
    assert any("fitted on a100_80gb_sxm" in a for a in fitted.assumptions)
    assert any("no fitted efficiency" in a for a in predict(w, load_profile("tpu-v5e")).assumptions)
    with pytest.raises(Exception, match="unknown mechanism"):
        time_model(hw, "graph", ("tile",))


@pytest.fixture(scope="module")
def published_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("pub") / "report.json"
    r = CliRunner().invoke(main, ["validate", "--published", "--json", str(out)])
    assert r.exit_code == 0, r.output
    return r.output, json.loads(out.read_text())


def test_published_json_contract(published_report):
    text, report = published_report
    assert set(report) == {"rows", "summary"}
    classes = {r["op_class"] for r in report["rows"]}
    assert {"decode_attention", "prefill_attention", "gemm", "norm", "elementwise"} <= classes
    for row in report["rows"][:: max(len(report["rows"]) // 200, 1)]:
        assert {"source", "gpu", "profile", "op_class", "measured_s", "predicted_s", "error_pct"} <= set(row)
        assert row["error_pct"] == pytest.approx((row["predicted_s"] / row["measured_s"] - 1) * 100, abs=1e-3)
    for s in report["summary"]:
        assert {
            "source",
            "gpu",
            "op_class",
            "n",
            "median_abs_error_pct",
            "p90_abs_error_pct",
            "median_measured_over_predicted",
        } <= set(s)
    assert "aiconfigurator  a100_sxm  vllm    decode_attention" in text


def test_each_attention_row_names_the_predict_command_that_gives_its_time(published_report):
    _, report = published_report
    rows = [r for r in report["rows"] if "command" in r and r["op_class"].endswith("attention")]
    rng = np.random.default_rng(7)
    for i in rng.choice(len(rows), 6, replace=False):
        row = rows[int(i)]
        r = CliRunner().invoke(main, [*row["command"], "--json"])
        assert r.exit_code == 0, r.output
        op = next(o for o in json.loads(r.output)["ops"] if o["name"] == "attention")
        assert op["time_s"] == pytest.approx(row["predicted_s"], rel=1e-12)


def test_a_table_of_an_unknown_gpu_is_refused_naming_the_known(tmp_path):
    from costmodel.validation.published import shipped_folder

    src = shipped_folder() / "aiconfigurator" / "h100_sxm_vllm_0.19.0_gemm.csv"
    shutil.copy(src, tmp_path / "vr200_vllm_0.20.0_gemm.csv")
    r = CliRunner().invoke(main, ["validate", "--published", str(tmp_path)])
    assert r.exit_code != 0
    assert "Error: no hardware profile for system 'vr200'" in r.output and "h100-sxm5" in r.output
    assert "Traceback" not in r.output


def test_a_new_gpu_in_the_same_layout_is_read_through_its_alias(tmp_path):
    from costmodel.validation.published import shipped_folder

    src = shipped_folder() / "aiconfigurator" / "h100_sxm_vllm_0.19.0_gemm.csv"
    shutil.copy(src, tmp_path / "h200_sxm_vllm_0.19.0_gemm.csv")
    r = CliRunner().invoke(main, ["validate", "--published", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "h200_sxm  vllm    gemm" in r.output


def test_impossible_rows_are_rejected_with_a_count(tmp_path):
    header = "framework,version,device,op_name,kernel_source,gemm_dtype,m,n,k,latency\n"
    # 8192^3 x 2 FLOPs = 1.1 PFLOP in 1 us is far beyond the A100's 312 TFLOP/s; the other row is plausible
    rows = "VLLM,0,x,gemm,v,bfloat16,8192,8192,8192,0.001\nVLLM,0,x,gemm,v,bfloat16,4096,4096,4096,0.6\n"
    (tmp_path / "a100_sxm_vllm_0.0.1_gemm.csv").write_text(header + rows)
    r = CliRunner().invoke(main, ["validate", "--published", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "rejected (faster than the dense-peak bound on their FLOPs): aiconfigurator/a100_sxm/gemm 1" in r.output
    assert "  1  " in r.output  # one row left in the summary


def test_switching_a_mechanism_off_changes_the_error(published_report):
    r = CliRunner().invoke(main, ["validate", "--published", "--without", "fixed"])
    assert r.exit_code == 0 and "mechanisms switched off: fixed" in r.output
    assert r.output != published_report[0]


def test_noise_check_flags_a_busy_machine():
    pytest.importorskip("torch")
    import os

    from costmodel.validation.timing import noise_check

    cores = os.cpu_count() or 1
    quiet = noise_check(0.1, [1.05, 1.1, 1.02], 2)
    assert not quiet["busy"] and quiet["warning"] is None and quiet["median_spread"] == 1.05
    loaded = noise_check(float(cores), [1.05], 2)
    assert loaded["busy"] and f"load average {cores:.2f}" in loaded["warning"]
    noisy = noise_check(0.0, [1.6, 1.9, 1.2], 2)
    assert noisy["busy"] and "spread 1.60" in noisy["warning"]


def test_a_cpu_fit_uses_only_the_mechanisms_it_covers():
    from costmodel.hardware.profile import HardwareProfile

    data = load_profile("epyc_9004_2vcpu").model_dump(mode="json")
    data["efficiency"] = {
        "data": ["a calibration"],
        "method": "by hand",
        "mechanisms": ["fixed", "bandwidth", "compute"],
        "classes": {"gemm": {"fixed_s": {"eager": 1e-5}, "bandwidth_ceiling": 0.5, "fitted": ["fixed"]}},
    }
    hw = HardwareProfile.model_validate(data)
    model = time_model(hw, "eager")
    assert model.on == {"fixed", "bandwidth", "compute"}
    from costmodel import Workload, predict

    p = predict(Workload.create("mha", batch=1, d_model=256, heads=4, context=64, dtype="fp32"), hw, timing="eager")
    q = next(o for o in p.ops if o.name == "q_proj")
    # no tiles: the 1-row projection's compute is its exact FLOPs at the peak; memory at half bandwidth
    assert q.compute_s == pytest.approx(q.flops / hw.peak("fp32"))
    assert q.time_s == pytest.approx(1e-5 + max(q.compute_s, q.bytes / (0.5 * hw.bandwidth)))


def test_a_kernel_that_streams_then_computes_adds_its_compute_and_memory_time():
    from costmodel import Workload, predict
    from costmodel.hardware.profile import HardwareProfile

    data = load_profile("epyc_9004_2vcpu").model_dump(mode="json")
    fused = {"fixed_s": {"eager": 2e-5}, "compute_efficiency": 0.5, "bandwidth_ceiling": 0.25}
    w = Workload.create("mqa", batch=4, d_model=512, heads=8, context=4096, dtype="fp32", execution="fused")
    times = {}
    for way in ("max", "sum"):
        data["efficiency"] = {
            "data": ["a calibration"],
            "method": "by hand",
            "mechanisms": ["fixed", "bandwidth", "compute"],
            "classes": {"decode_attention": {**fused, "overlap": way, "fitted": ["fixed"]}},
        }
        hw = HardwareProfile.model_validate(data)
        p = predict(w, hw, timing="eager")
        op = next(o for o in p.ops if o.name == "attention")
        # the assumptions say which classes add up their compute and memory
        assert any("compute + memory instead of max" in a and "decode_attention" in a for a in p.assumptions) == (
            way == "sum"
        )
        # by hand: per query head and position, 4 k FLOPs of the two products and 1 + 5 of scale and
        # softmax (the program's stated counts); K and V of the one head, the query and the output
        positions, k = 4097, 64
        flops = 4 * 8 * positions * (4 * k + 6)
        nbytes = 4 * (2 * 4 * positions * k + 2 * 4 * 8 * k)
        assert (op.flops, op.bytes) == (flops, nbytes)
        compute, memory = flops / (0.5 * hw.peak("fp32")), nbytes / (0.25 * hw.bandwidth)
        times[way] = op.time_s
        assert op.time_s == pytest.approx(2e-5 + (compute + memory if way == "sum" else max(compute, memory)))
    assert times["sum"] > times["max"]


@pytest.mark.parametrize("way", ["max", "sum"])
def test_a_cpu_class_fit_tells_a_kernel_that_overlaps_from_one_that_does_not(way):
    from costmodel.validation.fit import fit_overlap
    from costmodel.validation.tables import Table

    hw = load_profile("epyc_9004_2vcpu")
    peak, bandwidth = hw.peak("fp32"), hw.bandwidth
    # a decode kernel's points: query rows per key/value head 1..64 over 1-64 MB of K/V, compute and memory
    # time equal at 8 rows; times by hand
    rows = np.array([1, 2, 4, 8, 16, 32, 64] * 3, float)
    nbytes = np.repeat([1e6, 8e6, 64e6], 7)
    flops = rows / 8 * nbytes * (0.4 * peak) / (0.5 * bandwidth)
    compute, memory = flops / (0.4 * peak), nbytes / (0.5 * bandwidth)
    measured = 3e-5 + (compute + memory if way == "sum" else np.maximum(compute, memory))
    table = Table(
        source="by hand",
        gpu="cpu",
        profile=hw.id,
        op_class="decode_attention",
        timing="eager",
        dtype="fp32",
        file="",
        fields={},
        measured_s=measured,
        flops=flops,
        nbytes=nbytes,
        shape={},
    )
    eff = fit_overlap(
        [table],
        hw,
        ("fixed", "compute_efficiency", "bandwidth_ceiling"),
        on=frozenset({"fixed", "bandwidth", "compute"}),
        starts=5,
    )
    assert eff.overlap == way and "overlap" in eff.fitted
    assert (eff.compute_efficiency, eff.bandwidth_ceiling, eff.fixed_s["eager"]) == pytest.approx(
        (0.4, 0.5, 3e-5), rel=1e-3
    )


def test_an_unfused_causal_mask_is_read_broadcast():
    from costmodel import Workload, predict

    hw = load_profile("h100")
    w = Workload.create("mha", "batched", batch=4, seq=256, heads=8, d_model=1024)
    mask = lambda p: next(o for o in p.ops if o.name == "mask")  # noqa: E731
    full, causal = mask(predict(w, hw, without=("causal",))), mask(predict(w, hw))
    assert full.bytes == causal.bytes == 2 * 3 * 4 * 8 * 256 * 256  # the paper's op: logits in and out, mask
    # the memory side shrinks by the [b, h, n, m] mask less one [n, m] mask, in bf16
    eff = resolve(hw, "graph").get("elementwise")

    def memory(nbytes):
        return (
            nbytes
            / (hw.bandwidth * eff.bandwidth_ceiling)
            * (1 + (eff.bandwidth_half_bytes / nbytes) ** eff.bandwidth_exponent)
        )

    assert full.memory_s == pytest.approx(memory(full.bytes))
    assert causal.memory_s == pytest.approx(memory(full.bytes - 2 * 4 * 8 * 256 * 256 + 2 * 256 * 256))


def test_noise_check_flags_a_machine_whose_speed_moved_since_calibration():
    pytest.importorskip("torch")
    from costmodel.validation.timing import noise_check

    assert not noise_check(0.0, [1.0], 2, drift=1.1)["busy"]
    moved = noise_check(0.0, [1.0], 2, drift=0.5)
    assert moved["busy"] and "read bandwidth 0.50x what it was at calibration" in moved["warning"]


def test_every_nvidia_gpu_prices_every_class_from_a_fit():
    # no op of an NVIDIA GPU silently falls back to the datasheet roofline, under any timing convention
    from costmodel.hardware.mechanisms import CLASSES, TIMINGS
    from costmodel.price.origin import LOW_PRECISION_CLASSES

    for p in load_all():
        if p.vendor != "NVIDIA":
            continue
        # the fp8 GEMM classes where the device has fp8 math (Ada, Hopper, Blackwell), the fp4 one where it has fp4
        # math (Blackwell), none where not
        want = set(CLASSES) - {c for c, math in LOW_PRECISION_CLASSES.items() if math not in p.peak_flops_per_s}
        for timing in TIMINGS:
            got = resolve(p, timing)
            assert set(got.classes) == want, (p.id, timing)
            for cls, eff in got.classes.items():
                if timing == "graph" or "no " not in str(got.origin[cls]):
                    assert timing in eff.fixed_s or "no " in str(got.origin[cls]), (p.id, timing, cls)


def test_torch_layernorm_rows_are_priced_with_their_own_class_and_reported_as_norms():
    from costmodel.price.origin import resolve
    from costmodel.validation.fit import predict_table
    from costmodel.validation.published import read_folder, shipped_folder

    tables, _ = read_folder(shipped_folder())
    ln = [t for t in tables if t.source == "llmcompass" and t.kernel == "layernorm"]
    # the M x N sweep and the GPT-3 layer's two LayerNorms (prefill and decode tables)
    assert {t.file for t in ln} >= {"layernorm_A100.csv", "transformer_prefill_A100.csv"}
    assert all(t.op_class == "norm" and t.priced_class == "layernorm" for t in ln)
    sweep = next(t for t in ln if t.file == "layernorm_A100.csv")
    hw = load_profile("a100")
    eff = resolve(hw, "eager").get("layernorm")
    M, N = sweep.fields["M"], sweep.fields["N"]
    # host launch plus M x N halves read and written at the fitted fraction of 2,039 GB/s
    hand = eff.fixed_s["eager"] + 4 * M * N / (2.039e12 * eff.bandwidth_ceiling)
    assert predict_table(sweep, hw, eff) == pytest.approx(hand)
    # the RMSNorm rows of vLLM's own kernel stay with the norm class
    assert any(t.source == "vidur" and t.priced_class == "norm" for t in tables)

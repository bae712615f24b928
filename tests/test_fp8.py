"""fp8 as engines run it: GEMMs over fp8 weights priced by their own fitted kernel classes (per tensor and
block-scaled), which beat the bf16 GEMM at the fp8 peak on the tables they were fitted on and carry to a GPU
they did not see; an fp8 KV cache read by the bf16-fitted decode kernel at one byte per element, scored on the
H100's fp8-KV decode table, which no fit saw."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

import costmodel
from costmodel import Layout, Load
from costmodel.validation.fit import predict_table
from costmodel.validation.published import attention_counts, read_folder
from costmodel.validation.tables import Table

SHARED = Path(__file__).resolve().parents[2] / "shared" / "measurements"


@pytest.fixture(scope="module")
def tables():
    if not SHARED.is_dir():
        pytest.skip(f"the published tables are not beside this checkout ({SHARED})")
    return read_folder(SHARED, engines=("vllm",))[0]


def _median_error(tables, hw, eff) -> float:
    pred = np.concatenate([predict_table(t, hw, eff) for t in tables])
    meas = np.concatenate([t.measured_s for t in tables])
    return float(np.median(np.abs(pred / meas - 1)))


@pytest.mark.parametrize("cls", ["gemm_fp8", "gemm_fp8_block"])
def test_fp8_classes_beat_the_bf16_gemm_at_the_fp8_peak(tables, cls):
    hw = costmodel.load_profile("h100")
    ts = [t for t in tables if t.profile == "h100_sxm" and t.priced_class == cls]
    assert ts and sum(len(t) for t in ts) > 10_000
    own = _median_error(ts, hw, hw.efficiency.classes[cls])
    bf16 = _median_error(ts, hw, hw.efficiency.classes["gemm"])
    assert own < 0.5 * bf16


@pytest.mark.parametrize("cls", ["gemm_fp8", "gemm_fp8_block"])
def test_fp8_classes_carry_to_the_b200(tables, cls):
    """The B200's fp8 GEMM tables, priced with the H100's fp8 classes through the transfer rule (the check the
    B200's own fit does not see): within 25% median, and the B200's own fit closer (docs/validation.md states
    each)."""
    from costmodel.price.transfer import transfer

    hw, h100 = costmodel.load_profile("b200"), costmodel.load_profile("h100")
    ts = [t for t in tables if t.profile == "b200" and t.priced_class == cls]
    assert ts
    carried = _median_error(ts, hw, transfer(h100.efficiency.classes[cls], h100, hw))
    assert carried < 0.25
    assert _median_error(ts, hw, hw.efficiency.classes[cls]) < carried


def test_the_nvfp4_table_and_its_fitted_class(tables):
    """The B200's NVFP4 linear layers: FLOPs 2MNK at the fp4 peak, bytes counted as a model step counts them (input
    and output in bf16, weights 4 bits and an FP8 scale per 16; by hand on a row), fitted as their own class; the
    block-scaled fp8 class it would fall back to (transferred from the H100) is more than 5x as far off."""
    from costmodel.price.origin import resolve
    from costmodel.price.transfer import transfer

    hw = costmodel.load_profile("b200")
    ts = [t for t in tables if t.profile == "b200" and t.priced_class == "gemm_nvfp4"]
    assert ts and sum(len(t) for t in ts) > 20_000 and {t.dtype for t in ts} == {"fp4"}
    t = ts[0]
    M, K, N = (float(t.shape[k][0]) for k in ("M", "K", "N"))
    assert t.flops[0] == 2 * M * K * N and t.nbytes[0] == 2 * M * K + 0.5625 * K * N + 2 * M * N
    own = _median_error(ts, hw, resolve(hw, "graph").classes["gemm_nvfp4"])
    h100 = costmodel.load_profile("h100")
    fallback = _median_error(ts, hw, transfer(h100.efficiency.classes["gemm_fp8_block"], h100, hw))
    assert own < 0.2 * fallback
    assert resolve(costmodel.load_profile("h100"), "graph").get("gemm_nvfp4") is None  # no fp4 math, no class


def test_fp8_kv_decode_attention_is_the_bf16_kernel_reading_one_byte(tables):
    path = SHARED / "aiconfigurator" / "all_dtypes" / "h100_sxm_vllm_0.19.0_generation_attention_perf.csv"
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kv_cache_dtype"] == "fp8" and r["window_size"] == "0"]
    b, h, g, k, s = (
        np.array([float(r[c]) for r in rows])
        for c in ("batch_size", "num_heads", "num_key_value_heads", "head_dim", "step")
    )
    t = np.array([float(r["latency"]) for r in rows]) * 1e-3
    flops, nbytes = attention_counts("incremental", b, np.ones_like(b), s - 1, h, g, k)
    nbytes = nbytes - b * s * g * k * 2  # the K and V read at one byte each, not two
    table = Table(
        source="aiconfigurator",
        gpu="h100_sxm",
        profile="h100_sxm",
        op_class="decode_attention",
        timing="graph",
        dtype="bf16",
        file=path.name,
        fields={},
        measured_s=t,
        flops=flops,
        nbytes=nbytes,
        shape={"b": b, "g": g, "h": h, "positions": s},
    )
    hw = costmodel.load_profile("h100")
    err = np.abs(predict_table(table, hw, hw.efficiency.classes["decode_attention"]) / t - 1)
    assert len(t) > 10_000 and np.median(err) < 0.15


def test_a_block_scaled_checkpoint_runs_the_block_scaled_class():
    from costmodel.model.pricing import pricing
    from costmodel.model.step import op_time, phase_ops

    m = costmodel.load_model("Qwen/Qwen3-32B-FP8")
    pr = pricing(m, costmodel.load_profile("h100"))
    rows = phase_ops(m, pr, "decode", 8, 1024, 1)
    qkv = next(r for r in rows if r.name == "qkv_proj")
    assert pr.weight_dtype == "fp8_block" and pr.gemm_dtype == "fp8"
    assert op_time(qkv, pr).cls == "gemm_fp8_block"


def test_tensorrt_llm_runs_a_block_scaled_checkpoints_dense_layers_in_its_own_kernel():
    """TensorRT-LLM's block-scaled FP8 linear layers are a quantize kernel and a CUTLASS GEMM of its own (priced as the
    per-tensor class); its experts stay in the block-scaled MoE class. vLLM and SGLang keep the block-scaled class
    their tables measure. A serving prediction reaches the step through the engine."""
    from costmodel.engine.config import engine
    from costmodel.model.pricing import pricing
    from costmodel.model.step import op_time, phase_ops
    from costmodel.price.op import KernelOp, price

    m, hw = costmodel.load_model("Qwen/Qwen3-235B-A22B-FP8"), costmodel.load_profile("h100")
    kernels = {
        name: engine(name, capacity_bytes=hw.engine_memory).block_fp8_linear for name in ("vllm", "sglang", "trtllm")
    }
    assert kernels == {"vllm": "gemm_fp8_block", "sglang": "gemm_fp8_block", "trtllm": "gemm_fp8"}
    classes = {}
    for name, kernel in kernels.items():
        pr = pricing(m, hw, tp=4, expert_parallel=True, block_fp8_linear=kernel)
        rows = {r.name: r for r in phase_ops(m, pr, "decode", 8, 1024, 1)}
        qkv, experts = rows["qkv_proj"], rows["experts_gate_up"]
        classes[name] = (op_time(qkv, pr).cls, op_time(experts, pr).cls)
        # the same op under the named class's own parameters, priced directly
        alone = price(
            KernelOp(qkv.op.kind, qkv.op.name, "fp8", qkv.op.flops, qkv.op.bytes, kernel=kernel),
            qkv.shape,
            hw,
            costmodel.price.op.Conventions(pr.model, pr.overlap),
        )
        assert op_time(qkv, pr).time == pytest.approx(alone.time, rel=1e-12)
    assert classes["vllm"] == classes["sglang"] == ("gemm_fp8_block", "moe_fp8_block")
    assert classes["trtllm"] == ("gemm_fp8", "moe_fp8_block")
    with pytest.raises(costmodel.CostModelError, match="block fp8 linear kernel"):
        pricing(m, hw, block_fp8_linear="gemm")
    served = costmodel.serve(
        m,
        hw,
        Load(concurrency=4, input_len=256, output_len=16),
        layout=Layout(tp=4, expert_parallel=True),
        engine_name="trtllm",
    )
    assert any("priced as the per-tensor FP8 class" in a for a in served.assumptions)


def test_the_input_quantize_kernel():
    """A per-tensor fp8 linear layer quantizes its bf16 input in a kernel of its own: M x K elements read at 2 bytes
    and written at 1, at the class's achieved-bandwidth curve, by hand; nothing where the fit says the layer has no
    such kernel, where the mechanism is off, or for a MoE class (whose fit has no such kernel)."""
    from costmodel.hardware.mechanisms import QUANTIZED_WIDTH, class_times
    from costmodel.hardware.profile import ClassEfficiency

    eff = ClassEfficiency(bandwidth_ceiling=0.8, bandwidth_half_bytes=1e6, bandwidth_exponent=0.5, quantize_input=True)
    kw = dict(peak=1e15, bandwidth=2e12, sms=100, timing="graph", flops=0.0, nbytes=0.0)
    shape = {"batch": 2, "M": 1000, "K": 3000, "N": 64, "width": 2}
    q = 2 * 1000 * 3000 * (2 + 1)
    want = q / (2e12 * 0.8) * (1 + (1e6 / q) ** 0.5)
    assert float(class_times("gemm_fp8", eff, shape=shape, **kw).units) == pytest.approx(want, rel=1e-12)
    # a block-scaled input writes a 4-byte scale per group of 128, NVFP4 half a byte and an 8-bit scale per 16
    assert QUANTIZED_WIDTH["gemm_fp8_block"] == 1 + 4 / 128 and QUANTIZED_WIDTH["gemm_nvfp4"] == 0.5 + 1 / 16
    block = float(class_times("gemm_fp8_block", eff, shape=shape, **kw).units)
    qb = 2 * 1000 * 3000 * (2 + 1 + 4 / 128)
    assert block == pytest.approx(qb / (2e12 * 0.8) * (1 + (1e6 / qb) ** 0.5), rel=1e-12)
    for cls, e, on in (
        ("gemm_fp8", eff.model_copy(update={"quantize_input": False}), None),
        ("gemm_fp8", eff, set(costmodel.hardware.mechanisms.MECHANISMS) - {"quantize"}),
        ("moe_fp8", eff, None),
    ):
        extra = {} if on is None else {"on": on}
        assert float(class_times(cls, e, shape=shape, **kw, **extra).units) == 0.0
    # with the bandwidth curve off, the datasheet bandwidth
    flat = class_times(
        "gemm_fp8", eff, shape=shape, on=set(costmodel.hardware.mechanisms.MECHANISMS) - {"bandwidth"}, **kw
    )
    assert float(flat.units) == pytest.approx(q / 2e12, rel=1e-12)
    # the H100's fit chose the kernel (fitting both ways, validation.fit.CHOICES); its MoE class has none
    h100 = costmodel.load_profile("h100")
    assert h100.efficiency.classes["gemm_fp8"].quantize_input
    assert "quantize_input" in h100.efficiency.classes["gemm_fp8"].fitted
    assert not h100.efficiency.classes["moe_fp8"].quantize_input


def test_vllms_fp8_gemm_runs_the_tile_its_dispatch_picks():
    """The per-tensor fp8 GEMM's tile is vLLM's fixed dispatch (by hand from scaled_mm_sm90/sm100_fp8_dispatch.cuh),
    in whole waves and never split over K; its time counts those tiles."""
    from costmodel.hardware.kernels import GemmDispatch, TileRule
    from costmodel.hardware.mechanisms import class_times
    from costmodel.hardware.tiles import dispatched_tiles
    from costmodel.price.origin import resolve

    h100, b200 = costmodel.load_profile("h100"), costmodel.load_profile("b200")
    rules = h100.architecture.kernels.gemm_dispatch["gemm_fp8"].rules
    M = np.array([1, 16, 17, 17, 64, 65, 128, 129, 8192])
    N = np.array([4096, 4096, 1024, 4096, 1280, 4096, 4096, 4096, 4096])
    tm, tn, per, cm, cn = dispatched_tiles(rules, M, np.full(M.shape, 8192), N)
    assert list(zip(tm, tn)) == [
        (16, 64),
        (16, 64),
        (16, 64),
        (64, 64),
        (16, 64),
        (64, 128),
        (64, 128),
        (128, 128),
        (128, 128),
    ]
    assert (per == 1).all()  # SM90 has no tile over two SMs
    # clusters (tiles along M, along N), from the configurations' ClusterShape (a swapped one's reversed)
    assert list(zip(cm, cn)) == [(1, 1), (1, 1), (4, 1), (1, 1), (4, 1), (2, 1), (2, 1), (2, 1), (2, 1)]
    assert dispatched_tiles(rules, np.array([8]), np.array([8192]), np.array([1024]))[3:] == (2, 1)
    rules = b200.architecture.kernels.gemm_dispatch["gemm_fp8"].rules
    tm, tn, per, cm, cn = dispatched_tiles(
        rules, np.array([16, 64, 64, 200, 300]), np.array([8192, 2048, 4096, 8192, 8192]), np.full(5, 4096)
    )
    assert list(zip(tm, tn)) == [(32, 128), (64, 64), (64, 128), (128, 128), (256, 128)]
    # SM100: every configuration with an even cluster M and a tile M (the swapped ones' N) of 128 or 256 runs on a
    # pair of SMs; the 64 x 64 one on one
    assert list(per) == [2, 1, 2, 2, 2]
    assert list(zip(cm, cn)) == [(1, 2), (1, 1), (1, 2), (1, 1), (1, 2)]
    with pytest.raises(ValueError):
        GemmDispatch(source="x", rules=(TileRule(m_max=16, tile=(16, 64)),))  # no rule for the other shapes
    # a decode-sized product on the H100: 8 rows, 8192 x 8192 -> 1 x 128 tiles of 16 x 64, one wave of 132 SMs
    eff = resolve(h100, "graph").classes["gemm_fp8"]
    peak = h100.peak("fp8") * eff.compute_efficiency
    largest = h100.architecture.kernels.largest_tile
    flops = 132 * 16 * 64 * (8192 + eff.tile_k_overhead) * 2 / (16 * 64 / largest) ** eff.small_tile_exponent
    t = class_times(
        "gemm_fp8",
        eff,
        peak=h100.peak("fp8"),
        bandwidth=h100.bandwidth,
        sms=132,
        timing="graph",
        flops=2 * 8 * 8192 * 8192,
        nbytes=8192 * 8192 + 2 * 8 * 8192 * 2,
        shape={"batch": 1, "M": 8, "K": 8192, "N": 8192, "width": 1},
        kernels=h100.architecture.kernels,
    )
    assert float(t.compute) == pytest.approx(flops / peak, rel=1e-12)
    # no split-K combine: the second kernel is the layer's input quantize alone (test_the_input_quantize_kernel)
    off = class_times(
        "gemm_fp8",
        eff,
        peak=h100.peak("fp8"),
        bandwidth=h100.bandwidth,
        sms=132,
        timing="graph",
        flops=2 * 8 * 8192 * 8192,
        nbytes=8192 * 8192 + 2 * 8 * 8192 * 2,
        shape={"batch": 1, "M": 8, "K": 8192, "N": 8192, "width": 1},
        kernels=h100.architecture.kernels,
        on=set(costmodel.hardware.mechanisms.MECHANISMS) - {"quantize"},
    )
    assert float(off.units) == 0.0
    # a B200 prefill-sized product: 300 rows x 256 columns -> 2 x 2 tiles of 256 x 128, each on a pair of SMs: 8 of
    # the 148 SMs in one wave, each computing 128 x 128 over the whole K
    eff = resolve(b200, "graph").classes["gemm_fp8"]
    largest = b200.architecture.kernels.largest_tile
    flops = 148 * 128 * 128 * (8192 + eff.tile_k_overhead) * 2 / (256 * 128 / largest) ** eff.small_tile_exponent
    t = class_times(
        "gemm_fp8",
        eff,
        peak=b200.peak("fp8"),
        bandwidth=b200.bandwidth,
        sms=148,
        timing="graph",
        flops=2 * 300 * 8192 * 256,
        nbytes=300 * 8192 + 8192 * 256 + 2 * 300 * 256,
        shape={"batch": 1, "M": 300, "K": 8192, "N": 256, "width": 1},
        kernels=b200.architecture.kernels,
    )
    assert float(t.compute) == pytest.approx(flops / (b200.peak("fp8") * eff.compute_efficiency), rel=1e-12)


def test_a_cluster_rounds_the_grid_of_tiles():
    """vLLM's SM90 fp8 kernel for M > 128 runs 128 x 128 tiles in clusters of 2 along M, and CUTLASS's persistent
    scheduler launches whole clusters. By hand, N = 5120 (40 tiles across) and K = 8192 on 132 SMs: M = 256 is 2 x 40 =
    80 tiles (one wave); M = 257 is 3 tiles down, rounded to 4: 160 tiles, two waves, as many as M = 512. The
    published H100 table agrees (M 256, 257, 512: 30.4, 58.4, 51.6 us)."""
    from costmodel.hardware.mechanisms import class_times
    from costmodel.price.origin import resolve

    h100 = costmodel.load_profile("h100")
    eff = resolve(h100, "graph").classes["gemm_fp8"]
    kernels = h100.architecture.kernels
    largest = kernels.largest_tile

    def compute(M, kernels=kernels):
        return float(
            class_times(
                "gemm_fp8",
                eff,
                peak=h100.peak("fp8"),
                bandwidth=h100.bandwidth,
                sms=132,
                timing="graph",
                flops=2 * M * 8192 * 5120,
                nbytes=M * 8192 + 8192 * 5120,
                shape={"batch": 1, "M": M, "K": 8192, "N": 5120, "width": 1},
                kernels=kernels,
            ).compute
        )

    wave = 132 * 128 * 128 * (8192 + eff.tile_k_overhead) * 2 / (128 * 128 / largest) ** eff.small_tile_exponent
    rate = h100.peak("fp8") * eff.compute_efficiency
    assert compute(256) == pytest.approx(wave / rate, rel=1e-12)
    assert compute(257) == pytest.approx(2 * wave / rate, rel=1e-12) == compute(512)
    # without the cluster the same 257 rows would be 120 tiles: one wave
    single = kernels.gemm_dispatch["gemm_fp8"].model_copy(
        update={
            "rules": tuple(r.model_copy(update={"cluster": (1, 1)}) for r in kernels.gemm_dispatch["gemm_fp8"].rules)
        }
    )
    plain = kernels.model_copy(update={"gemm_dispatch": {"gemm_fp8": single}})
    assert compute(257, plain) == pytest.approx(wave / rate, rel=1e-12)

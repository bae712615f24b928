"""The kernel behaviours found in the published tables, each against a hand-computed or brute-force case:
unsplit decode contexts, packed-query copies, one-token prefills on the decode kernel, split-K reduction,
packed prefill tiles, every query tile's prologue, the prefill's cache write, the engines' own elementwise
kernels."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main
from costmodel.hardware.catalog import load_profile
from costmodel.hardware.mechanisms import DEFAULT_KERNELS, class_times, efficiency_class
from costmodel.hardware.profile import ClassEfficiency
from costmodel.hardware.tiles import gemm_candidates

PREFILL_BLOCK = DEFAULT_KERNELS.prefill_block
from costmodel.price.origin import resolve, time_model  # noqa: E402

KW = dict(peak=1e15, bandwidth=1e12, timing="graph", flops=0.0)


def test_a_group_of_one_streams_its_context_on_one_sm():
    # FlashAttention-2's varlen decode: h == g is not split; 8 units of 1 MB each on 4 SMs at 1 GB/s per SM
    eff = ClassEfficiency(split_kv="grouped", unsplit_sm_bandwidth=1e9, split_s=3e-6)
    mha = {"b": 8, "g": 1, "h": 1, "positions": 4096}
    t = class_times("decode_attention", eff, sms=4, nbytes=8e6, shape=mha, **KW)
    assert t.memory == pytest.approx(math.ceil(8 / 4) * 1e6 / 1e9)  # two waves of one unit's 1 MB at 1 GB/s
    assert t.units == 0.0  # no split, so no combine kernel
    # the same bytes with two query heads per KV head are split: datasheet bandwidth, and the combine kernel
    gqa = class_times("decode_attention", eff, sms=4, nbytes=8e6, shape={**mha, "h": 2}, **KW)
    assert gqa.memory == pytest.approx(8e6 / 1e12)
    assert gqa.units == pytest.approx(3e-6)
    # a kernel that always splits prices the group of one like any other
    always = class_times(
        "decode_attention", eff.model_copy(update={"split_kv": "always"}), sms=4, nbytes=8e6, shape=mha, **KW
    )
    assert always.memory == pytest.approx(8e6 / 1e12)


@pytest.mark.parametrize("b,h,g,copies", [(1, 8, 2, 0), (4, 8, 1, 0), (4, 8, 8, 0), (4, 8, 2, 1), (2, 64, 8, 1)])
def test_packed_queries_are_copied_only_for_a_batch_of_grouped_kv_heads(b, h, g, copies):
    # the group-packing transpose is a view for one sequence or one KV head, a copy otherwise (hand cases)
    eff = ClassEfficiency(fixed_s={"graph": 1e-6}, split_kv="grouped", group_copy_s=5e-6)
    t = class_times("decode_attention", eff, sms=100, nbytes=0.0, shape={"b": b, "g": g, "h": h, "positions": 1}, **KW)
    assert t.fixed == pytest.approx(1e-6 + copies * 5e-6)


def test_a_one_token_prompt_is_priced_as_the_decode_kernel():
    hw = load_profile("a100")
    model = time_model(hw)
    decode = model.resolved.get("decode_attention")
    r = CliRunner().invoke(
        main,
        [
            "predict",
            "--gpu",
            "a100",
            "--variant",
            "gqa",
            "--groups",
            "2",
            "--heads",
            "8",
            "--d-model",
            "1024",
            "--head-dim",
            "128",
            "--value-dim",
            "128",
            "--batch",
            "16",
            "--mode",
            "batched",
            "--seq",
            "1",
            "--context",
            "1",
            "--execution",
            "fused",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    op = next(o for o in json.loads(r.output)["ops"] if o["name"] == "attention")
    # the decode class's own parameters on the decode kernel's shape: 16 sequences x 2 KV heads, 1 position
    t = class_times(
        "decode_attention",
        decode,
        peak=hw.peak("bf16"),
        bandwidth=hw.bandwidth,
        sms=hw.architecture.compute_units.value,
        timing="graph",
        flops=op["flops"],
        nbytes=op["bytes"],
        shape={"b": 16, "g": 2, "h": 8, "positions": 1},
    )
    assert op["time_s"] == pytest.approx(float(t.time), rel=1e-12)
    assert decode.group_copy_s > 0 and op["time_s"] > decode.fixed_s["graph"] + decode.group_copy_s


def test_published_one_token_prefills_are_reported_as_prefill_and_priced_as_decode(tmp_path):
    from costmodel.validation.published import read_folder
    from costmodel.validation.published_report import validate_published

    header = (
        "framework,version,device,op_name,kernel_source,batch_size,isl,num_heads,num_key_value_heads,"
        "head_dim,beam_width,attn_dtype,kv_cache_dtype,step,latency\n"
    )
    rows = "".join(
        f"VLLM,0,x,context_attention,v,{b},{s},8,2,128,1,bfloat16,bfloat16,0,0.02\n"
        for b, s in ((4, 1), (16, 1), (4, 512))
    )
    (tmp_path / "a100_sxm_vllm_0.0.1_context_attention.csv").write_text(header + rows)
    tables, _ = read_folder(tmp_path)
    assert sorted((t.op_class, t.priced_class, len(t)) for t in tables) == [
        ("prefill_attention", "decode_attention", 2),
        ("prefill_attention", "prefill_attention", 1),
    ]
    report = validate_published(tables)
    assert {r["op_class"] for r in report["rows"]} == {"prefill_attention"}
    one = next(r for r in report["rows"] if r["isl"] == 1 and r["batch_size"] == 16)
    r = CliRunner().invoke(main, [*one["command"], "--json"])
    op = next(o for o in json.loads(r.output)["ops"] if o["name"] == "attention")
    assert op["time_s"] == pytest.approx(one["predicted_s"], rel=1e-12)


def test_gemm_configurations_include_split_k_and_not():
    # M=1, N=64, K=1024 on 4 SMs: one 64x64 tile can be split into 4 chunks of 256 or run whole
    got = {
        int(s): float(c)
        for c, s in gemm_candidates(1, 1, 1024, 64, sms=4, small_tile_exponent=0)
        if c == min(c2 for c2, s2 in gemm_candidates(1, 1, 1024, 64, sms=4, small_tile_exponent=0) if int(s2) == int(s))
    }
    assert got[4] == 4 * 64 * 64 * 256 * 2  # one wave of 4 SMs, each a quarter of the reduction
    assert got[1] == 4 * 64 * 64 * 1024 * 2  # one wave of one tile (the other SMs idle)


def test_split_k_pays_its_reduction_kernel_only_when_it_wins():
    eff = ClassEfficiency(split_s=2e-6)
    kw = dict(peak=1e12, bandwidth=1e15, sms=4, timing="graph", nbytes=0.0)
    shape = {"batch": 1, "M": 1, "K": 1024, "N": 64}
    t = class_times("gemm", eff, flops=2 * 1024 * 64, shape=shape, **kw)
    # split: 4 x 64x64x256 x 2 FLOPs = 8.4 MFLOP at 1 TFLOP/s = 8.4 us + 2 us; whole: 33.6 us
    assert t.compute == pytest.approx(4 * 64 * 64 * 256 * 2 / 1e12)
    assert t.units == pytest.approx(2e-6)
    # a reduction kernel dearer than what splitting saves: the library runs the tile whole
    dear = class_times("gemm", eff.model_copy(update={"split_s": 1e-4}), flops=2 * 1024 * 64, shape=shape, **kw)
    assert dear.compute == pytest.approx(4 * 64 * 64 * 1024 * 2 / 1e12)
    assert dear.units == pytest.approx(0.0)


def _packed_blocks_brute(n, r):
    """Key blocks a causal prompt of n positions computes when a tile holds B/r positions of r heads:
    rows are (position, head) in position order, B rows a tile; a tile reads up to its last position."""
    rows = [p for p in range(n) for _ in range(r)]
    tiles = [rows[i : i + PREFILL_BLOCK] for i in range(0, len(rows), PREFILL_BLOCK)]
    return sum(max(t) // PREFILL_BLOCK + 1 for t in tiles)


@pytest.mark.parametrize("n,h,g", [(128, 8, 1), (256, 8, 2), (1024, 32, 8), (64, 16, 2), (512, 4, 4)])
def test_packed_prefill_tiles_equal_a_brute_force_count(n, h, g):
    eff = ClassEfficiency(pack_gqa=True, compute_efficiency=1.0)
    k = 128
    per_pair = 4 * k  # QK and PV multiply-adds of one pair of one head
    flops = per_pair * h * n * n
    t = class_times(
        "prefill_attention",
        eff,
        peak=1e15,
        bandwidth=1e15,
        sms=10**6,
        timing="graph",
        flops=flops,
        nbytes=0.0,
        shape={"b": 1, "h": h, "g": g, "n": n, "m": n},
        on={"tiles", "causal", "compute"},
    )
    r = h // g
    if r > 1:
        blocks = g * _packed_blocks_brute(n, r)  # tiles of one KV head's group, times its g groups
    else:
        T = math.ceil(n / PREFILL_BLOCK)
        blocks = h * T * (T + 1) // 2
    # a million SMs: one wave, each computed pair of each row at the peak
    tiles = g * math.ceil(n * r / PREFILL_BLOCK) if r > 1 else h * math.ceil(n / PREFILL_BLOCK)
    waves = math.ceil(tiles / 10**6) * 10**6 / tiles
    assert t.compute == pytest.approx(
        max(
            blocks * PREFILL_BLOCK**2 * per_pair * waves / 1e15,
            math.ceil(n / PREFILL_BLOCK) * PREFILL_BLOCK**2 * 10**6 * per_pair / 1e15,
        )
    )


@pytest.mark.parametrize("h,sms,waves", [(1, 1, 4), (1, 4, 1), (3, 4, 3), (1, 3, 2)])
def test_every_prefill_tile_pays_its_prologue_in_whole_waves(h, sms, waves):
    # 512 positions: 4 query tiles per head, h * 4 tiles over `sms` SMs run in ceil(4 h / sms) waves
    shape = {"b": 1, "h": h, "g": h, "n": 512, "m": 512}
    kw = dict(
        peak=1e15,
        bandwidth=1e15,
        sms=sms,
        timing="graph",
        flops=h * 4 * 128 * 512 * 512,
        nbytes=0.0,
        shape=shape,
        on={"tiles", "causal", "compute"},
    )
    base = ClassEfficiency(compute_efficiency=1.0)
    plain = class_times("prefill_attention", base, **kw).compute
    tiled = class_times("prefill_attention", base.model_copy(update={"tile_s": 1e-6}), **kw).compute
    assert waves == math.ceil(4 * h / sms)
    # far more SM time per tile than its blocks: the tiles' prologues, one per tile per wave, dominate
    huge = class_times("prefill_attention", base.model_copy(update={"tile_s": 1.0}), **kw).compute
    assert huge == pytest.approx(waves * 1.0, rel=1e-6)
    # by hand: 1 + 2 + 3 + 4 = 10 blocks a head in whole waves, each tile's prologue once per wave; the last
    # tile (4 blocks, one SM) and its prologue bound the kernel from below
    pair_s = 4 * 128 / 1e15  # QK and PV multiply-adds of one pair at the peak
    spread = h * 10 * 128**2 * pair_s * (waves * sms / (4 * h)) + waves * 1e-6
    longest = 4 * 128**2 * pair_s * sms + 1e-6
    assert tiled == pytest.approx(max(spread, longest))
    assert plain == pytest.approx(max(spread - waves * 1e-6, longest - 1e-6))


def test_a_prefill_call_that_writes_the_cache_pays_for_it():
    shape = {"b": 2, "h": 8, "g": 2, "n": 1000, "m": 1000, "write_bytes": 2 * 2 * 1000 * 2 * 256 * 2}
    kw = dict(peak=1e15, bandwidth=1e12, sms=100, timing="graph", flops=0.0, nbytes=0.0, shape=shape)
    outside = class_times("prefill_attention", ClassEfficiency(), **kw)
    inside = class_times("prefill_attention", ClassEfficiency(cache_write_ceiling=0.5), **kw)
    # read and write 2 sequences x 1000 tokens x 2 KV heads x (k + v = 256) x 2 bytes at half of 1 TB/s
    assert inside.units - outside.units == pytest.approx(2 * 2 * 1000 * 2 * 256 * 2 / 0.5e12)
    from costmodel.hardware.op_shapes import op_shape

    got = op_shape(
        "prefill_attention",
        {"b": 2, "n": 1000, "m": 1000, "h": 8, "g": 2, "k": 128, "v": 128},
        "batched",
        None,
        "attention",
        2,
    )
    assert got.write_bytes == shape["write_bytes"]


def test_a_prompt_whose_attention_call_does_not_write_the_cache_writes_it_in_a_kernel_of_its_own(tmp_path):
    from costmodel.model.presets import load_model
    from costmodel.model.pricing import pricing
    from costmodel.model.step import phase_ops
    from costmodel.validation.published import read_folder

    # vLLM 0.16 moved the write out of the attention backends' forward: a 0.19 prompt table holds none, 0.14 does
    head = "batch_size,isl,num_heads,num_key_value_heads,head_dim,latency\n2,1000,8,2,128,1.0\n"
    for version in ("0.14.0", "0.19.0"):
        (tmp_path / f"h100_sxm_vllm_{version}_context_attention.csv").write_text(head)
    tables = {t.file.split("_")[3]: t for t in read_folder(tmp_path)[0]}
    # read and written: 2 sequences x 1000 tokens x 2 KV heads x (k + v = 256) x 2 bytes
    assert tables["0.14.0"].shape["write_bytes"][0] == 2 * (2 * 1000 * 2 * 256 * 2)
    assert "write_bytes" not in tables["0.19.0"].shape
    # so the H100 (fitted on vLLM 0.19) prices a prompt's write as a kernel of its own, the A100 (0.14) inside the call
    m = load_model("llama-3.1-8b")
    h100 = phase_ops(m, pricing(m, load_profile("h100_sxm")), "prefill", 2, 1000, 1)
    write = next(s for s in h100 if s.name == "kv_write")
    # read and write 2 x 1000 tokens x 8 KV heads x (k + v = 256) x 2 bytes, once per layer
    assert write.count == m.layers and write.op.bytes == pytest.approx(2 * 2 * 1000 * 8 * 256 * 2)
    assert load_profile("h100_sxm").efficiency.classes["prefill_attention"].cache_write_ceiling is None
    a100 = phase_ops(m, pricing(m, load_profile("a100")), "prefill", 2, 1000, 1)
    assert not any(s.name == "kv_write" for s in a100)
    # a decode step appends its one position as before, on both
    assert any(s.name == "kv_append" for s in phase_ops(m, pricing(m, load_profile("h100_sxm")), "decode", 2, 1000, 1))


@pytest.mark.parametrize(
    "kind,name,cls",
    [
        ("elementwise", "ffn_act", "activation"),
        ("elementwise", "experts_act", "activation"),
        ("elementwise", "rope", "rotary"),
        ("elementwise", "residuals", "elementwise"),
        ("elementwise", "norm_0", "norm"),
        ("elementwise", "final_norm", "norm"),
        ("elementwise", "kv_norm", "norm"),
        ("elementwise", "layernorm_1", "layernorm"),
        ("elementwise", "final_layernorm", "layernorm"),
        ("elementwise", "softmax", "softmax"),
        ("copy", "kv_append", "copy"),
    ],
)
def test_engine_kernels_have_their_own_classes(kind, name, cls):
    assert efficiency_class(kind, name) == cls


def test_a_device_without_activation_fits_uses_its_elementwise_ones():
    # the calibrated CPU profile fits elementwise ops only: activation and rotary take that fit
    from pathlib import Path

    cpu = load_profile(str(Path(__file__).resolve().parents[1] / "validation/results/cpu/calibrated_profile.yaml"))
    res = resolve(cpu, "eager")
    assert res.get("activation") is res.get("elementwise") is res.get("rotary")
    # on the H100 they are transferred from the A100's own fits, not its elementwise one
    from costmodel.price.transfer import vector_bandwidth_scale

    h100 = resolve(load_profile("h100"), "graph")
    a100 = load_profile("a100").efficiency.classes
    scale = vector_bandwidth_scale(load_profile("a100"), load_profile("h100"))  # SMs x clock over the bandwidth
    assert h100.get("activation").bandwidth_ceiling == pytest.approx(a100["activation"].bandwidth_ceiling * scale)
    assert a100["activation"].bandwidth_ceiling != pytest.approx(a100["elementwise"].bandwidth_ceiling, rel=0.05)
    assert np.isfinite(h100.get("rotary").bandwidth_half_bytes)


def test_a_class_fitted_under_one_timing_takes_its_parent_classes_launch_for_another():
    # the A100's softmax is fitted on host-timed (eager) rows only; under graph timing it launches like a norm
    a100 = load_profile("a100")
    own = a100.efficiency.classes["softmax"]
    assert set(own.fixed_s) == {"eager"}
    graph = resolve(a100, "graph")
    assert graph.get("softmax").fixed_s["graph"] == graph.get("norm").fixed_s["graph"]
    assert "graph fixed cost of its norm class" in str(graph.origin["softmax"])
    assert graph.get("softmax").bandwidth_ceiling == own.bandwidth_ceiling  # its own curve


def test_a_parent_class_without_a_timings_launch_takes_its_childs():
    # the A100's RMSNorm (vLLM's kernel) is timed as kernels only, torch's LayerNorm on the host only: under
    # eager timing the RMSNorm launches like the LayerNorm, its curve stays its own
    a100 = load_profile("a100")
    own = a100.efficiency.classes
    assert set(own["norm"].fixed_s) == {"kernels"} and set(own["layernorm"].fixed_s) == {"eager"}
    eager = resolve(a100, "eager")
    assert eager.get("norm").fixed_s["eager"] == own["layernorm"].fixed_s["eager"]
    assert "eager fixed cost of its layernorm class" in str(eager.origin["norm"])
    assert eager.get("norm").bandwidth_ceiling == own["norm"].bandwidth_ceiling
    graph = resolve(a100, "graph")
    assert graph.get("layernorm").fixed_s["graph"] == own["norm"].fixed_s["kernels"]
    assert graph.get("layernorm").bandwidth_ceiling == own["layernorm"].bandwidth_ceiling


def test_kernel_facts_are_the_devices_data():
    """Tiles, split-K depth and attention blocks are a profile's data (with a source), not module constants: a
    device whose GEMM library has one 128 x 128 tile and no split-K runs a 1 x 4096 x 4096 product as 32 tiles
    in one wave of 108 SMs, each a full 4096-deep reduction, at the largest (only) tile's rate."""
    import json

    import costmodel
    from costmodel.hardware.catalog import _parse
    from costmodel.hardware.shapes import GemmShape
    from costmodel.price.op import Conventions, KernelOp, price

    a100 = costmodel.load_profile("a100")
    assert a100.kernels.gemm_tiles[0] == (64, 64) and "CUTLASS" in a100.kernels.source
    data = json.loads(a100.model_dump_json(exclude_none=True))
    data["architecture"]["kernels"] = {
        "gemm_tiles": [[128, 128]],
        "split_k_min": 4096,
        "decode_block": 256,
        "prefill_block": 64,
        "source": "a made-up library",
    }
    one_tile = _parse(json.dumps(data), "one_tile.json")
    eff = one_tile.efficiency.classes["gemm"]
    op = KernelOp("projection", "q_proj", "bf16", 2.0 * 4096 * 4096, 2.0 * (4096 + 4096 * 4096 + 4096))
    t = price(op, GemmShape(1, 1, 4096, 4096), one_tile, Conventions.of(one_tile))
    rate = one_tile.peak("bf16") * eff.compute_efficiency
    assert t.compute == pytest.approx(108 * 128 * 128 * (4096 + eff.tile_k_overhead) * 2 / rate)
    assert t.compute != price(op, GemmShape(1, 1, 4096, 4096), a100, Conventions.of(a100)).compute


def test_flash_attention_2_splits_a_grouped_context_as_its_heuristic_says():
    """FlashAttention-2's split count (mechanisms.fa2_splits), by hand on the A100 (108 SMs, its heuristic sizing
    against 216 CTA slots): one sequence of 32 query heads over one key/value head and 16,383 positions is one block
    of rows over 128 key blocks; every split count fills under one wave (s / 216), the fullest is 128 splits (at
    most 128), and of the counts that cut the blocks differently from one fewer only 64 (0.30) and 128 (0.59)
    come near it, so 128. With 8 key/value heads, 8 blocks of rows: 27 splits fill 216 slots exactly, 26 (0.96) is
    the first eligible count at 85% of that. Sixteen sequences of 8 heads over 255 positions: 128 blocks of rows,
    2 key blocks: one split or two fill 0.59 of a wave alike, so one. 256 sequences of 1 head: 256 blocks of rows
    fill 80% of 216 slots, so none; a call with as many key/value heads as query heads is never split."""
    from costmodel.hardware.shapes import fa2_splits

    got = fa2_splits([1, 1, 16, 256, 1], [1, 8, 8, 1, 32], 32, [16383, 16383, 255, 4095, 16383], 108)
    assert got.tolist() == [128.0, 26.0, 1.0, 1.0, 1.0]


def test_flash_attention_2s_combine_reads_its_splits_one_after_another():
    """A decode call priced for FlashAttention-2 pays its combine kernel's cost per split (combine_split_s) times the
    splits its heuristic cuts, besides the combine kernel itself (split_s), and no combine where the heuristic does
    not split; the same parameters on a FlashAttention-3 device add nothing of it."""
    from costmodel.hardware.kernels import KernelFacts

    eff = ClassEfficiency(
        fixed_s={"graph": 5e-6},
        bandwidth_ceiling=0.8,
        bandwidth_half_bytes=1e6,
        unit_sm_s=3e-6,
        split_s=4e-6,
        split_kv="grouped",
        unsplit_sm_bandwidth=2e10,
        group_copy_s=6e-6,
        combine_split_s=2e-7,
    )
    base = eff.model_copy(update={"combine_split_s": 0.0})
    shape = {"b": np.array([1.0, 16.0]), "g": np.array([1.0, 8.0]), "h": 32, "positions": np.array([16383.0, 255.0])}
    kw = dict(
        peak=312e12, bandwidth=2.039e12, sms=108, timing="graph", flops=np.zeros(2), nbytes=np.full(2, 1e6), shape=shape
    )
    fa2 = KernelFacts(decode_kernel="flash_attention_2")
    got = class_times("decode_attention", eff, kernels=fa2, **kw).units
    plain = class_times("decode_attention", base, kernels=fa2, **kw).units
    # 128 splits of one sequence of one key/value head; sixteen sequences of 8 over 2 key blocks run unsplit (one
    # split or two fill 0.59 of a wave alike), so no combine at all where the plain model charged one for every
    # context over 128 positions: only the work units' SM time
    assert got[0] - plain[0] == pytest.approx(128 * 2e-7)
    assert got[1] == pytest.approx(3e-6 * 16 * 8 / 108)
    assert plain[1] == pytest.approx(got[1] + 4e-6)
    fa3 = KernelFacts(decode_kernel="flash_attention_3")
    assert (
        class_times("decode_attention", eff, kernels=fa3, **kw).units.tolist()
        == class_times("decode_attention", base, kernels=fa3, **kw).units.tolist()
    )

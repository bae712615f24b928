"""Another vendor's GPUs priced by the transfer rule and named mechanisms, nothing fitted per vendor: AMD's CDNA
generations borrow the NVIDIA generation whose matrix formats they share (costmodel.price.origin.PEER_GENERATIONS),
their block-scaled FP8 experts run AITER's fused MoE blocks, and an Infinity Fabric baseboard is a point-to-point
mesh whose small groups move data over their own links only."""

import numpy as np
import pytest

import costmodel
from costmodel.hardware.kernels import GEMM_DISPATCHES
from costmodel.hardware.mechanisms import ring_all_reduce
from costmodel.price.gemm import predict_gemm
from costmodel.price.op import collective_curves
from costmodel.price.origin import generation_rank, reference_for, resolve
from costmodel.price.transfer import transfer


@pytest.mark.parametrize(
    "gpu,peer",
    [("mi250x", "a100_80gb_sxm"), ("mi300x", "h100_sxm"), ("mi325x", "h100_sxm"), ("mi355x", "b200")],
)
def test_cdna_borrows_the_nvidia_generation_of_its_matrix_formats(gpu, peer):
    hw = costmodel.load_profile(gpu)
    assert reference_for(hw).id == peer
    # fp8 matrix math arrives with CDNA3 as with Hopper, fp4 with CDNA4 as with Blackwell: the peer has what it has
    ref = costmodel.load_profile(peer)
    assert ("fp8" in hw.peak_flops_per_s) == ("fp8" in ref.peak_flops_per_s)
    assert generation_rank("tpu_v5e") is None and resolve(costmodel.load_profile("tpu_v5e"), "graph") is None


def test_a_carried_class_runs_at_its_own_peaks_clock_and_bandwidth():
    """By hand from the datasheets: the H100's fitted GEMM on the MI300X keeps its fraction of the dense peak, its
    fixed cost scales with the clocks (1.98 over 2.1 GHz) and its half-bandwidth bytes with the bandwidths."""
    h100, mi = costmodel.load_profile("h100"), costmodel.load_profile("mi300x")
    src, got = h100.efficiency.classes["gemm"], resolve(mi, "graph").get("gemm")
    assert got.compute_efficiency == src.compute_efficiency
    assert got.fixed_s["graph"] == pytest.approx(src.fixed_s["graph"] * 1.98e9 / 2.1e9)
    assert got.bandwidth_half_bytes == pytest.approx(src.bandwidth_half_bytes * 5.3e12 / 3.35e12)
    assert got == transfer(src, h100, mi, "gemm")
    # a large bf16 GEMM's arithmetic then runs at that fraction of the MI300X's 1307 TFLOP/s (less the last wave's
    # idle CUs: 2,048 tiles of 256 x 128 over 304 CUs fill 6.7 of 7 waves), above anything the H100's 989 allows
    (op,) = predict_gemm(mi, 8192, 8192, 8192)["ops"]
    rate = 2 * 8192**3 / op["compute_s"]
    assert 0.95 * src.compute_efficiency * 1.3074e15 < rate <= src.compute_efficiency * 1.3074e15
    assert rate > 989.4e12 * src.compute_efficiency * 1.05


def test_aiters_block_fp8_moe_pads_each_expert_to_its_blocks():
    """AITER's default for a block-scaled FP8 expert layer: 16-row blocks for a call of at most 31 tokens, 32-row
    blocks above, 128 columns a block."""
    rules = GEMM_DISPATCHES["aiter_fused_moe_block_fp8"].rules
    pick = lambda tokens: next(  # noqa: E731
        r.tile for r in rules if (r.m_max is None or tokens <= r.m_max) and (r.m_min is None or tokens >= r.m_min)
    )
    assert pick(1) == (16, 128) and pick(31) == (16, 128) and pick(32) == (32, 128) and pick(4096) == (32, 128)
    for gpu in ("mi300x", "mi325x", "mi355x"):
        kernels = costmodel.load_profile(gpu).kernels
        assert kernels.grouped_dispatch["moe_fp8_block"].rules == rules
        assert kernels.decode_block == 256  # vLLM's _PARTITION_SIZE_ROCM (vllm/attention/backends/rocm_flash_attn.py)


def test_a_mesh_group_moves_its_data_over_its_own_links():
    mi, h100 = costmodel.load_profile("mi300x"), costmodel.load_profile("h100")
    # each MI300X links to each of the other seven: two of them share one link, eight use all seven
    assert mi.interconnect_topology == "mesh" and mi.domain == 8
    assert [mi.group_share(n) for n in (2, 4, 8)] == pytest.approx([1 / 7, 3 / 7, 1.0])
    assert h100.group_share(2) == 1.0  # through NVSwitch a pair reaches the whole bandwidth
    # the borrowed all-reduce curve: a large buffer over two MI300Xs takes 7x what the same curve gives over
    # the whole interconnect; the latency part does not change
    curves, scale, _ = collective_curves(mi)
    volume = 2 * (2 - 1) / 2 * 256e6
    whole = curves["nccl"][min(n for n in curves["nccl"] if n >= 2)].parts(volume, scale)
    pair = curves["nccl"][min(n for n in curves["nccl"] if n >= 2)].parts(volume, scale / 7)
    assert pair[0] == pytest.approx(7 * whole[0]) and pair[1] == pytest.approx(whole[1])
    # the datasheet ring, by hand: 2 (n - 1) / n of the buffer at the pair's one link, one way
    transfer_s, _ = ring_all_reduce(np.asarray(256e6), 2, 896e9 / 2 / 7, 2e-6)
    assert float(transfer_s) == pytest.approx(256e6 / (896e9 / 2 / 7))


@pytest.mark.parametrize("tp,more", [(2, True), (4, True), (8, False)])
def test_a_model_step_pays_the_mesh_only_on_its_all_reduces(tp, more):
    """Llama 3.1 70B over MI300Xs, the mesh against the same board behind a switch: only the all-reduces change, and
    only for a group smaller than the baseboard."""
    m = costmodel.load_model("llama-3.1-70b")
    mesh = costmodel.load_profile("mi300x")
    switched = mesh.model_copy(update={"interconnect_topology": "switched"})
    a, b = (costmodel.predict_model(m, hw, tp=tp).decode for hw in (mesh, switched))
    assert a.time_s - a.all_reduce_s == pytest.approx(b.time_s - b.all_reduce_s)
    assert (a.all_reduce_s > b.all_reduce_s * 1.01) == more
    assert a.all_reduce_s >= b.all_reduce_s * (1 - 1e-12)


def test_every_op_keeps_a_price_on_another_vendor():
    """Every kernel op of a served step on each CDNA GPU is priced by a class carried from its peer."""
    for gpu in ("mi300x", "mi325x", "mi355x"):
        hw = costmodel.load_profile(gpu)
        p = costmodel.predict_model(costmodel.load_model("llama-3.1-8b"), hw)
        for op in p.decode.ops:
            assert op.time_s > 0 and np.isfinite(op.time_s), (gpu, op.name)


def test_atom_is_an_engine_with_its_own_defaults():
    """ATOM's defaults as its sources state them (atom/model_engine/arg_utils.py EngineArgs and atom/config.py
    Config): 16,384 tokens and 512 sequences an iteration, 0.9 of the device, pages of 16, no prefix cache, whole
    prompts that run in iterations of their own; each iteration planned as the last one ends."""
    from costmodel.engine.config import engine

    mi = costmodel.load_profile("mi300x")
    e = engine("atom", capacity_bytes=mi.engine_memory, device_name=mi.name, tp=8)
    assert (e.max_num_batched_tokens, e.max_num_seqs, e.memory_fraction, e.page_size) == (16384, 512, 0.9, 16)
    assert not (e.chunked_prefill or e.mixes or e.reuse_prefix or e.prefix_caching or e.async_scheduling)
    assert not e.reserve_output and e.lag == 0


def test_atoms_cache_follows_vllms_rule_by_hand():
    """ATOM's ModelRunner gives the cache total x 0.9 less the weights and a warm-up run's activations at its
    token budget, as vLLM does: Llama 3.1 8B on one MI300X, by hand, in whole pages of 16."""
    from costmodel.engine.config import activation_bytes, engine
    from costmodel.engine.served import kv_room
    from costmodel.model.pricing import pricing

    m, mi = costmodel.load_model("llama-3.1-8b"), costmodel.load_profile("mi300x")
    e = engine("atom", capacity_bytes=mi.engine_memory, device_name=mi.name)
    weights, per_token, budget, tokens = kv_room(m, pricing(m, mi), e)
    act = activation_bytes(16384, 4096, 14336, 2)
    assert budget == pytest.approx(0.9 * mi.engine_memory - weights - act)
    assert per_token == 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
    assert tokens == (budget // (per_token * 16)) * 16


def test_atom_is_served_launched_and_its_borrowed_costs_are_said(run_cli):
    args = ["predict", "--gpu", "mi300x", "--model", "llama-3.1-8b", "--engine", "atom", "--concurrency", "4"]
    r = run_cli(*args, "--input-len", "512", "--output-len", "64", "--launch")
    assert r.exit_code == 0, r.output
    assert "served by atom 0.1" in r.output and "vLLM's, fitted on its deployments; no ATOM deployment" in r.output
    assert "launch: python -m atom.entrypoints.openai_server --model meta-llama/Llama-3.1-8B" in r.output
    assert "--enable_prefix_caching" not in r.output  # ATOM's default is off: nothing to switch
    on = run_cli(*args, "--input-len", "512", "--output-len", "64", "--launch", "--enable-prefix-caching")
    assert on.output.count("--enable_prefix_caching") == 1
    # what ATOM has no setting for is refused by name, what it does is accepted
    bad = run_cli(*args, "--input-len", "512", "--output-len", "64", "--async-scheduling")
    assert bad.exit_code == 1 and bad.output.startswith("Error: atom has no setting for async scheduling")
    assert "Traceback" not in bad.output


def test_atom_runs_its_prompts_in_iterations_of_their_own(llama, h100):
    """Prefill first, a prompt batch alone: the decoding sequences wait out every prompt's iteration, so TPOT over a
    run with prompts arriving is above the decode-only iterations' time, and every token is produced once."""
    from costmodel.engine.config import engine
    from costmodel.engine.served import Setup
    from costmodel.engine.simulate import simulate
    from costmodel.model.pricing import pricing

    e = engine("atom", capacity_bytes=h100.engine_memory, device_name=h100.name)
    st = Setup(llama, pricing(llama, h100), e, max_context=4096)
    prompts, outputs = np.full(64, 1024), np.full(64, 128)
    res = simulate(st.table, e, kv_tokens=st.kv_tokens, prompts=prompts, outputs=outputs, concurrency=16, check=True)
    assert res.violations == [] and res.prefill_tokens == prompts.sum()
    prefilling = [(decode, stretch[1]) for (_, decode), stretch in zip(res.iteration_s, res.stretches) if stretch[1]]
    assert len(prefilling) == res.prefill_iterations >= 4  # 64 prompts, at most 16 a batch
    assert all(decode == 0 for decode, _ in prefilling)  # no decode token rides with a prompt
    # against vLLM, which mixes them: its prompts ride beside decode tokens
    v = engine("vllm", capacity_bytes=h100.engine_memory, device_name=h100.name)
    res = simulate(st.table, v, kv_tokens=st.kv_tokens, prompts=prompts, outputs=outputs, concurrency=16, check=True)
    assert any(decode and stretch[1] for (_, decode), stretch in zip(res.iteration_s, res.stretches))


@pytest.mark.parametrize(
    "path,model",
    [
        ("amd/DeepSeek-R1-0528-MXFP4-Preview", "deepseek_v3"),  # InferenceX's MI355X recipes
        ("amd/DeepSeek-R1-0528-MXFP4", "deepseek_v3"),  # as ATOM serves it
        ("amd/Llama-3.1-70B-Instruct-FP8-KV", "llama_3_1_70b"),
        ("nvidia/DeepSeek-R1-FP4", "deepseek_v3"),
    ],
)
def test_a_vendors_quantized_checkpoint_is_priced_as_its_model(path, model):
    from costmodel.validation.launchers import checkpoint_model

    assert checkpoint_model(path)[0].id == model


def test_an_unknown_vendor_checkpoint_is_still_refused():
    from costmodel.core.errors import CostModelError
    from costmodel.validation.launchers import checkpoint_model

    with pytest.raises(CostModelError):
        checkpoint_model("amd/no-such-model-MXFP4")


def test_amd_deployment_rows_are_expressible_and_reproduced(tmp_path, run_cli):
    """Rows as InferenceX names them on AMD GPUs (ATOM and SGLang, DeepSeek-R1 in MXFP4 and FP8 over 8 GPUs):
    every one is priced, and its own command prints its prediction."""
    import json

    from tests.test_served import _row, _write

    ds = dict(tp_size="8.0", moe_tp_size="8.0", silicon_data_source="silicon_concurrency=16", batch_size="16.0")
    rows = [
        _row(
            id="atom-fp4",
            backend="atom",
            system="mi355x",
            precision="fp4",
            model_path="amd/DeepSeek-R1-0528-MXFP4-Preview",
            **ds,
        ),
        _row(
            id="sgl-fp8",
            backend="sglang",
            system="mi300x",
            precision="fp8",
            gemm_quant_mode="fp8_block",
            model_path="deepseek-ai/DeepSeek-R1-0528",
            **ds,
        ),
        _row(
            id="atom-fp8",
            backend="atom",
            system="mi325x",
            precision="fp8",
            gemm_quant_mode="fp8_block",
            model_path="deepseek-ai/DeepSeek-R1-0528",
            **ds,
        ),
    ]
    path, out = tmp_path / "amd.csv", tmp_path / "amd.json"
    _write(path, rows)
    r = run_cli("validate", "--serving", str(path), "--json", str(out))
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    assert report["skipped"] == [] and [x["id"] for x in report["rows"]] == ["atom-fp4", "sgl-fp8", "atom-fp8"]
    for row in report["rows"]:
        cmd = row["command"]
        assert cmd[cmd.index("--engine") + 1] == row["id"].split("-")[0].replace("sgl", "sglang")
        got = json.loads(run_cli(*cmd, "--json").output)
        assert got["ttft_s"] == row["predicted_ttft_s"] and got["tpot_s"] == row["predicted_tpot_s"]


@pytest.mark.parametrize(
    "backend,system,path,isl,conc,want",
    [
        # SemiAnalysisAI/InferenceX benchmarks/dsr1_*.sh, by hand
        (
            "sglang",
            "h200_sxm",
            "deepseek-ai/DeepSeek-R1-0528",
            1024,
            64,
            {"--mem-fraction-static": "0.82", "--max-num-batched-tokens": "32768"},
        ),
        (
            "sglang",
            "mi300x",
            "deepseek-ai/DeepSeek-R1-0528",
            1024,
            64,
            {"--max-num-batched-tokens": "131072", "--kv-dtype": "fp8"},
        ),
        (
            "sglang",
            "mi355x",
            "amd/DeepSeek-R1-0528-MXFP4-Preview",
            8192,
            64,
            {"--max-num-batched-tokens": "32768", "--kv-dtype": "fp8"},
        ),
        ("sglang", "mi355x", "amd/DeepSeek-R1-0528-MXFP4-Preview", 8192, 32, {"--max-num-batched-tokens": "196608"}),
        (
            "trtllm",
            "h200_sxm",
            "deepseek-ai/DeepSeek-R1-0528",
            8192,
            64,
            {"--max-num-batched-tokens": "8320", "--free-gpu-memory-fraction": "0.75"},
        ),
        ("trtllm", "h200_sxm", "deepseek-ai/DeepSeek-R1-0528", 1024, 4, {"--max-num-batched-tokens": "8192"}),
        ("atom", "mi355x", "deepseek-ai/DeepSeek-R1-0528", 1024, 64, {"--kv-dtype": "fp8"}),
    ],
)
def test_inferencex_deepseek_rows_run_their_recipe(tmp_path, run_cli, backend, system, path, isl, conc, want):
    """An InferenceX run (a dated export) of DeepSeek-R1 is predicted with the settings its recipe gives the engine;
    the same row from another source with the engine's defaults."""
    import json

    from tests.test_served import _row, _write

    ix = f"source_file=2026-03-25.csv;silicon_concurrency={conc}"
    base = dict(backend=backend, system=system, model_path=path, isl=str(isl), osl="1024", tp_size="8.0")
    base |= dict(moe_tp_size="8.0", batch_size=f"{conc}.0", precision="fp4" if "MXFP4" in path else "fp8")
    rows = [
        _row(id="ix", silicon_data_source=ix, **base),
        _row(id="own", silicon_data_source=f"silicon_concurrency={conc}", **base),
    ]
    csv_path, out = tmp_path / "d.csv", tmp_path / "d.json"
    _write(csv_path, rows)
    assert run_cli("validate", "--serving", str(csv_path), "--json", str(out)).exit_code == 0
    got = {r["id"]: r["command"] for r in json.loads(out.read_text())["rows"]}
    for flag, value in want.items():
        assert got["ix"][got["ix"].index(flag) + 1] == value, flag
    assert "--max-num-batched-tokens" not in got["own"] or backend == "trtllm"

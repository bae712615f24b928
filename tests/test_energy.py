"""Power, energy and dollars (costmodel.hardware.power, costmodel.engine.energy), checked against conservation (energy
is power x time over a run's phases; idle alone when nothing runs; never above the limit x time), hand arithmetic
from the datasheet and the sourced constants, and the two evaluators against each other."""

from __future__ import annotations

import pytest

import costmodel
from costmodel import Layout, Load
from costmodel.core.errors import CostModelError
from costmodel.engine.energy import run_energy
from costmodel.engine.served import serve
from costmodel.hardware.catalog import load_profile, profile_ids
from costmodel.hardware.power import PowerModel, with_limit
from costmodel.price.op import Conventions, KernelOp, price

H100 = load_profile("h100")
LLAMA = costmodel.load_model("meta-llama/Llama-3.1-8B")

# The H100 SXM by hand: its datasheet (700 W board, 989.4 TFLOP/s dense bf16, HBM3) and energy.yaml's central
# values (idle 10% of the board, active 15% of the rest, HBM3 2.5 pJ/bit and 2.0 pJ/bit on the die).
IDLE_W = 0.10 * 700
ACTIVE_W = 0.15 * (700 - IDLE_W)
BF16_J = (700 - IDLE_W - ACTIVE_W) / 989.4e12
BYTE_J = 8 * (2.5 + 2.0) * 1e-12


def _served(load, **kw):
    return serve(LLAMA, H100, load, **kw)


def test_a_memory_bound_decode_kernel_by_hand():
    # a decode-step GEMV: 4096 x 14336 bf16 weights read once for one token (memory-bound on any GPU)
    flops, nbytes = 2 * 4096 * 14336, 2 * 4096 * 14336 + 2 * (4096 + 14336)
    op = KernelOp("projection", "up_proj", "bf16", flops, nbytes)
    t = price(op, None, H100, Conventions.datasheet()).time
    assert t == pytest.approx(nbytes / 3.35e12 + 4e-6, rel=1e-9)  # the roofline's memory side and one launch
    k = PowerModel.of(H100).kernel(op, t)
    by_hand = (IDLE_W + ACTIVE_W) * t + flops * BF16_J + nbytes * BYTE_J
    assert k.energy_j == pytest.approx(by_hand, rel=1e-9)
    assert not k.capped and IDLE_W < k.power_w < 700


def test_a_model_steps_energy_is_its_ops_by_hand():
    p = costmodel.predict_model(LLAMA, H100, batch=16, context=1024)
    pm = PowerModel.of(H100)
    for phase in (p.decode, p.prefill):
        ops = phase.ops
        assert phase.energy_j >= sum(o.energy_j for o in ops)  # the collectives' energy besides (none on one GPU)
        for o in ops:
            # each op's kernels: running power over their time, plus their work, at most the board's limit
            assert o.energy_j >= pm.running_w * o.time_s * (1 - 1e-9)
            assert o.energy_j <= 700 * o.time_s * (1 + 1e-9)
        assert phase.power_w == pytest.approx(phase.energy_j / phase.time_s)
    assert p.decode.power_w < p.prefill.power_w  # a decode step streams weights; a prefill computes


@pytest.mark.parametrize(
    "load",
    [
        Load(1024, 256, concurrency=1, num_requests=40),
        Load(1024, 256, concurrency=64, num_requests=300),
        Load(8192, 64, concurrency=16, num_requests=80),
        Load(512, 128, request_rate=0.5, num_requests=40),
    ],
)
def test_a_runs_energy_is_power_times_time_over_its_phases(load):
    p = _served(load)
    e = p.energy
    s = p.time_split
    pm = PowerModel.of(H100)
    busy = s.prefill_s + s.decode_s + s.comm_s + s.overhead_s
    idle_s = e.run_s - busy
    assert idle_s >= -1e-9
    summed = (
        e.phase_power_w["prefill"] * s.prefill_s
        + e.phase_power_w["decode"] * s.decode_s
        + e.phase_power_w["communication"] * s.comm_s
        + (pm.idle_w + pm.gap_w) * s.overhead_s
        + pm.idle_w * max(idle_s, 0.0)
    )
    assert e.energy_j == pytest.approx(summed, rel=1e-9)
    assert p.power_w * e.run_s == pytest.approx(e.energy_j, rel=1e-9)
    assert sum(e.share.values()) == pytest.approx(1.0)
    # never above the limit, never below idle
    assert all(pm.running_w <= w <= 700 for w in e.phase_power_w.values())
    assert pm.idle_w <= p.power_w <= 700
    lo, hi = e.power_w_range
    assert lo <= p.power_w <= hi
    # energy per output token: every device's energy over the run's output tokens
    assert p.energy_j_per_output_token == pytest.approx(p.power_w / p.output_tokens_per_s_per_device)
    assert p.output_tokens_per_j == pytest.approx(1 / p.energy_j_per_output_token)


def test_idle_alone_when_no_kernel_runs():
    from costmodel.engine.served import Setup, engine
    from costmodel.model.pricing import pricing

    eng = engine("vllm", capacity_bytes=H100.engine_memory, device_name=H100.name, tp=1)
    setup = Setup(LLAMA, pricing(LLAMA, H100, **eng.kernels), eng, max_context=1024)
    nothing = {"prefill_s": 0.0, "decode_s": 0.0, "comm_s": 0.0, "host_s": 0.0}
    point = {"seqs": 1, "context": 512, "chunk": 512, "prompt": 512}
    e = run_energy(H100, setup.table.operating_work(**point), nothing, 10.0)
    assert e.power_w == pytest.approx(IDLE_W)
    assert e.energy_j == pytest.approx(IDLE_W * 10.0)
    assert e.share["idle"] == pytest.approx(1.0)
    # a trickle of requests: mostly idle, its power near idle's
    slow = _served(Load(256, 16, request_rate=0.05, num_requests=10))
    assert slow.energy.share["idle"] > 0.9
    assert slow.power_w < IDLE_W * 1.2


def test_a_binding_limit_runs_slower_and_says_so():
    # a compute-bound GEMM: 8192^3 bf16 at its fitted rate draws the board's headroom
    n = 8192
    op = KernelOp("projection", "gemm", "bf16", 2 * n**3, 3 * 2 * n * n)
    conv = Conventions.of(H100)
    at_board = price(op, None, H100, conv).time
    assert price(op, None, with_limit(H100, 700), conv).time == pytest.approx(at_board)
    capped = with_limit(H100, 350)
    slower = price(op, None, capped, conv).time
    assert slower > at_board * 1.1
    # the same op on a device with a higher limit (B200, 1000 W) is not slowed by its own limit
    b200 = load_profile("b200")
    assert price(op, None, with_limit(b200, 1000), Conventions.of(b200)).time == pytest.approx(
        price(op, None, b200, Conventions.of(b200)).time
    )
    # served: slower under the limit, and the report says the limit binds
    load = Load(4096, 128, concurrency=16, num_requests=48)
    free, held = _served(load), _served(load, power_limit_w=300)
    assert held.ttft_s > free.ttft_s and held.tpot_s >= free.tpot_s
    assert held.energy.capped and held.energy.limit_w == 300
    assert any("power limit of 300 W" in a for a in held.assumptions)
    assert not free.energy.capped or free.energy.limit_w == 700
    assert held.power_w <= 300


def test_dollars_per_million_tokens_by_hand():
    load = Load(1024, 256, concurrency=32, num_requests=120)
    p = serve(costmodel.load_model("Qwen/Qwen3-32B"), H100, load, layout=Layout(tp=2), price_per_gpu_hour=3.0)
    gpus = 2
    run_tokens_per_s = p.output_tokens_per_s  # output tokens a second over the whole deployment
    by_hand = 3.0 * gpus / 3600 / run_tokens_per_s * 1e6  # price x GPUs x time / tokens
    assert p.usd_per_million_output_tokens == pytest.approx(by_hand, rel=1e-9)
    all_tokens = p.requests_per_s * (p.input_len + p.output_len)
    assert p.usd_per_million_tokens == pytest.approx(3.0 * gpus / 3600 / all_tokens * 1e6, rel=1e-9)
    assert _served(load).usd_per_million_output_tokens is None  # no price, no dollars


def test_the_two_evaluators_agree_on_energy_per_token():
    # the simulation and the closed form time the run independently; their energies per token agree
    for load in (Load(1024, 256, concurrency=64, num_requests=300), Load(2048, 128, concurrency=8, num_requests=80)):
        sim = _served(load)
        closed = _served(load, evaluator="steady-state")
        assert closed.energy_j_per_output_token == pytest.approx(sim.energy_j_per_output_token, rel=0.15)


def test_every_power_block_is_sourced_and_devices_without_one_say_why():
    with_power = [i for i in profile_ids() if load_profile(i).power is not None]
    assert len(with_power) >= 25
    for i in with_power:
        hw = load_profile(i)
        assert hw.power.board_w.source in hw.sources
        pm = PowerModel.of(hw)
        assert 0 < pm.idle_w < pm.running_w < pm.board_w
        # the dense tensor peak at its energy per FLOP uses the board's headroom, no more
        for dtype, f in hw.peak_flops_per_s.items():
            assert pm.tensor_j[dtype] * f.value <= pm.board_w - pm.running_w + 1e-6
    none = load_profile("tpu_v5e")
    assert none.power is None
    p = serve(LLAMA, none, Load(256, 32, concurrency=2, num_requests=4), layout=Layout(tp=2))
    assert p.power_w is None and any("states no board power" in a for a in p.assumptions)


def test_a_limit_out_of_range_is_refused():
    with pytest.raises(CostModelError, match="above h100_sxm's board limit of 700 W"):
        with_limit(H100, 900)
    with pytest.raises(CostModelError, match="below h100_sxm's draw"):
        with_limit(H100, 100)
    with pytest.raises(CostModelError, match="states no board power"):
        with_limit(load_profile("tpu_v5e"), 200)


def test_the_cli_prints_energy_and_refuses_a_bad_limit(tmp_path):
    from click.testing import CliRunner

    from costmodel.cli.commands import main

    args = ["predict", "--gpu", "h100", "--model", "meta-llama/Llama-3.1-8B", "--engine", "vllm", "--concurrency", "4"]
    args += ["--input-len", "512", "--output-len", "64", "--num-requests", "12"]
    out = CliRunner().invoke(main, [*args, "--price-per-gpu-hour", "2"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())  # lines wrapped to the terminal's width
    assert (
        "J per output token" in text
        and "W per device" in text
        and "per million output tokens" in text
        and "at $2.00 per GPU-hour" in text
    )
    bad = CliRunner().invoke(main, [*args, "--power-limit", "2000"])
    assert bad.exit_code != 0 and bad.output.startswith("Error:") and "2000" in bad.output
    assert "Traceback" not in bad.output
    assert float(text.split(" W per device")[0].split()[-1]) > 0


@pytest.mark.parametrize(
    "model, tp, load",
    [
        ("meta-llama/Llama-3.1-8B", 1, Load(2048, 512, request_rate=4, num_requests=120)),
        ("mixtral_8x7b", 4, Load(1024, 512, concurrency=128, num_requests=300)),
    ],
)
def test_the_operating_point_prices_the_iterations_work(model, tp, load):
    # a run's work joules summed iteration by iteration (each at its own decode tokens and prefill chunk, its
    # communication at all its tokens) against the one operating point the report prices them at
    import numpy as np

    from costmodel.engine.energy import simulated_energy
    from costmodel.engine.served import Setup, engine
    from costmodel.engine.simulate import simulate
    from costmodel.model.pricing import pricing

    m = costmodel.load_model(model)
    eng = engine("vllm", capacity_bytes=H100.engine_memory, device_name=H100.name, tp=tp)
    prompts, outputs = load.lengths(load.num_requests)
    setup = Setup(m, pricing(m, H100, tp=tp, **eng.kernels), eng, max_context=int(prompts.max() + outputs.max()))
    res = simulate(
        setup.table,
        eng,
        kv_tokens=setup.kv_tokens,
        prompts=prompts,
        outputs=outputs,
        concurrency=load.concurrency,
        request_rate=load.request_rate,
        wall=setup.wall,
    )
    context, prompt = float(np.mean(prompts) + np.mean(outputs) / 2), float(np.mean(prompts))
    summed = 0.0
    for (times, decode), (_, chunk, _) in zip(res.iteration_s, res.stretches):
        at = setup.table.operating_work(seqs=max(decode, 1), context=context, chunk=max(chunk, 1), prompt=prompt)
        comm = setup.table.operating_work(seqs=decode + chunk, context=context, chunk=1, prompt=1)["comm"][0][2]
        summed += len(times) * ((at["decode"][0][2] if decode else 0) + (at["prefill"][0][2] if chunk else 0) + comm)
    e = simulated_energy(setup, res, prompts, outputs)
    running = PowerModel.of(H100).running_w
    spent = {"prefill": res.prefill_s, "decode": res.decode_s, "communication": res.comm_s}
    priced = sum((e.phase_power_w[k] - running) * t for k, t in spent.items())
    assert priced == pytest.approx(summed, rel=0.03)


def test_the_attention_layers_ops_carry_their_joules_by_hand():
    # costmodel predict --gpu h100 (the main job): each op's energy is its running power over its time plus its
    # FLOPs and bytes at the sourced energies; the total sums the ops over the layers, its power that over the time
    from costmodel.attention.roofline import predict
    from costmodel.attention.workload import Workload

    w = Workload.create("gqa", "incremental", batch=16, context=4096, d_model=4096, heads=32, groups=8, layers=2)
    p = predict(w, H100)
    for op in p.ops:
        if op.name.endswith("proj"):  # the bf16 projections: tensor cores, nothing capped
            by_hand = (IDLE_W + ACTIVE_W) * op.time_s + op.flops * BF16_J + op.bytes * BYTE_J
            assert op.energy_j == pytest.approx(by_hand, rel=1e-9)
        assert (IDLE_W + ACTIVE_W) * op.time_s <= op.energy_j <= 700 * op.time_s * (1 + 1e-9)
    assert p.total.energy_j == pytest.approx(2 * sum(o.energy_j for o in p.ops))
    assert p.total.power_w == pytest.approx(p.total.energy_j / p.total.time_s)
    assert predict(w, load_profile("tpu_v5e")).total.energy_j is None  # no board power stated, no joules

"""Attention data parallel with the experts spread over every group's devices: what a device holds and runs,
counted by hand; the collectives around the experts; the served report counting every group; the group's share
of the load; and the pricing of a group that spans nodes."""

import numpy as np
import pytest

import costmodel
from costmodel.core.errors import CostModelError
from costmodel.engine.served import serve
from costmodel.model.ops import device_slice
from costmodel.model.pricing import pricing
from costmodel.model.step import phase_ops
from costmodel.price.op import Conventions, KernelOp, price
from tests.kwargs import split

OFF = {"iteration_s": 0.0, "request_s": 0.0}


@pytest.fixture(scope="module")
def qwen():
    return costmodel.load_model("Qwen/Qwen3-235B-A22B")  # 128 experts, 8 per token, d_model 4096, 94 layers


def test_a_device_holds_its_share_of_experts(qwen):
    """DP2 x TP4: attention sharded four ways as under TP4; 128 experts over 8 devices, 16 whole ones each."""
    one = device_slice(qwen, 4, ep=True)
    dp = device_slice(qwen, 4, ep=True, dp=2)
    assert (dp.heads, dp.kv_heads, dp.d_ff) == (one.heads, one.kv_heads, one.d_ff)
    assert (one.moe.experts, dp.moe.experts, dp.moe.expert_ranks) == (32, 16, 8)
    assert dp.moe.expert_d_ff == qwen.moe.expert_d_ff  # whole experts
    with pytest.raises(CostModelError, match="must divide expert d_ff"):
        device_slice(qwen, 8, ep=False, dp=128)  # 1024 devices do not divide the 1536-wide experts
    with pytest.raises(CostModelError, match="mixture-of-experts"):
        device_slice(costmodel.load_model("llama-3.1-8b"), 1, dp=2)
    with pytest.raises(CostModelError, match="must divide"):
        device_slice(qwen, 8, ep=True, dp=32)  # 256 devices for 128 experts


def test_experts_sharded_by_width_over_every_group(qwen, h100):
    """DP2 x TP4 without expert parallel (vLLM's data parallel without --enable-expert-parallel): attention as under
    TP4; all 128 experts on every device, each 1536 / 8 = 192 wide. A decode step of 16 sequences per group: the
    experts see 2 x 16 tokens, all 32 x 8 = 256 routed rows at a width of 192, the same FLOPs as 32 rows at 1536
    under expert parallel; the collectives around the experts are expert parallel's."""
    dp = device_slice(qwen, 4, ep=False, dp=2)
    assert (dp.heads, dp.moe.experts, dp.moe.expert_ranks, dp.moe.expert_d_ff) == (16, 128, 1, 192)
    sharded = {s.name: s for s in phase_ops(qwen, pricing(qwen, h100, tp=4, attention_dp=2), "decode", 16, 1024, 1)}
    whole = {
        s.name: s
        for s in phase_ops(qwen, pricing(qwen, h100, tp=4, expert_parallel=True, attention_dp=2), "decode", 16, 1024, 1)
    }
    assert sharded["experts_down"].shape.K == 192 and whole["experts_down"].shape.K == 1536
    assert sharded["experts_down"].op.flops == pytest.approx(2 * 256 * 192 * 4096)
    assert sharded["experts_down"].op.flops == pytest.approx(whole["experts_down"].op.flops, rel=1e-12)
    for name in ("moe_dispatch", "moe_combine", "all_reduce"):
        assert (sharded[name].op.bytes, sharded[name].op.devices, sharded[name].count) == (
            whole[name].op.bytes,
            whole[name].op.devices,
            whole[name].count,
        )


def test_step_ops_by_hand(qwen, h100):
    """A decode step of 16 sequences per group, DP2 x TP4: the experts of a device see 2 x 16 tokens, 32 x 8 / 8 =
    32 routed rows; per expert layer an all-gather and a reduce-scatter of the 2 x 16 x 4096 x 2-byte buffer over
    the device's 2 peers, spread over 8 devices; the all-reduces over each group's 4 devices stay."""
    pr = pricing(qwen, h100, tp=4, expert_parallel=True, attention_dp=2)
    ops = {s.name: s for s in phase_ops(qwen, pr, "decode", 16, 1024, 1)}
    for name, kind in (("moe_dispatch", "all_gather"), ("moe_combine", "reduce_scatter")):
        s = ops[name]
        assert (s.op.kind, s.count, s.op.devices, s.op.span) == (kind, 94, 2, 8)
        assert s.op.bytes == 2 * 16 * 4096 * 2
    assert ops["all_reduce"].op.devices == 4 and ops["all_reduce"].count == 2 * 94
    one = {s.name: s for s in phase_ops(qwen, pricing(qwen, h100, tp=4, expert_parallel=True), "decode", 16, 1024, 1)}
    # the routed GEMM: twice the tokens over twice the ranks -> the same rows per device, fewer experts to read
    assert ops["experts_down"].op.flops == pytest.approx(one["experts_down"].op.flops, rel=1e-12)
    assert ops["experts_down"].op.bytes < one["experts_down"].op.bytes
    assert "moe_dispatch" not in one


def test_a_group_across_nodes_crosses_the_network(h100):
    """An all-gather whose group spans 16 devices of 8-device nodes: a ring bounded by each device's 50 GB/s port,
    (n - 1) / n of the buffer, n - 1 steps of 5 us."""
    conv = Conventions.datasheet()
    for nbytes in (1e5, 1e7):
        got = price(KernelOp("all_gather", "g", "bf16", 0.0, nbytes, devices=4, span=16), None, h100, conv).time
        assert got == pytest.approx(3 / 4 * nbytes / 50e9 + 3 * 5e-6, rel=1e-12)
        inside = price(KernelOp("all_gather", "g", "bf16", 0.0, nbytes, devices=4, span=8), None, h100, conv).time
        assert inside == pytest.approx(3 / 4 * nbytes / 450e9 + 3 * 2e-6, rel=1e-12)


def test_served_report_counts_every_group(qwen, h100):
    """Eight clients over DP2 x TP4: each group an engine of four clients; the report's clients, requests and
    throughput are both groups', per device over all eight devices; Little's law on the whole."""
    kw = dict(
        input_len=512, output_len=32, engine_name="vllm", tp=4, expert_parallel=True, weight_dtype="fp8", overheads=OFF
    )
    p = serve(qwen, h100, **split(concurrency=8, attention_dp=2, num_requests=160, **kw))
    assert p.concurrency == 8 and p.attention_dp == 2 and p.num_requests == 160
    assert p.output_tokens_per_s_per_device == pytest.approx(p.output_tokens_per_s / 8, rel=1e-12)
    assert p.requests_per_s * p.e2e_s == pytest.approx(8, rel=0.05)
    assert p.max_batch <= 4
    with pytest.raises(CostModelError, match="multiple of attention_dp"):
        serve(qwen, h100, **split(concurrency=7, attention_dp=2, **kw))
    long = kw | {"output_len": 128}
    sim = serve(qwen, h100, **split(concurrency=8, attention_dp=2, num_requests=160, warmup_requests=16, **long))
    steady = serve(qwen, h100, **split(concurrency=8, attention_dp=2, evaluator="steady-state", **long))
    assert steady.tpot_s == pytest.approx(sim.tpot_s, rel=0.05)
    assert steady.requests_per_s == pytest.approx(sim.requests_per_s, rel=0.05)


def test_one_group_is_today(qwen, h100):
    """attention_dp=1 is the expert-parallel-over-TP prediction, to the last digit; others are ignored."""
    kw = dict(
        input_len=512, output_len=32, concurrency=4, tp=4, expert_parallel=True, weight_dtype="fp8", num_requests=20
    )
    a, b = serve(qwen, h100, **split(**kw)), serve(qwen, h100, **split(attention_dp=1, **kw))
    assert (a.ttft_s, a.tpot_s) == (b.ttft_s, b.tpot_s)
    from costmodel.engine.config import engine
    from costmodel.engine.served import Setup

    s = Setup(
        qwen,
        pricing(qwen, h100, tp=4, expert_parallel=True, weight_dtype="fp8"),
        engine("vllm", capacity_bytes=h100.engine_memory),
        max_context=600,
    )
    assert np.array_equal(s.table.per_token(37.0), s.table.per_token(37.0, others=1000.0))


def test_expert_parallel_groups_that_shard_their_experts(qwen, h100):
    """TP4 with two expert-parallel groups of two (TensorRT-LLM's moe_ep_size 2, moe_tp_size 2): a device holds
    64 of the 128 experts at half their width of 1536; the routed rows of a device are half the tokens' 8 each; 1
    and 4 groups are the sharded and the expert-parallel layouts."""
    pr = pricing(qwen, h100, tp=4, expert_parallel_size=2)
    dev = pr.slice(qwen)
    assert (dev.moe.experts, dev.moe.expert_d_ff, dev.moe.expert_ranks) == (64, 768, 2)
    ops = {s.name: s for s in phase_ops(qwen, pr, "decode", 16, 1024, 1)}
    # experts_down: rows x width x d_model x 2 FLOPs, rows = 16 x 8 / 2
    assert ops["experts_down"].op.flops == pytest.approx(16 * 8 / 2 * 768 * 4096 * 2, rel=1e-9)
    assert pricing(qwen, h100, tp=4, expert_parallel_size=4).slice(qwen) == device_slice(qwen, 4, ep=True)
    assert pricing(qwen, h100, tp=4, expert_parallel_size=1).slice(qwen) == device_slice(qwen, 4)
    with pytest.raises(CostModelError, match="exceeds tp"):
        pricing(qwen, h100, tp=4, expert_parallel_size=8)
    with pytest.raises(CostModelError, match="must divide"):
        pricing(qwen, h100, tp=4, expert_parallel_size=3)


def test_a_model_report_counts_every_groups_devices(run_cli):
    """The model table's header names all dp x tp devices and how they are grouped, not one group's tp."""
    one = run_cli("predict", "--gpu", "b200", "--model", "deepseek-v3", "--attention-dp", "8", "--tp", "1")
    two = run_cli("predict", "--gpu", "b200", "--model", "deepseek-v3", "--attention-dp", "4", "--tp", "2")
    assert one.exit_code == 0 and two.exit_code == 0
    assert "8 devices (8 attention data parallel groups of 1)" in one.output.splitlines()[0]
    assert "8 devices (4 attention data parallel groups of 2, tensor parallel)" in two.output.splitlines()[0]

"""Pipeline parallel: a stage's memory, the sends between stages, and the pipeline's round (one micro-batch per
stage, each the whole model's step over its share of the batch), checked against the unpipelined model by hand."""

import pytest

import costmodel
from costmodel.core.errors import CostModelError
from costmodel.engine.config import engine
from costmodel.engine.served import Setup, serve
from costmodel.model.pricing import pricing
from costmodel.model.step import phase_ops
from tests.kwargs import split

OFF = {"iteration_s": 0.0, "request_s": 0.0}


def _send(nbytes, bw=450e9, lat=2e-6):
    return nbytes / bw + lat


def _setups(llama, h100, pp):
    eng = engine("vllm", capacity_bytes=h100.engine_memory)
    return Setup(llama, pricing(llama, h100, pipeline_parallel=pp), eng, max_context=4096, overheads=OFF)


def test_a_stage_holds_half(llama, h100):
    one, two = _setups(llama, h100, 1), _setups(llama, h100, 2)
    assert two.weights == pytest.approx(one.weights / 2, rel=1e-12)
    assert two.kv_per_token == pytest.approx(one.kv_per_token / 2, rel=1e-12)
    assert two.kv_tokens > 2 * one.kv_tokens  # half the weights leave more than twice the room


def test_the_round_is_the_model_over_a_micro_batch(llama, h100):
    """32 sequences over 2 stages: two micro-batches of 16; a round is the unpipelined step of 16, the head of the
    last stage once more, and one send of 16 x 4096 x 2 bytes over NVLink. One sequence: one micro-batch, the step
    of one and its send."""
    one, two = _setups(llama, h100, 1).table, _setups(llama, h100, 2).table
    for ctx in (100, 2000):
        got = float(two.decode_run(32, 32 * ctx, 1)[0])
        want = float(one.decode_run(16, 16 * ctx, 1)[0]) + float(one.head_time(16)) + _send(16 * 4096 * 2)
        assert got == pytest.approx(want, rel=1e-9)
        got = float(two.decode_run(1, ctx, 1)[0])
        assert got == pytest.approx(float(one.decode_run(1, ctx, 1)[0]) + _send(4096 * 2), rel=1e-9)


def test_one_client_pays_the_sends(llama, h100):
    kw = dict(input_len=512, output_len=33, concurrency=1, num_requests=3, overheads=OFF)
    a = serve(llama, h100, **split(**kw))
    b = serve(llama, h100, **split(pipeline_parallel=2, **kw))
    assert b.tpot_s == pytest.approx(a.tpot_s + _send(4096 * 2), rel=1e-6)
    assert b.pipeline_parallel == 2 and b.output_tokens_per_s_per_device == pytest.approx(b.output_tokens_per_s / 2)
    assert serve(llama, h100, **split(pipeline_parallel=1, **kw)).tpot_s == a.tpot_s


def test_sends_between_nodes(h100):
    """TP8 x PP2 on 8-GPU nodes: the one send between the stages crosses the network; TP4 x PP2 stays in a node."""
    m = costmodel.load_model("llama-3.1-70b")
    ops = {s.name: s for s in phase_ops(m, pricing(m, h100, tp=8, pipeline_parallel=2), "decode", 4, 100, 1)}
    assert ops["pp_send_network"].count == 1 and "pp_send" not in ops
    ops = {s.name: s for s in phase_ops(m, pricing(m, h100, tp=4, pipeline_parallel=2), "decode", 4, 100, 1)}
    assert ops["pp_send"].count == 1 and "pp_send_network" not in ops
    assert ops["pp_send"].op.bytes == 4 * 8192 * 2
    with pytest.raises(CostModelError, match="exceeds"):
        pricing(m, h100, pipeline_parallel=200)

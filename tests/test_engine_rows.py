"""A model step as serving engines run it: fused projections, one cache write, rotary embeddings."""

from __future__ import annotations

import pytest

from costmodel.hardware.catalog import load_profile
from costmodel.model.engine_ops import engine_ops
from costmodel.model.memory import param_count
from costmodel.model.ops import step_ops
from costmodel.model.presets import load_model
from costmodel.model.step import predict_model
from costmodel.price.op import Precision


def gemm(op):
    """(batch, M, K, N) of a step's matrix product."""
    return (op.shape.batch, op.shape.M, op.shape.K, op.shape.N)


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_llama_3_8b_fusions_by_hand(phase):
    m = load_model("llama-3-8b")  # d 4096, 32 heads, 8 kv heads of 128, d_ff 14336, rotary
    b, ctx, width = 4, 256, 2
    tokens = b if phase == "decode" else b * ctx
    plain = {r.name: r for r in step_ops(m, phase, b, ctx, ctx, width, "fused")}
    fused = {r.name: r for r in engine_ops(list(plain.values()), m, tokens, Precision.of(width))}
    assert {"q_proj", "k_proj", "v_proj", "ffn_gate", "ffn_up", "k_append", "v_append"}.isdisjoint(fused)
    qkv = fused["qkv_proj"]
    # one GEMM [tokens x 4096] @ [4096 x (32 + 2 * 8) * 128]: the input read once, three weights, three outputs
    N = (32 + 2 * 8) * 128
    assert gemm(qkv) == (1, tokens, 4096, N)
    assert qkv.op.flops == 2 * tokens * 4096 * N
    assert qkv.op.bytes == width * (tokens * 4096 + 4096 * N + tokens * N)
    up = fused["ffn_gate_up"]
    assert gemm(up) == (1, tokens, 4096, 2 * 14336)
    assert up.op.bytes == width * (tokens * 4096 + 4096 * 2 * 14336 + tokens * 2 * 14336)
    if phase == "decode":  # a prefill's K and V are the projections' outputs; a decode step appends them
        assert fused["kv_append"].op.bytes == plain["k_append"].op.bytes + plain["v_append"].op.bytes
    rope = fused["rope"]  # q and k of every new token rotated in place, one cos/sin row per token read
    assert rope.op.flops == 3 * tokens * (32 + 8) * 128
    assert rope.op.bytes == width * (2 * tokens * (32 + 8) * 128 + tokens * 128)
    assert sum(r.op.flops * r.count for r in fused.values()) == pytest.approx(
        sum(r.op.flops * r.count for r in plain.values()) + rope.op.flops * rope.count
    )


def test_the_fused_qkv_gemm_is_the_shape_vidur_timed():
    # Vidur's attn_pre_proj of Llama-2-7B at T tokens and TP t: [T x 4096] @ [4096 x (32 + 2*32) * 128 / t]
    from costmodel.model.ops import device_slice

    m = load_model("llama-2-7b")
    for t in (1, 2, 4):
        dev = device_slice(m, t)
        rows = engine_ops(step_ops(dev, "decode", 64, 128, 128, 2, "fused"), dev, 64, Precision.of(2))
        assert gemm(next(r for r in rows if r.name == "qkv_proj")) == (1, 64, 4096, 96 * 128 // t)


def test_models_without_rotary_embeddings_get_none():
    for name in ("starcoder", "t5-xxl"):
        m = load_model(name)
        assert not m.rope
        rows = engine_ops(step_ops(m, "decode", 2, 64, 64, 2, "fused"), m, 2, Precision.of(2))
        assert all(r.name != "rope" for r in rows)


def test_engine_fusion_changes_time_not_weights():
    m, hw = load_model("llama-2-7b"), load_profile("a100")
    fused, plain = predict_model(m, hw), predict_model(m, hw, engine=False)
    assert fused.memory == plain.memory and fused.model.params == param_count(m)
    assert fused.decode.flops > plain.decode.flops  # RoPE adds FLOPs
    assert fused.decode.bytes < plain.decode.bytes + 32 * 2 * 16 * (32 + 32) * 128 * 2  # shared reads removed


def test_hf_config_reads_rotary_embeddings(tmp_path):
    import json

    cfg = {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 100,
        "intermediate_size": 128,
        "hidden_act": "silu",
        "model_type": "llama",
        "rope_theta": 10000.0,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_model(str(tmp_path / "config.json")).rope
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "rope_theta": None, "alibi": True}))
    assert not load_model(str(tmp_path / "config.json")).rope


@pytest.mark.parametrize("model,name,cls", [("falcon-7b", "layernorm", "layernorm"), ("llama-3-8b", "norm", "norm")])
def test_norms_are_named_and_priced_by_their_kind(model, name, cls):
    # an engine runs torch's LayerNorm kernel for a LayerNorm model and its own RMSNorm kernel otherwise
    from costmodel.hardware.mechanisms import class_times
    from costmodel.price.origin import resolve

    m = load_model(model)
    assert m.norm == ("layernorm" if cls == "layernorm" else "rmsnorm")
    hw = load_profile("a100")
    pred = predict_model(m, hw, batch=8, context=512)
    ops = {op.name: op for op in pred.decode.ops}
    norms = {f"{name}_{i}" for i in range(m.norms_per_layer)}  # Falcon's parallel block has one
    assert norms | {f"final_{name}"} == {n for n in ops if n.startswith((f"{name}_", "final_"))}
    assert ops[f"{name}_0"].count == m.layers and ops[f"final_{name}"].count == 1
    # per kernel: d elements per token read and written and the d weights read once, in bf16
    op = ops[f"{name}_0"]
    per_kernel = op.bytes / op.count
    assert per_kernel == 2 * (2 * 8 * m.d_model + m.d_model)
    eff = resolve(hw, "graph").get(cls)
    # a memory-bound op under graph timing: its class's launch plus bytes at its class's achieved bandwidth
    t = class_times(
        cls,
        eff,
        peak=hw.vector_peak("bf16"),
        bandwidth=hw.bandwidth,
        sms=108,
        timing="graph",
        flops=op.flops / op.count,
        nbytes=per_kernel,
        shape={},
    )
    assert op.time_s == pytest.approx(op.count * float(t.time))
    ramp = 1 + (eff.bandwidth_half_bytes / per_kernel) ** eff.bandwidth_exponent
    hand = eff.fixed_s["graph"] + per_kernel / (hw.bandwidth * eff.bandwidth_ceiling) * ramp
    assert op.time_s == pytest.approx(op.count * hand)
    # the two kernels' curves differ: the same op priced with the other class takes another time
    other = resolve(hw, "graph").get("norm" if cls == "layernorm" else "layernorm")
    assert other.bandwidth_ceiling != pytest.approx(eff.bandwidth_ceiling, rel=0.05)

"""Model presets, Hugging Face configs, whole-model steps, KV cache and tensor parallelism."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main
from costmodel.core.errors import CostModelError
from costmodel.hardware.catalog import load_profile
from costmodel.model.memory import param_count
from costmodel.model.presets import load_model, preset_ids
from costmodel.model.pricing import all_reduce_s
from costmodel.model.step import predict_model

REQUIRED = [
    "wmt_transformer_mha",
    "wmt_transformer_mqa",
    "t5_xxl",
    "t5_xxl_mqa",
    "t5_xxl_gqa8",
    "llama_2_7b",
    "llama_2_70b",
    "llama_3_8b",
    "llama_3_70b",
    "mistral_7b",
    "falcon_7b",
    "starcoder",
    "palm_540b",
]


def test_every_required_preset_exists():
    assert set(REQUIRED) <= set(preset_ids())


@pytest.mark.parametrize("pid", preset_ids())
def test_preset_parameter_count(pid):
    m = load_model(pid)
    assert m.source.strip()
    if m.published_params is None:
        # uptrained T5 variants: T5 XXL less the removed key/value heads of every decoder attention
        base = load_model("t5_xxl")
        removed = base.layers * 2 * 2 * base.d_model * base.head_dim * (base.kv_heads - m.kv_heads)
        assert param_count(m) == param_count(base) - removed
    else:
        assert abs(param_count(m) - m.published_params) <= 0.02 * m.published_params


def test_hand_counted_llama_2_7b():
    # 32 x (4 x 4096^2 attention + 3 x 4096 x 11008 SwiGLU + 2 x 4096 norms) + 2 x 32000 x 4096 + 4096
    expected = 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 2 * 32000 * 4096 + 4096
    assert param_count(load_model("llama-2-7b")) == expected == 6_738_415_616


LLAMA3_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 8192,
}
FALCON_CONFIG = {
    "model_type": "falcon",
    "hidden_size": 4544,
    "n_head": 71,
    "n_layer": 32,
    "multi_query": True,
    "parallel_attn": True,
    "vocab_size": 65024,
    "bias": False,
    "new_decoder_architecture": False,
    "layer_norm_epsilon": 1e-5,
}


@pytest.mark.parametrize("config,preset", [(LLAMA3_CONFIG, "llama_3_8b"), (FALCON_CONFIG, "falcon_7b")])
def test_hugging_face_config_loads_to_the_preset(tmp_path, config, preset):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    loaded, ref = load_model(str(path)), load_model(preset)
    for field in (
        "d_model",
        "layers",
        "heads",
        "kv_heads",
        "head_dim",
        "d_ff",
        "ffn_gated",
        "vocab",
        "tied_embeddings",
        "parallel_block",
    ):
        assert getattr(loaded, field) == getattr(ref, field), field
    assert param_count(loaded) == param_count(ref)


@pytest.mark.parametrize(
    "content,expected",
    [
        ({"model_type": "llama", "num_attention_heads": 32}, "cannot read hidden_size, num_hidden_layers, vocab_size"),
        ("{not json", "not valid JSON"),
        (
            {"hidden_size": 100, "num_attention_heads": 3, "num_hidden_layers": 2, "vocab_size": 10},
            "cannot read head_dim",
        ),
    ],
)
def test_hugging_face_config_errors(tmp_path, content, expected):
    path = tmp_path / "config.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(CostModelError, match=expected) as err:
        load_model(str(path))
    assert str(path) in str(err.value)


@pytest.mark.parametrize("pid,dtype", [("llama_3_8b", "bf16"), ("falcon_7b", "fp16"), ("llama_2_7b", "fp32")])
def test_kv_cache_bytes(pid, dtype):
    m = load_model(pid)
    batch, context = 3, 1000
    p = predict_model(m, load_profile("h100"), batch=batch, context=context, dtype=dtype)
    width = {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]
    positions = context + 1  # after the step's own token is appended
    assert p.memory.kv_cache_bytes == 2 * m.layers * m.kv_heads * m.head_dim * positions * batch * width
    assert p.memory.kv_cache_bytes_per_token == 2 * m.layers * m.kv_heads * m.head_dim * width


def test_tensor_parallel_replicates_kv_when_g_is_below_t():
    hw = load_profile("h100")
    starcoder = load_model("starcoder")  # 48 query heads, 1 key/value head
    one = predict_model(starcoder, hw, batch=8, context=4096)
    eight = predict_model(starcoder, hw, batch=8, context=4096, tp=8)
    assert eight.model.kv_heads_per_device == 1
    assert eight.memory.kv_cache_bytes_per_device == one.memory.kv_cache_bytes_per_device  # replicated
    llama = load_model("llama_3_70b")  # 64 heads, 8 key/value heads
    by_t = {t: predict_model(llama, hw, batch=8, context=4096, tp=t) for t in (2, 8, 16)}
    assert by_t[8].memory.kv_cache_bytes_per_device * 4 == by_t[2].memory.kv_cache_bytes_per_device  # sharded
    assert by_t[16].memory.kv_cache_bytes_per_device == by_t[8].memory.kv_cache_bytes_per_device  # g < t


def test_all_reduce_price():
    hw = load_profile("h100")  # 900 GB/s both ways (450 each way), 2 us per step (estimate)
    nbytes = 16 * 8192 * 2
    assert all_reduce_s(hw, 1, nbytes) == 0
    # the datasheet ring
    assert all_reduce_s(hw, 4, nbytes) == pytest.approx(2 * 3 / 4 * nbytes / 450e9 + 2 * 3 * 2e-6)
    # a fitted model's step: vLLM's custom all-reduce in a graph, the curve fitted on the H100's comm tables
    p = predict_model(load_model("llama_3_70b"), hw, batch=16, context=2048, tp=4)
    c = hw.collectives.curves["custom_graph"][4]
    moved = 2 * 3 / 4 * nbytes
    one = min(
        c.latency_s + moved / c.bus_bytes_per_s,  # the faster of the curve's two lines
        *([c.large_latency_s + moved / c.large_bus_bytes_per_s] if c.large_latency_s is not None else []),
    )
    assert p.decode.all_reduce_s == pytest.approx(2 * 80 * one)


def test_tp_must_divide_heads():
    with pytest.raises(CostModelError, match="tp 2 must divide the 71 query heads of falcon_7b"):
        predict_model(load_model("falcon_7b"), load_profile("h100"), tp=2)


def test_decode_is_weight_and_cache_bound_and_prefill_costs_more():
    m = load_model("llama_3_8b")
    p = predict_model(m, load_profile("h100"), batch=1, context=2048)
    # every weight is read once per step, except the embedding table, of which only the new tokens' rows
    assert p.decode.bytes >= 2 * (param_count(m) - m.vocab * m.d_model)
    assert p.total.ttft_s > p.total.tpot_s
    assert p.total.tokens_per_s == pytest.approx(1 / p.total.tpot_s)


def test_encoder_decoder_step_has_cross_attention_and_encoder_prefill():
    p = predict_model(load_model("t5_xxl"), load_profile("tpu-v4"), batch=4, context=64, source=512)
    sections = {o.section for o in p.decode.ops}
    assert "cross-attention" in sections and "encoder" not in sections
    assert "encoder" in {o.section for o in p.prefill.ops}


def test_cli_model_run_and_json():
    result = CliRunner().invoke(
        main, ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--batch", "16", "--context", "8192"]
    )
    assert result.exit_code == 0, result.output
    assert "TPOT" in result.output and "TTFT" in result.output and "Llama 3 8B" in result.output
    out = json.loads(CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--json"]).output)
    assert {"tpot_s", "ttft_s", "tokens_per_s"} <= set(out["total"])
    assert out["decode"]["ops"] and out["memory"]["fits"] is True


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--model", "llama-4-8b"], "unknown model 'llama-4-8b'; did you mean llama-3-8b"),
        (["--model", "llama-3-8b", "--d-model", "1024"], "--d-model does not apply with --model"),
        (["--model", "llama-3-8b", "--tp", "3"], "tp 3 must divide the 32 query heads"),
        (["--tp", "2"], "--tp applies with --model"),
    ],
)
def test_cli_model_errors(args, expected):
    result = CliRunner().invoke(main, ["predict", "--gpu", "h100", *args])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code != 0 and len(errors) == 1 and expected in errors[0], result.output


def _hand_params(m) -> int:
    """An independent count from the architecture, written out: per layer q/o with h heads and k/v with g,
    the feed-forward block, norms (LayerNorm has a scale and a shift), embeddings and positions."""
    d, h, k, f = m.d_model, m.heads, m.head_dim, m.d_ff
    norm = d * (2 if m.norm == "layernorm" else 1)

    def attention(g):
        return 2 * d * h * k + 2 * d * g * k + ((h * k + 2 * g * k + d) if m.bias else 0)

    ffn = (3 if m.ffn_gated else 2) * d * f + (((2 if m.ffn_gated else 1) * f + d) if m.bias else 0)
    per_layer = attention(m.kv_heads) + ffn + (1 if m.parallel_block else 2) * norm
    total = m.layers * per_layer
    if m.architecture == "encoder-decoder":
        total += m.layers * (attention(m.cross_kv) + norm)
        total += m.encoder_layers * (attention(m.enc_kv) + ffn + 2 * norm) + norm
    return total + m.vocab * d * (1 if m.tied_embeddings else 2) + norm + m.learned_positions * d


def _dense_full_attention(pid: str) -> bool:
    m = load_model(pid)
    return m.mla is None and m.moe is None and m.sliding_window is None  # the others: tests/test_model_configs.py


@pytest.mark.parametrize("pid", [p for p in preset_ids() if _dense_full_attention(p)])
def test_model_memory_is_the_programs_resident_elements(pid):
    """Weights and KV cache of every preset: the model path reads them from the programs' resident tensors;
    here they are checked against the program evaluated symbolically and against a hand count."""
    from costmodel.counts import symbols as S
    from costmodel.counts.program import build_program

    m = load_model(pid)
    weights, cache = build_program("gqa", "incremental").resident_elements()
    subs = {S.d: m.d_model, S.h: m.heads, S.g: m.kv_heads, S.k: m.head_dim, S.v: m.head_dim, S.b: 1, S.m: 0}
    assert int(weights.subs(subs)) == 2 * m.d_model * m.heads * m.head_dim + 2 * m.d_model * m.kv_heads * m.head_dim
    assert param_count(m) == _hand_params(m)
    batch, context = 2, 100
    # the weights in the activation dtype (a quantized checkpoint's preset, re-priced unquantized)
    p = predict_model(m, load_profile("h100"), batch=batch, context=context, dtype="fp16", weight_dtype="fp16")
    per_position = m.layers * int(cache.subs({**subs, S.m: 1}) - cache.subs(subs))  # K and V of one position
    assert per_position == 2 * m.layers * m.kv_heads * m.head_dim
    source = context if m.architecture == "encoder-decoder" else 0
    cross = 2 * m.layers * m.cross_kv * m.head_dim * source
    assert p.memory.kv_cache_bytes == batch * (per_position * (context + 1) + cross) * 2
    assert p.memory.kv_cache_bytes_per_token == per_position * 2
    assert p.memory.weight_bytes_per_device == _hand_params(m) * 2


@pytest.mark.parametrize("pid,gpu", [("llama_3_8b", "h100"), ("t5_xxl", "tpu_v4"), ("falcon_7b", "a100")])
def test_largest_batch_and_context_are_the_memory_limits(pid, gpu):
    m, hw = load_model(pid), load_profile(gpu)
    p = predict_model(m, hw, batch=4, context=2048, source=2048)
    assert predict_model(m, hw, batch=p.memory.max_batch, context=2048).memory.fits
    assert not predict_model(m, hw, batch=p.memory.max_batch + 1, context=2048).memory.fits
    assert predict_model(m, hw, batch=4, context=p.memory.max_context, source=2048).memory.fits
    assert not predict_model(m, hw, batch=4, context=p.memory.max_context + 1, source=2048).memory.fits


def test_encoder_decoder_largest_context_fits_when_asked_for():
    """With no source length given, the encoder's follows the context: the limit must account for both."""
    m, hw = load_model("t5_xxl"), load_profile("h100")
    limit = predict_model(m, hw, batch=16).memory.max_context
    assert predict_model(m, hw, batch=16, context=limit).memory.fits
    assert not predict_model(m, hw, batch=16, context=limit + 1).memory.fits

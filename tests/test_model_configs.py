"""Real model configs: parameter counts against transformers' own models, KV bytes against independent
formulas, mixture of experts, sliding windows, per-tensor precision, refusals."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main
from costmodel.core.errors import CostModelError
from costmodel.hardware.catalog import load_profile
from costmodel.model.memory import active_params, kv_cache_elements, param_count, param_groups, weight_width
from costmodel.model.ops import device_slice, step_ops
from costmodel.model.presets import load_model
from costmodel.model.routing import experts_touched
from costmodel.model.step import predict_model

# --- parameter counts: transformers' configuration classes, models instantiated on the meta device -----

#: config class -> keyword overrides (the classes' defaults, unless a field must be set for a real model)
ARCHITECTURES = {
    "llama": ("LlamaConfig", {}),
    "mistral": ("MistralConfig", {}),
    "mixtral": ("MixtralConfig", {}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {}),
    "qwen3_moe": ("Qwen3MoeConfig", {}),
    "qwen2_moe": ("Qwen2MoeConfig", {}),
    "phi3": ("Phi3Config", {}),
    "phi": ("PhiConfig", {}),
    "olmo": ("OlmoConfig", {}),
    "olmo2": ("Olmo2Config", {}),
    "gemma": ("GemmaConfig", {}),
    "gemma2": ("Gemma2Config", {}),
    "falcon": ("FalconConfig", {}),
    "gpt2": ("GPT2Config", {}),
    "gpt_bigcode": ("GPTBigCodeConfig", {}),
    "gpt_neox": ("GPTNeoXConfig", {}),
    "starcoder2": ("Starcoder2Config", {}),
    "stablelm": ("StableLmConfig", {}),
    "cohere": ("CohereConfig", {}),
    # DeepSeek-V2-Lite's shape (no query latent, 6 of 64 experts, first layer dense) and DeepSeek-V3's defaults
    "deepseek_v2_lite": (
        "DeepseekV2Config",
        {
            "hidden_size": 2048,
            "intermediate_size": 10944,
            "num_hidden_layers": 27,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "moe_intermediate_size": 1408,
            "num_experts_per_tok": 6,
            "first_k_dense_replace": 1,
            "q_lora_rank": None,
        },
    ),
    "deepseek_v3": ("DeepseekV3Config", {}),
}


def _torch_count(cls: str, overrides: dict, path) -> int:
    """Write the config with transformers and count the parameters of the model it builds."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, cls)(**overrides)
    config.to_json_file(str(path))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_parameter_count_equals_transformers(arch, tmp_path):
    cls, overrides = ARCHITECTURES[arch]
    path = tmp_path / "config.json"
    expected = _torch_count(cls, overrides, path)
    ours = param_count(load_model(str(path)))
    assert abs(ours - expected) <= 0.005 * expected, (arch, ours, expected)


def test_at_least_fifteen_architectures_and_the_required_ones():
    required = {"mixtral", "deepseek_v3", "qwen3", "phi3", "olmo", "gemma2", "mistral", "falcon", "gpt2", "gpt_bigcode"}
    assert required <= set(ARCHITECTURES) and len(ARCHITECTURES) >= 15


def test_a_model_folder_reads_like_its_config(tmp_path):
    _torch_count("MixtralConfig", {}, tmp_path / "config.json")
    assert param_count(load_model(str(tmp_path))) == param_count(load_model(str(tmp_path / "config.json")))


@pytest.mark.parametrize(
    "pid",
    [
        "mixtral_8x7b",
        "deepseek_v2_lite",
        "deepseek_v3",
        "gemma_2_9b",
        "qwen3_8b",
        "mistral_7b",
        "gpt_oss_120b",
        "gpt_oss_20b",
    ],
)
def test_new_presets_within_half_a_percent_of_the_published_count(pid):
    m = load_model(pid)
    assert abs(param_count(m) - m.published_params) <= 0.005 * m.published_params


@pytest.mark.parametrize("pid,published_active", [("mixtral_8x7b", 12.9e9), ("deepseek_v3", 37e9)])
def test_active_parameters(pid, published_active):
    # Mixtral: 13B active (Jiang et al. 2024, 12.9B in the released weights); DeepSeek-V3: 37B activated
    m = load_model(pid)
    assert abs(active_params(m) - published_active) <= 0.02 * published_active
    e = m.moe
    up = 3  # gate, up and down of a gated expert
    assert (
        param_count(m) - active_params(m)
        == e.layers * (e.experts - e.experts_per_token) * up * m.d_model * e.expert_d_ff
    )


# --- KV cache bytes per token: independent formulas --------------------------------------------------


def _kv_per_token(m, width=2):
    return (kv_cache_elements(m, 1, 1, 1) - kv_cache_elements(m, 1, 0, 1)) * width


@pytest.mark.parametrize("pid", ["llama_3_8b", "mixtral_8x7b", "qwen3_8b", "falcon_7b"])
def test_kv_bytes_per_token_gqa(pid):
    m = load_model(pid)
    assert _kv_per_token(m) == 2 * m.layers * m.kv_heads * m.head_dim * 2  # K and V, g heads of k, bf16


@pytest.mark.parametrize("pid,layers", [("deepseek_v2_lite", 27), ("deepseek_v3", 61)])
def test_kv_bytes_per_token_mla(pid, layers):
    # one latent of 512 and one rotary key of 64 per position and layer: DeepSeek-V3's 70 kB per token
    assert _kv_per_token(load_model(pid)) == layers * (512 + 64) * 2


@pytest.mark.parametrize("pid,context", [("mistral_7b", 32768), ("gemma_2_9b", 32768), ("gemma_2_9b", 1000)])
def test_kv_cache_is_window_capped_on_local_layers(pid, context):
    m = load_model(pid)
    batch, positions = 3, context + 1
    per_position = 2 * m.kv_heads * m.head_dim  # elements per layer and position
    expected = (
        batch
        * per_position
        * ((m.layers - m.local_layers) * positions + m.local_layers * min(positions, m.sliding_window))
    )
    assert kv_cache_elements(m, batch, context, 1) == expected
    p = predict_model(m, load_profile("h100"), batch=batch, context=context)
    assert p.memory.kv_cache_bytes == expected * 2


def test_mistral_at_32k_holds_a_windowed_cache():
    # the example: 8 sequences of 32k hold 4.3 GB in a 4096-position cache, not 34 GB
    p = predict_model(load_model("mistral_7b"), load_profile("h100"), batch=8, context=32768)
    assert p.memory.kv_cache_bytes == 8 * 32 * 4096 * 2 * 8 * 128 * 2
    assert p.memory.max_context is None  # every layer windowed: the cache stops growing


def test_decode_attention_reads_at_most_the_window():
    m = load_model("gemma_2_9b")
    rows = step_ops(m, "decode", 2, 20000, 1, 2, "fused")
    attn = {r.section: r for r in rows if r.name == "attention"}
    cache = lambda positions: 2 * 2 * m.kv_heads * m.head_dim * positions * 2  # noqa: E731 - b 2, K and V, bf16
    q_and_o = 2 * 2 * m.heads * m.head_dim * 2
    assert attn["local attention"].op.bytes == cache(m.sliding_window) + q_and_o
    assert attn["self-attention"].op.bytes == cache(20001) + q_and_o
    assert attn["local attention"].count == attn["self-attention"].count == 21


# --- mixture of experts -------------------------------------------------------------------------------


@pytest.mark.parametrize("experts,top_k,tokens", [(4, 2, 1), (4, 2, 2), (5, 2, 3), (6, 3, 2)])
def test_experts_touched_equals_enumeration(experts, top_k, tokens):
    choices = list(itertools.combinations(range(experts), top_k))
    outcomes = list(itertools.product(choices, repeat=tokens))
    mean = sum(len(set().union(*picks)) for picks in outcomes) / len(outcomes)
    assert experts_touched(experts, top_k, tokens) == pytest.approx(mean, rel=1e-12)


def test_moe_decode_reads_top_k_experts_at_batch_one_and_all_at_large_batch():
    m = load_model("mixtral_8x7b")
    expert = 3 * m.d_model * m.moe.expert_d_ff * 2  # gate, up and down of one expert, bf16

    def expert_bytes(batch):  # one layer's expert kernels
        rows = {r.name: r for r in step_ops(m, "decode", batch, 100, 1, 2, "fused")}
        return rows["experts_gate_up"].op.bytes + rows["experts_down"].op.bytes

    d, f = m.d_model, m.moe.expert_d_ff
    activations = lambda tokens: 2 * tokens * 2 * (d + 2 * f + f + d)  # noqa: E731 - k = 2 rows per token, in and out
    assert expert_bytes(1) == 2 * expert + activations(1)  # exactly the two chosen experts' weights
    # 4096 tokens touch all eight experts but for 8 x 0.75^4096 of one
    assert expert_bytes(4096) == pytest.approx(8 * expert + activations(4096), rel=1e-12)
    rows = {r.name: r for r in step_ops(m, "decode", 16, 100, 1, 2, "fused")}
    assert rows["experts_gate_up"].op.flops == 2 * 16 * 2 * m.d_model * 2 * m.moe.expert_d_ff  # T k d 2f, x2
    assert rows["router"].op.flops == 2 * 16 * m.d_model * 8


def test_mixtral_does_not_fit_one_80_gb_device():
    p = predict_model(load_model("mixtral_8x7b"), load_profile("h100"), batch=1, context=1024)
    assert p.model.params == 46_702_792_704 and not p.memory.fits
    assert p.memory.weight_bytes_per_device == 2 * p.model.params


# --- precision per tensor class -----------------------------------------------------------------------


def test_int4_weights_with_group_scales(tmp_path):
    # a 4-bit AWQ Llama 3 8B: projections in 4 bits plus a 16-bit scale and a 4-bit zero per 128 weights,
    # embeddings and output projection in fp16
    cfg = {
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
        "rope_theta": 500000.0,
        "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    projections = 32 * (4096 * (32 + 2 * 8) * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336)
    rest = 2 * 128256 * 4096 + 65 * 4096  # embeddings, output projection, 65 norms
    p = predict_model(m, load_profile("h100"), batch=1, context=1024, dtype="fp16")
    assert p.memory.weight_bytes_per_device == int(projections * (0.5 + 2.5 / 128) + rest * 2)
    assert 5.6e9 < p.memory.weight_bytes_per_device < 5.8e9
    assert weight_width("int4", 128) == 0.5 + (16 + 4) / 8 / 128


def test_fp8_kv_cache_halves_the_cache_and_the_decode_attention_bytes():
    m, hw = load_model("llama_3_8b"), load_profile("h100")
    bf16 = predict_model(m, hw, batch=8, context=8192)
    fp8 = predict_model(m, hw, batch=8, context=8192, kv_dtype="fp8")
    assert fp8.memory.kv_cache_bytes * 2 == bf16.memory.kv_cache_bytes
    attn = lambda p: next(o for o in p.decode.ops if o.name == "attention")  # noqa: E731
    cache = 8 * 32 * 2 * 8 * 128 * 8193  # elements the decode kernel reads over all layers
    assert attn(bf16).bytes - attn(fp8).bytes == cache


def test_weight_dtype_overrides_the_config_and_the_compute_dtype_stays():
    m, hw = load_model("deepseek_v3"), load_profile("h100")
    fp8 = predict_model(m, hw, batch=1, context=1024, tp=8)
    assert fp8.workload.weight_dtype == "fp8_block" and fp8.workload.dtype == "bf16"
    bf16 = predict_model(m, hw, batch=1, context=1024, tp=8, weight_dtype="bf16")
    # one byte less per projection weight a device holds (the latent down-projections are replicated)
    per_device = param_groups(device_slice(m, 8))["projections"]
    assert bf16.memory.weight_bytes_per_device - fp8.memory.weight_bytes_per_device == per_device
    replicated = 61 * 7168 * (1536 + 512 + 64)
    assert per_device * 8 - 7 * replicated == param_groups(m)["projections"]


@pytest.mark.parametrize(
    "alias,pid",
    [
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama_3_8b"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral_8x7b"),
        ("Qwen/Qwen3-8B", "qwen3_8b"),
        ("mistralai/Mistral-7B-v0.1", "mistral_7b"),
        ("openai/gpt-oss-20b", "gpt_oss_20b"),
    ],
)
def test_hugging_face_ids_name_their_presets(alias, pid):
    assert load_model(alias).id == pid


def test_gpt_oss_20b_fits_a_16_gb_device_as_its_model_card_says():
    # OpenAI's model card: gpt-oss-20b runs within 16 GB of memory; 24 layers of 32 experts in MXFP4, the rest bf16
    m = load_model("openai/gpt-oss-20b")
    routed = 24 * 32 * (2880 * 5760 + 2880 * 2880)
    p = predict_model(m, load_profile("h100"), batch=1, context=1024)
    assert routed * (4 + 8 / 32) / 8 < p.memory.weight_bytes_per_device < 16e9


def test_gpt_oss_checkpoint_stores_only_its_routed_experts_in_mxfp4():
    # gpt-oss-120b's config.json: quant_method mxfp4 with self_attn, the routers, embed_tokens and lm_head in
    # modules_to_not_convert. Counted by hand from its shape: 36 layers of 128 experts, each a gate-up projection of
    # 2880 x 5760 and a down projection of 2880 x 2880, at 4 bits plus an 8-bit scale per 32; the rest in bf16:
    # attention (q 64 x 64 and k, v 8 x 64 in, 64 x 64 out, with biases), untied embeddings of 201,088 x 2880,
    # routers of 2880 x 128, two norms a layer and a final one
    m, hw = load_model("openai/gpt-oss-120b"), load_profile("h100")
    routed = 36 * 128 * (2880 * 5760 + 2880 * 2880)
    rest = (
        36 * (2880 * (4096 + 2 * 512) + 4096 * 2880 + (4096 + 2 * 512 + 2880))
        + 2 * 201088 * 2880
        + 36 * 2880 * 128
        + (2 * 36 + 1) * 2880
    )
    p = predict_model(m, hw, batch=1, context=1024)
    assert p.workload.weight_dtype == "mxfp4" and p.workload.weight_scope == "experts"
    assert p.memory.weight_bytes_per_device == pytest.approx(routed * (4 + 8 / 32) / 8 + rest * 2, rel=1e-3)
    # OpenAI's model card: the MXFP4 checkpoint runs on a single 80 GB GPU; in bf16 throughout it would not
    assert p.memory.fits
    assert not predict_model(m, hw, batch=1, context=1024, weight_dtype="bf16").memory.fits
    # each op priced as in a model stored wholly in one format: the routed experts' products as in one stored all
    # in mxfp4, every other op as in one stored all in bf16
    everything = m.model_copy(update={"quantization": m.quantization.model_copy(update={"scope": "all"})})

    def ops(q, **kw):
        return {o.name: o for o in predict_model(q, hw, batch=4, context=2048, **kw).decode.ops}

    own, mxfp4, bf16 = ops(m), ops(everything), ops(m, weight_dtype="bf16")
    for name, o in own.items():
        like = mxfp4 if name.startswith("experts_") else bf16
        assert o.bytes == like[name].bytes and o.time_s == pytest.approx(like[name].time_s), name
    assert own["experts_gate_up"].bytes < bf16["experts_gate_up"].bytes / 3
    assert own["qkv_proj"].bytes > mxfp4["qkv_proj"].bytes


def test_an_mxfp4_config_quantizes_the_experts_and_a_dense_model_may_not_say_so(tmp_path):
    from costmodel.model.presets import ModelPreset

    # gpt-oss-120b's config.json (the keys the reader takes): read, it holds and prices what the preset does
    cfg = {
        "model_type": "gpt_oss",
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "num_hidden_layers": 36,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
        "experts_per_token": 4,
        "vocab_size": 201088,
        "tie_word_embeddings": False,
        "attention_bias": True,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 150000,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
        "quantization_config": {
            "quant_method": "mxfp4",
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
        },
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    read, preset, hw = load_model(str(path)), load_model("gpt-oss-120b"), load_profile("h100")
    q = read.quantization
    assert (q.weight_dtype, q.group_size, q.scope) == ("mxfp4", 32, "experts")
    a, b = (predict_model(m, hw, batch=2, context=1024) for m in (read, preset))
    assert a.memory.weight_bytes_per_device == b.memory.weight_bytes_per_device
    assert a.decode.time_s == pytest.approx(b.decode.time_s)
    dense = load_model("llama_3_8b").model_dump()
    dense["quantization"] = {"weight_dtype": "mxfp4", "group_size": 32, "scope": "experts"}
    with pytest.raises(ValueError, match="scope 'experts' needs a mixture of experts"):
        ModelPreset.model_validate(dense)


# --- what-if layouts, parallel blocks, refusals ------------------------------------------------------


def test_kv_heads_and_mla_what_ifs():
    m = load_model("llama_3_8b")
    assert _kv_per_token(m.with_kv_heads(1)) == 2 * 32 * 1 * 128 * 2
    assert _kv_per_token(m.with_kv_heads(32)) == 2 * 32 * 32 * 128 * 2
    mla = m.with_variant("mla")  # DeepSeek-V2's ratios: latent 4k = 512, rotary k/2 = 64
    assert _kv_per_token(mla) == 32 * (512 + 64) * 2
    back = load_model("deepseek_v2_lite").with_kv_heads(16)  # MLA re-priced as MHA with its 192-wide keys
    assert back.mla is None and _kv_per_token(back) == 2 * 27 * 16 * 192 * 2
    # a what-if is named as one and no longer claims the published parameter count; the same layout is the model
    assert mla.published_params is None and mla.name == "Llama 3 8B, as MLA (latent 512 + rotary 64)"
    assert m.with_variant("gqa") is m and m.with_kv_heads(8) is m


def test_parallel_block_pays_one_all_reduce_per_layer():
    from costmodel.model.pricing import all_reduce_s

    hw = load_profile("tpu_v4")
    palm = load_model("palm_540b")
    p = predict_model(palm, hw, batch=16, context=2048, tp=8)
    assert p.decode.all_reduce_s == pytest.approx(palm.layers * all_reduce_s(hw, 8, 16 * palm.d_model * 2))
    llama = predict_model(load_model("llama_3_70b"), hw, batch=16, context=2048, tp=8)
    assert llama.decode.all_reduces == 2 * 80


UNSUPPORTED = [
    (
        {"model_type": "mamba", "hidden_size": 768, "state_size": 16, "num_hidden_layers": 24, "vocab_size": 50280},
        "cannot model state-space (Mamba) layers (key state_size)",
    ),
    (
        {
            "model_type": "bert",
            "hidden_size": 768,
            "num_attention_heads": 12,
            "num_hidden_layers": 12,
            "vocab_size": 30522,
            "type_vocab_size": 2,
        },
        "cannot model an encoder-only (BERT-style) model",
    ),
    (
        {
            "model_type": "jamba",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "vocab_size": 65536,
            "attn_layer_period": 8,
        },
        "cannot model hybrid attention/state-space layers",
    ),
    (
        {
            "hidden_size": 768,
            "num_attention_heads": 12,
            "num_hidden_layers": 12,
            "vocab_size": 100,
            "architectures": ["RobertaForMaskedLM"],
        },
        "cannot model architecture RobertaForMaskedLM (not a generating model)",
    ),
    (
        {
            "hidden_size": 768,
            "num_attention_heads": 12,
            "num_hidden_layers": 2,
            "vocab_size": 100,
            "layer_types": ["linear_attention", "full_attention"],
        },
        "cannot model layer types linear_attention",
    ),
    (
        {
            "hidden_size": 768,
            "num_attention_heads": 12,
            "num_hidden_layers": 2,
            "vocab_size": 100,
            "num_local_experts": 8,
        },
        "8 experts but no num_experts_per_tok",
    ),
    (
        {
            "hidden_size": 768,
            "num_attention_heads": 12,
            "num_hidden_layers": 2,
            "vocab_size": 100,
            "quantization_config": {"quant_method": "hqq", "nbits": 3},
        },
        "cannot read quantization_config with quant_method 'hqq'",
    ),
    # refused by the type's name when no key gives it away
    (
        {
            "model_type": "mamba",
            "hidden_size": 768,
            "num_attention_heads": 12,
            "num_hidden_layers": 24,
            "vocab_size": 50280,
        },
        "cannot model state-space (Mamba) layers (model type or architecture 'mamba')",
    ),
    (
        {
            "hidden_size": 768,
            "num_attention_heads": 12,
            "num_hidden_layers": 24,
            "vocab_size": 50280,
            "architectures": ["MambaForCausalLM"],
        },
        "cannot model state-space (Mamba) layers (model type or architecture 'mambaforcausallm')",
    ),
    (
        {
            "model_type": "rwkv",
            "hidden_size": 768,
            "num_attention_heads": 12,
            "num_hidden_layers": 24,
            "vocab_size": 50280,
        },
        "cannot model recurrent (RWKV) layers",
    ),
]


@pytest.mark.parametrize("cfg,expected", UNSUPPORTED)
def test_unsupported_configs_are_refused(tmp_path, cfg, expected):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(CostModelError) as err:
        load_model(str(path))
    assert expected in str(err.value) and str(path) in str(err.value)
    result = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", str(path)])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 1 and len(errors) == 1 and expected in errors[0] and "Traceback" not in result.output
    assert "supported:" in errors[0] or "experts" in expected or "quantization" in expected


DEEPSEEK_LIKE = {
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_hidden_layers": 4,
    "vocab_size": 1000,
    "intermediate_size": 4096,
    "hidden_act": "silu",
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
}


@pytest.mark.parametrize(
    "cfg,expected",
    [
        ({**DEEPSEEK_LIKE, "kv_lora_rank": 0}, "field kv_lora_rank must be an integer from 1 to 1099511627776, got 0"),
        ({**DEEPSEEK_LIKE, "kv_lora_rank": 512, "q_lora_rank": 0}, "field q_lora_rank must be an integer from 1"),
        (
            {**DEEPSEEK_LIKE, "sliding_window": 0},
            "field sliding_window must be an integer from 1 to 1099511627776 (null for no window), got 0",
        ),
        ({**DEEPSEEK_LIKE, "sliding_window": -1}, "field sliding_window must be an integer from 1"),
        ({**DEEPSEEK_LIKE, "sliding_window": "4096"}, "field sliding_window must be an integer from 1"),
        (
            {**DEEPSEEK_LIKE, "num_local_experts": 8, "num_experts_per_tok": 2, "moe_layer_freq": 0},
            "field moe_layer_freq must be an integer from 1",
        ),
        (
            {
                **DEEPSEEK_LIKE,
                "num_local_experts": 8,
                "num_experts_per_tok": 2,
                "decoder_sparse_step": 1,
                "mlp_only_layers": "0",
            },
            "mlp_only_layers must be a list of layer indices",
        ),
    ],
)
def test_zero_ranks_and_windows_are_errors_not_defaults(tmp_path, cfg, expected):
    """A zero latent rank is not MHA and a zero or negative window is not 'no window': each is refused."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(CostModelError) as err:
        load_model(str(path))
    assert expected in str(err.value)


def test_a_disabled_window_may_be_anything(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**DEEPSEEK_LIKE, "sliding_window": 4096, "use_sliding_window": False}))
    assert load_model(str(path)).sliding_window is None


@pytest.mark.parametrize("layers", [7, 60, 61, 2**40])
@pytest.mark.parametrize("style", ["deepseek", "qwen"])
def test_moe_layer_count_in_closed_form(tmp_path, layers, style):
    """The MoE layers of a config are counted without a loop over its layers (2^40 of them in microseconds),
    equal to a brute-force count where one can run."""
    cfg = {
        **DEEPSEEK_LIKE,
        "num_hidden_layers": layers,
        "n_routed_experts": 16,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 512,
    }
    if style == "deepseek":
        cfg |= {"first_k_dense_replace": 3, "moe_layer_freq": 2}
        brute = lambda: sum(1 for i in range(3, layers) if i % 2 == 0)  # noqa: E731
    else:
        cfg |= {"decoder_sparse_step": 3, "mlp_only_layers": [2, 5, 6, 10**6]}
        brute = lambda: sum(1 for i in range(layers) if i not in (2, 5, 6, 10**6) and (i + 1) % 3 == 0)  # noqa: E731
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    expected = (
        brute() if layers < 10**6 else ((layers - 1) // 2 - 2 + 1 if style == "deepseek" else layers // 3 - 2)
    )  # by hand for 2^40 layers
    assert (m.moe.layers if m.moe else 0) == expected
    if layers == 2**40:  # and the whole model prices without a loop over its layers
        p = predict_model(m, load_profile("h100"), batch=1, context=16)
        assert p.total.tpot_s > 0


def test_gating_follows_the_activation_not_the_model_type(tmp_path):
    # Phi-3, Qwen3 and OLMo name no gating; their SiLU is SwiGLU. A GELU decoder (StarCoder 2) is not gated.
    base = {
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "num_hidden_layers": 2,
        "vocab_size": 1000,
        "intermediate_size": 4096,
    }
    for act, gated in (("silu", True), ("gelu_pytorch_tanh", False), ("gelu_new", False)):
        path = tmp_path / f"{act}.json"
        path.write_text(json.dumps({**base, "model_type": "phi3", "hidden_act": act}))
        assert load_model(str(path)).ffn_gated is gated, act


def test_a_model_type_the_reader_does_not_know_is_refused_not_priced_as_a_decoder(tmp_path):
    """A config of Llama's keys under a type the reader does not know is one error naming the type and how to
    price it anyway; the same config as llama, or with no model_type, is read by its keys."""
    base = {"hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, "model_type": "made_up"}))
    with pytest.raises(CostModelError, match="model type 'made_up' is not one the reader knows.*set model_type"):
        load_model(str(path))
    r = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", str(path)])
    assert r.exit_code == 1 and "made_up" in r.output and "Traceback" not in r.output
    for fixed in ({**base, "model_type": "llama"}, base):
        path.write_text(json.dumps(fixed))
        assert load_model(str(path)).layers == 2


# --- command line -----------------------------------------------------------------------------------


def test_models_list_and_show():
    out = CliRunner().invoke(main, ["models", "list"])
    assert out.exit_code == 0
    for pid in ("mixtral_8x7b", "deepseek_v3", "gemma_2_9b", "qwen3_8b", "mistral_7b"):
        assert pid in out.output
    shown = json.loads(CliRunner().invoke(main, ["models", "show", "deepseek-v2-lite", "--json"]).output)
    assert shown["mla"]["kv_rank"] == 512 and shown["moe"]["experts"] == 64
    assert sum(shown["params"].values()) == param_count(load_model("deepseek-v2-lite"))


@pytest.mark.parametrize(
    "args,check",
    [
        (["--weight-dtype", "int4"], lambda p: p["workload"]["weight_dtype"] == "int4"),
        (["--kv-dtype", "fp8"], lambda p: p["workload"]["kv_dtype"] == "fp8"),
        (["--kv-heads", "1"], lambda p: p["model"]["kv_heads"] == 1),
        (["--variant", "mla"], lambda p: p["model"]["mla"]["kv_rank"] == 512),
    ],
)
def test_cli_precision_and_what_if(args, check):
    result = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--json", *args])
    assert result.exit_code == 0, result.output
    assert check(json.loads(result.output))


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--weight-dtype", "int4"], "--weight-dtype applies with --model"),
        (["--variant", "mla"], "--variant mla applies with --model"),
        (["--model", "llama-3-8b", "--kv-heads", "3"], "groups 3 must divide heads 32"),
        (["--model", "llama-3-8b", "--mla-form", "naive"], "mla form applies to MLA models"),
    ],
)
def test_cli_model_option_errors(args, expected):
    result = CliRunner().invoke(main, ["predict", "--gpu", "h100", *args])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code != 0 and len(errors) == 1 and expected in errors[0], result.output


def test_mla_model_decode_and_prefill_forms():
    m, hw = load_model("deepseek_v2_lite"), load_profile("h100")
    p = predict_model(m, hw, batch=4, context=4096)
    names = {o.name for o in p.decode.ops}
    assert {"q_absorb", "v_absorb"} <= names and "kv_up" not in names  # absorbed decode
    assert "kv_up" in {o.name for o in p.prefill.ops}  # naive prefill
    naive = predict_model(m, hw, batch=4, context=4096, mla_form="naive")
    assert naive.decode.flops > p.decode.flops  # materialising every head's keys costs more per step
    assert math.isclose(naive.memory.kv_cache_bytes, p.memory.kv_cache_bytes)

"""Requests, capacity under targets, devices side by side, whole-model sweeps, and the command-line
conventions (engine flag spellings, size suffixes, formats, units)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main
from costmodel.core.errors import CostModelError
from costmodel.hardware.catalog import load_profile
from costmodel.model.presets import load_model
from costmodel.model.requests import largest_batch, model_sweep, request
from costmodel.model.step import predict_model


def _run(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


# --- a request: TTFT + every decode step ------------------------------------------------------------


@pytest.mark.parametrize(
    "pid,gpu,batch,tp",
    [
        ("llama_3_8b", "h100", 4, 1),
        ("gemma_2_9b", "a100", 2, 1),
        ("deepseek_v2_lite", "h100", 8, 1),
        ("mixtral_8x7b", "h100", 3, 2),
        ("falcon_7b", "tpu_v5e", 1, 1),
    ],
)
def test_end_to_end_is_ttft_plus_every_step_one_by_one(pid, gpu, batch, tp):
    m, hw = load_model(pid), load_profile(gpu)
    input_len, output_len = 300, 41
    r = request(m, hw, batch=batch, input_len=input_len, output_len=output_len, tp=tp)
    # an independent loop: one whole-model prediction per step, at input_len + i cached positions
    steps = [predict_model(m, hw, batch=batch, context=input_len + i, tp=tp).total.tpot_s for i in range(output_len)]
    ttft = predict_model(m, hw, batch=batch, context=input_len, tp=tp).total.ttft_s
    assert r.ttft_s == pytest.approx(ttft, rel=1e-12)
    assert r.e2e_s == pytest.approx(ttft + sum(steps), rel=1e-12)
    assert r.tpot_mean_s == pytest.approx(sum(steps) / output_len, rel=1e-12)
    assert r.tpot_first_s == pytest.approx(steps[0], rel=1e-12) and r.tpot_last_s == pytest.approx(steps[-1], rel=1e-12)
    assert r.tokens_per_s_per_device == pytest.approx(batch * output_len / r.e2e_s / tp)
    # memory at the longest context: the cache after the last step
    last = predict_model(m, hw, batch=batch, context=input_len + output_len - 1, tp=tp)
    assert r.kv_cache_bytes_per_device == last.memory.kv_cache_bytes_per_device


def test_request_errors():
    m, hw = load_model("llama_3_8b"), load_profile("h100")
    with pytest.raises(CostModelError, match="output_len must be an integer from 1"):
        request(m, hw, input_len=10, output_len=0)
    out = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--input-len", "100"])
    assert out.exit_code == 1 and "--input-len and --output-len go together" in out.output
    out = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--input-len", "100", "--output-len", "10"])
    assert out.exit_code == 1 and "--input-len applies with --model" in out.output
    with pytest.raises(CostModelError, match="requests are modelled for decoder-only models; t5_xxl is"):
        request(load_model("t5_xxl"), hw, input_len=512, output_len=64)


# --- capacity ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("pid", ["llama_3_8b", "mistral_7b", "deepseek_v2_lite"])
@pytest.mark.parametrize("gpu", ["h100", "a100"])
def test_capacity_holds_at_the_batch_and_not_one_beyond(pid, gpu):
    m, hw = load_model(pid), load_profile(gpu)
    input_len, output_len, target = 1024, 128, 0.030
    point = largest_batch(m, hw, input_len=input_len, output_len=output_len, tpot_s=target)
    b = point.batch
    assert b >= 1
    at = request(m, hw, batch=b, input_len=input_len, output_len=output_len)
    assert at.tpot_mean_s <= target and at.fits
    beyond = request(m, hw, batch=b + 1, input_len=input_len, output_len=output_len)
    assert beyond.tpot_mean_s > target or not beyond.fits
    assert point.binds == ("tpot" if beyond.fits else "memory")


def test_capacity_with_ttft_target_price_and_variants():
    out = json.loads(
        _run(
            "capacity",
            "--gpu",
            "h100",
            "--gpu",
            "a100",
            "--model",
            "llama-3-8b",
            "--input-len",
            "2048",
            "--output-len",
            "256",
            "--tpot-ms",
            "40",
            "--ttft-ms",
            "3000",
            "--price-per-hour",
            "2",
            "--batching",
            "static",
            "--json",
        )
    )
    points = out["points"]
    assert [(p["device"], p["attention"]) for p in points] == [
        (d, a) for d in ("h100_sxm", "a100_80gb_sxm") for a in ("GQA (g=8)", "MHA (g=32)", "MQA (g=1)")
    ]
    for p in points:
        r = p["request"]
        assert r["ttft_s"] <= 3.0 and r["tpot_mean_s"] <= 0.040
        # cost per million output tokens: the device-hour over the tokens it makes in an hour
        assert p["cost_per_million_tokens"] == pytest.approx(2 / (r["tokens_per_s_per_device"] * 3600) * 1e6)
    mha, mqa = points[1], points[2]
    assert mqa["batch"] > mha["batch"]  # the paper's point: a smaller cache serves more sequences


def test_capacity_reports_when_nothing_fits():
    point = largest_batch(load_model("llama_3_70b"), load_profile("l4"), input_len=512, output_len=64, tpot_s=0.05)
    assert point.batch == 0 and point.binds == "memory" and point.request is None


# --- devices side by side ---------------------------------------------------------------------------


def test_repeated_gpu_gives_one_row_per_device_with_the_separate_numbers():
    both = json.loads(_run("predict", "--gpu", "a100", "--gpu", "h100", "--model", "llama-3-8b", "--json"))
    assert [p["hardware"]["id"] for p in both] == ["a100_80gb_sxm", "h100_sxm"]
    for p, gpu in zip(both, ("a100", "h100")):
        alone = json.loads(_run("predict", "--gpu", gpu, "--model", "llama-3-8b", "--json"))
        assert p == alone
    table = _run("predict", "--gpu", "a100", "--gpu", "h100", "--model", "llama-3-8b")
    rows = [line for line in table.splitlines() if line.startswith(("a100_80gb_sxm", "h100_sxm"))]
    assert len(rows) == 2
    assert f"{both[1]['total']['tpot_s'] * 1e3:.3g} ms" in rows[1]


def test_repeated_gpu_for_attention_requests_and_capacity():
    attn = json.loads(_run("predict", "--gpu", "a100", "--gpu", "h100", "--json"))
    assert len(attn) == 2 and attn[1] == json.loads(_run("predict", "--gpu", "h100", "--json"))
    req = json.loads(
        _run(
            "predict",
            "--gpu",
            "a100",
            "--gpu",
            "h100",
            "--model",
            "qwen3-8b",
            "--input-len",
            "512",
            "--output-len",
            "64",
            "--json",
        )
    )
    alone = json.loads(
        _run("predict", "--gpu", "h100", "--model", "qwen3-8b", "--input-len", "512", "--output-len", "64", "--json")
    )
    assert req[1] == alone


# --- whole-model sweeps -----------------------------------------------------------------------------


def test_model_sweep_points_equal_single_predictions_and_mark_memory():
    m, hw = load_model("llama_2_7b"), load_profile("h100")
    records = model_sweep([m], [hw], "batch", [1, 16, 256], context=4096)
    for r in records:
        p = predict_model(m, hw, batch=r["batch"], context=4096)
        assert r["tpot_s"] == p.total.tpot_s and r["fits"] == p.memory.fits
    assert [r["fits"] for r in records] == [True, True, False]  # 256 x 4097 x 512 kB of cache is 550 GB


def test_model_sweep_cli_csv_and_plot(tmp_path):
    path = tmp_path / "s.csv"
    out = _run("predict", "--gpu", "h100", "--model", "llama-3-8b", "--sweep", "batch=1:64:x4", "--csv", str(path))
    assert "whole-model sweep of batch" in out
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert [int(r["batch"]) for r in rows] == [1, 4, 16, 64]
    plot = tmp_path / "t.png"
    _run(
        "sweep",
        "--gpu",
        "h100",
        "--gpu",
        "a100",
        "--model",
        "llama-3-8b",
        "--variants",
        "--x",
        "batch",
        "--range",
        "1:256:x4",
        "--input-len",
        "1024",
        "--output-len",
        "128",
        "--out",
        str(plot),
    )
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_throughput_latency_figure_has_a_curve_per_layout_and_the_memory_limit():
    from costmodel.render.serving_plots import draw_throughput_latency

    layouts = [load_model("llama_3_8b"), load_model("llama_3_8b").with_variant("mha")]
    records = model_sweep(layouts, [load_profile("h100")], "batch", [1, 4, 16, 64, 256], context=4096)
    fig = draw_throughput_latency(records, "batch")
    gids = {a.get_gid() for a in fig.axes[0].get_children() if a.get_gid()}
    assert {"curve:h100_sxm:GQA (g=8)", "curve:h100_sxm:MHA (g=32)", "memory_limit:h100_sxm:MHA (g=32)"} <= gids


# --- conventions ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spelled,plain",
    [
        (["--context", "128k"], ["--context", "128000"]),
        (["--context", "32K"], ["--context", "32768"]),
        (["--batch-size", "8"], ["--batch", "8"]),
        (["--kv-cache-dtype", "fp8_e4m3"], ["--kv-dtype", "fp8"]),
        (["--dtype", "bfloat16"], ["--dtype", "bf16"]),
        (["--dtype", "float16"], ["--dtype", "fp16"]),
    ],
)
def test_engine_spellings_mean_the_same(spelled, plain):
    a = json.loads(_run("predict", "--gpu", "h100", "--model", "llama-3-8b", "--json", *spelled))
    b = json.loads(_run("predict", "--gpu", "h100", "--model", "llama-3-8b", "--json", *plain))
    assert a == b


@pytest.mark.parametrize("flag", ["--tp", "--tensor-parallel-size", "-tp"])
def test_tensor_parallel_spellings(flag):
    out = json.loads(_run("predict", "--gpu", "h100", "--model", "llama-3-70b", flag, "4", "--json"))
    assert out["hardware"]["devices"] == 4


def test_bad_suffix_is_a_clear_error():
    out = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--context", "12q"])
    assert out.exit_code == 2 and "'12q' is not a whole number" in out.output and "Traceback" not in out.output


@pytest.mark.parametrize(
    "args",
    [
        ["predict", "--gpu", "h100"],
        ["predict", "--gpu", "h100", "--model", "llama-3-8b"],
        [
            "predict",
            "--gpu",
            "h100",
            "--gpu",
            "a100",
            "--model",
            "llama-3-8b",
            "--input-len",
            "128",
            "--output-len",
            "8",
        ],
        [
            "capacity",
            "--gpu",
            "h100",
            "--model",
            "llama-3-8b",
            "--input-len",
            "128",
            "--output-len",
            "8",
            "--tpot-ms",
            "20",
        ],
        ["hardware", "list"],
        ["models", "list"],
        ["derive", "--variant", "gqa"],
        ["validate", "--published"],
        ["reproduce", "gqa2023"],
    ],
)
def test_every_table_prints_as_csv_and_markdown(args):
    rows = list(csv.DictReader(io.StringIO(_run(*args, "--format", "csv"))))
    assert rows and all(len(r) == len(rows[0]) for r in rows)
    md = _run(*args, "--format", "markdown").splitlines()
    assert md[0].startswith("| ") and set(md[1]) <= {"|", "-"} and len(md) == len(rows) + 2
    assert md[0].count("|") == len(rows[0]) + 1


def test_times_print_in_microseconds_and_tpu_capacities_in_gib():
    out = _run("predict", "--gpu", "h100")
    assert " µs" in out and " us " not in out
    assert "95 GiB" in _run("hardware", "list") and "95 GiB" in _run("hardware", "show", "tpu-v5p")
    assert "8e+10" not in _run("hardware", "show", "h100") and "80 GB" in _run("hardware", "show", "h100")


def test_attention_sweep_on_two_devices_is_one_table_of_the_separate_sweeps():
    import re

    cells = lambda text: [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()[2:]]  # noqa: E731
    args = ["--sweep", "context=1024:4096:x2", "--batch", "64"]
    both = cells(_run("predict", "--gpu", "a100", "--gpu", "h100", *args))
    a100, h100 = (cells(_run("predict", "--gpu", gpu, *args)) for gpu in ("a100", "h100"))
    assert both == [a[:1] + a[1:] + h[1:] for a, h in zip(a100, h100)]
    records = json.loads(_run("predict", "--gpu", "a100", "--gpu", "h100", *args, "--json"))
    single = json.loads(_run("predict", "--gpu", "h100", *args, "--json"))
    assert [{k: v for k, v in r.items() if k != "device"} for r in records if r["device"] == "h100_sxm"] == single


def test_attention_sweep_plot_on_two_devices(tmp_path):
    plot, table = tmp_path / "two.png", tmp_path / "two.csv"
    _run(
        "sweep",
        "--gpu",
        "h100",
        "--gpu",
        "a100",
        "--x",
        "context",
        "--range",
        "512:8192:x4",
        "--out",
        str(plot),
        "--csv",
        str(table),
    )
    assert plot.read_bytes().startswith(b"\x89PNG")
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    assert {r["device"] for r in rows} == {"h100_sxm", "a100_80gb_sxm"} and len(rows) == 2 * 3 * 3

"""Load curves: a list or range of loads in one call, each point the single prediction at that load."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main

BASE = ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--engine", "vllm"]


def run(*args):
    return CliRunner().invoke(main, [*BASE, *args])


@pytest.fixture(scope="module")
def curve():
    r = run("--input-len", "1024", "--output-len", "256", "--concurrency", "1:256:x2", "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["points"]


def test_a_curve_point_is_the_single_prediction_at_its_load(curve):
    for c in (1, 16, 256):
        one = run("--input-len", "1024", "--output-len", "256", "--concurrency", str(c), "--json")
        assert one.exit_code == 0, one.output
        [point] = [p for p in curve if p["concurrency"] == c]
        assert point == json.loads(one.output)


def test_throughput_grows_with_the_clients_until_the_engine_is_full(curve):
    """Requests per second do not fall as clients are added while every client runs at once (the batch is the
    clients); past that the engine holds no more and the throughput stays within the run's noise."""
    assert [p["concurrency"] for p in curve] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    for a, b in zip(curve, curve[1:]):
        if b["max_batch"] >= b["concurrency"]:
            assert b["requests_per_s"] >= a["requests_per_s"]
        else:
            assert b["requests_per_s"] >= 0.97 * a["requests_per_s"]


def test_littles_law_at_every_point(curve):
    """A closed loop of C clients, each sending its next request as its last one finishes: C = X x W, with X the
    completed requests per second and W the mean time a request takes (its end-to-end latency; the front end's
    latency, counted in TTFT, holds no client slot in the engine and is 0.5% of W here). Within 5%: the run's
    first wave and its tail are in X."""
    for p in curve:
        assert p["requests_per_s"] * p["e2e_s"] == pytest.approx(p["concurrency"], rel=0.05)
        assert p["output_tokens_per_s_per_gpu"] == p["output_tokens_per_s_per_device"]


def test_an_open_loop_curve_and_its_plot(tmp_path):
    out = tmp_path / "curve.svg"
    r = run(
        "--input-len",
        "1024",
        "--output-len",
        "128",
        "--request-rate",
        "1,4,16",
        "--num-requests",
        "200",
        "--plot",
        str(out),
        "--json",
    )
    assert r.exit_code == 0, r.output
    points = json.loads(r.output)["points"]
    assert [p["request_rate"] for p in points] == [1.0, 4.0, 16.0]
    # below saturation an open loop completes what arrives
    for p in points:
        if not p["overloaded"]:
            assert p["requests_per_s"] == pytest.approx(p["request_rate"], rel=0.25)
    svg = out.read_text()
    assert svg.count('id="throughput:0"') == 1 and 'id="ttft:0"' in svg and 'id="tpot:0"' in svg


@pytest.mark.parametrize(
    "value,said",
    [
        ("1,1", "names a load twice"),
        ("0,4", "not in the range"),
        ("1:100000:+1", "more than 256 loads"),
        ("4,x", "whole number"),
    ],
)
def test_a_bad_curve_is_one_error_line(value, said, tmp_path):
    r = run("--input-len", "1024", "--output-len", "64", "--concurrency", value, "--plot", str(tmp_path / "c.png"))
    assert r.exit_code != 0 and said in r.output and "Traceback" not in r.output
    assert not (tmp_path / "c.png").exists()


# --- engine flags as the engines spell them ---------------------------------------------------------------------


def test_kv_cache_dtype_and_max_model_len_as_vllm_spells_them():
    """--kv-cache-dtype fp8 is --kv-dtype fp8 (auto: the default); --max-model-len is the engine's own limit,
    not the workload's context: accepted within it, a longer request refused, and a limit past the KV cache
    refused as vLLM refuses to start."""
    base = ["--output-len", "64", "--concurrency", "4", "--json"]
    fp8 = run("--input-len", "512", *base, "--kv-cache-dtype", "fp8", "--max-model-len", "8192")
    same = run("--input-len", "512", *base, "--kv-dtype", "fp8")
    auto = run("--input-len", "512", *base, "--kv-cache-dtype", "auto")
    plain = run("--input-len", "512", *base)
    assert fp8.exit_code == 0, fp8.output
    assert json.loads(fp8.output)["tpot_s"] == json.loads(same.output)["tpot_s"]
    assert json.loads(auto.output) == json.loads(plain.output)
    assert json.loads(fp8.output)["tpot_s"] < json.loads(plain.output)["tpot_s"]  # half the cache bytes to read
    longer = run("--input-len", "9000", *base, "--max-model-len", "8192")
    assert longer.exit_code == 1 and "9,064 tokens" in longer.output and "max_model_len 8,192" in longer.output
    huge = CliRunner().invoke(
        main,
        [
            "predict",
            "--gpu",
            "l4",
            "--model",
            "llama-3-8b",
            "--engine",
            "sglang",
            "--input-len",
            "512",
            *base,
            "--max-model-len",
            "900000",
        ],
    )
    assert huge.exit_code == 1 and "context_length 900,000" in huge.output and "does not start" in huge.output

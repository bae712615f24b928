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


def test_configurations_compared_are_each_the_single_prediction(tmp_path):
    """Comma lists of --tp, --engine, --weight-dtype and --kv-cache-dtype compare their product: every point is the
    prediction of that one configuration asked alone, each labelled in the table and the plot."""
    base = ["predict", "--gpu", "h100", "--model", "llama-3-8b", "--input-len", "512", "--output-len", "64"]
    out = tmp_path / "compare.svg"
    listed = ["--tp", "1,2", "--engine", "vllm,sglang", "--weight-dtype", "bf16,fp8", "--concurrency", "4,16"]
    r = CliRunner().invoke(main, [*base, *listed, "--json", "--plot", str(out)])
    assert r.exit_code == 0, r.output
    points = json.loads(r.output)["points"]
    assert len(points) == 2 * 2 * 2 * 2
    for p in points[::3]:
        one = [*base, "--tp", str(p["tp"]), "--engine", p["engine"]["name"], "--weight-dtype", p["weight_dtype"]]
        alone = CliRunner().invoke(main, [*one, "--concurrency", str(p["concurrency"]), "--json"])
        assert alone.exit_code == 0, alone.output
        assert json.loads(alone.output) == p
    labels = {(p["tp"], p["engine"]["name"], p["weight_dtype"]) for p in points}
    assert len(labels) == 8
    svg = out.read_text()
    assert all(f'id="throughput:{i}"' in svg for i in range(8)) and 'id="throughput:8"' not in svg
    table = CliRunner().invoke(main, [*base, "--tp", "1", "--weight-dtype", "bf16,fp8", "--engine", "vllm"])
    assert table.exit_code != 0  # a list needs a load
    table = CliRunner().invoke(main, [*base, "--weight-dtype", "bf16,fp8", "--engine", "vllm", "--concurrency", "4"])
    assert table.exit_code == 0, table.output
    assert "engine weights/KV" in table.output and "vllm fp8/bf16" in table.output
    csv = CliRunner().invoke(main, [*base, *listed, "--format", "csv"])
    assert csv.exit_code == 0, csv.output
    head, *rows = csv.output.strip().splitlines()
    assert {"devices", "engine", "engine_version", "weight_dtype", "kv_dtype"} <= set(head.split(",")) and len(
        rows
    ) == 16


@pytest.mark.parametrize(
    "args,said",
    [
        (["--model", "llama-3-8b", "--tp", "1,2"], "compares served configurations"),
        (["--model", "llama-3-8b", "--tp", "1,1", "--engine", "vllm", "--concurrency", "4"], "twice"),
        (["--model", "llama-3-8b", "--engine", "vllm==0.8,sglang", "--concurrency", "4"], "without a release"),
    ],
)
def test_a_list_where_it_cannot_compare_is_one_error(args, said):
    r = CliRunner().invoke(main, ["predict", "--gpu", "h100", "--input-len", "64", "--output-len", "8", *args])
    assert r.exit_code != 0 and said in r.output and "Traceback" not in r.output, r.output
    capacity = ["capacity", "--gpu", "h100", "--model", "llama-3-8b", "--tp", "1,2", "--tpot-ms", "50"]
    r = CliRunner().invoke(main, [*capacity, "--input-len", "64", "--output-len", "8"])
    assert r.exit_code == 2 and "Traceback" not in r.output


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


def test_plan_and_capacity_take_the_engine_flags():
    """--max-num-seqs 16 on capacity: no more than 16 clients, the sequence limit binding; on plan: each point's
    command carries it and prices the point again to the same TTFT and TPOT."""
    cap = CliRunner().invoke(
        main,
        [
            "capacity",
            "--gpu",
            "h100",
            "--model",
            "llama-3-8b",
            "--input-len",
            "1024",
            "--output-len",
            "128",
            "--tpot-ms",
            "30",
            "--max-num-seqs",
            "16",
            "--json",
        ],
    )
    assert cap.exit_code == 0, cap.output
    points = json.loads(cap.output)["points"]
    assert points and all(p["concurrency"] <= 16 for p in points)
    assert "sequence limit" in {p["binds"] for p in points}
    plan = CliRunner().invoke(
        main,
        [
            "plan",
            "--gpu",
            "h100",
            "--gpus",
            "2",
            "--model",
            "llama-3-8b",
            "--input-len",
            "1024",
            "--output-len",
            "128",
            "--max-num-seqs",
            "32",
            "--max-concurrency",
            "64",
            "--json",
        ],
    )
    assert plan.exit_code == 0, plan.output
    front = json.loads(plan.output)["front"]
    for point in front:
        assert "32" in point["command"][-4:]
        run_again = CliRunner().invoke(main, [*point["command"], "--json"])
        assert run_again.exit_code == 0, (point["command"], run_again.output)
        again = json.loads(run_again.output)
        assert again["ttft_s"] == pytest.approx(point["ttft_s"], rel=1e-9)
        assert again["tpot_s"] == pytest.approx(point["tpot_s"], rel=1e-9)


def test_a_disaggregated_plan_point_with_flags_reprices_from_its_command():
    """A disaggregated layout priced by the planner with a sequence limit and a memory fraction, and the command
    the plan gives for it (the limit on each pool): the same TTFT and TPOT."""
    import costmodel
    from costmodel.cli.load_options import flag_arguments
    from costmodel.cli.plan import point_command, pooled
    from costmodel.deploy.planner import price_point
    from costmodel.engine.config import EngineFlags
    from costmodel.engine.layout import Layout

    m, hw = costmodel.load_model("llama-3-8b"), costmodel.load_profile("h100")
    layout = Layout("disagg", prefill_tp=1, prefill_workers=1, decode_tp=1, decode_workers=1)
    flags = dict(max_num_seqs=4, memory_fraction=0.8)
    pt = price_point(
        m,
        hw,
        layout,
        8,
        input_len=512,
        output_len=64,
        engine_name="vllm",
        weight_dtype=None,
        kv_dtype=None,
        targets=(None, None),
        flags=EngineFlags(**flags),
    )
    command = point_command(
        pt.model_dump(mode="json"),
        model="llama-3-8b",
        input_len=512,
        output_len=64,
        engine="vllm",
        weight_dtype=None,
        kv_dtype=None,
        routing=None,
    )
    command += pooled(flag_arguments(flags), "disagg")
    assert "--prefill-max-num-seqs" in command and "--max-num-seqs" not in command
    r = CliRunner().invoke(main, [*command, "--json"])
    assert r.exit_code == 0, r.output
    again = json.loads(r.output)
    assert (again["ttft_s"], again["tpot_s"]) == pytest.approx((pt.ttft_s, pt.tpot_s), rel=1e-9)


def test_vllm_bench_serve_spellings():
    """--random-input-len, --random-output-len and --random-range-ratio R mean --input-len, --output-len and
    --length-dist range --spread 1-R (R = 1: fixed lengths); with --length-dist as well they are refused."""
    bench = run(
        "--concurrency",
        "8",
        "--random-input-len",
        "1024",
        "--random-output-len",
        "128",
        "--random-range-ratio",
        "0.5",
        "--json",
    )
    ours = run(
        "--concurrency",
        "8",
        "--input-len",
        "1024",
        "--output-len",
        "128",
        "--length-dist",
        "range",
        "--spread",
        "0.5",
        "--json",
    )
    assert bench.exit_code == 0 and json.loads(bench.output) == json.loads(ours.output)
    one = run("--concurrency", "8", "--input-len", "1024", "--output-len", "128", "--random-range-ratio", "1", "--json")
    fixed = run("--concurrency", "8", "--input-len", "1024", "--output-len", "128", "--json")
    assert json.loads(one.output) == json.loads(fixed.output)
    both = run(
        "--concurrency",
        "8",
        "--input-len",
        "1024",
        "--output-len",
        "128",
        "--random-range-ratio",
        "0.5",
        "--length-dist",
        "uniform",
    )
    assert both.exit_code == 1 and "--random-range-ratio" in both.output


def test_goodput_counts_the_requests_that_meet_every_objective():
    """Objectives every request meets: goodput is the throughput; none: 0; TTFT at its own p90: about 90% of the
    requests meet it (the p90 is a request's TTFT); a second objective never raises it; the closed form, which has
    no requests, reports none."""
    import costmodel
    from costmodel.engine.load import Load

    m, hw = costmodel.load_model("llama-3-8b"), costmodel.load_profile("h100")
    base = Load(1024, 128, concurrency=64, num_requests=640)
    plain = costmodel.serve(m, hw, base)
    loose = costmodel.serve(m, hw, base.with_(goodput=(("ttft", 100.0), ("tpot", 100.0))))
    tight = costmodel.serve(m, hw, base.with_(goodput=(("tpot", 1e-6),)))
    p90 = costmodel.serve(m, hw, base.with_(goodput=(("ttft", plain.ttft.p90),)))
    both = costmodel.serve(m, hw, base.with_(goodput=(("ttft", plain.ttft.p90), ("tpot", plain.tpot.median))))
    assert loose.goodput_requests_per_s == pytest.approx(plain.requests_per_s)
    assert tight.goodput_requests_per_s == 0
    assert 0.88 * plain.requests_per_s <= p90.goodput_requests_per_s <= 0.93 * plain.requests_per_s
    assert both.goodput_requests_per_s <= p90.goodput_requests_per_s
    closed = costmodel.serve(m, hw, base.with_(goodput=(("ttft", 1.0),)), evaluator="steady-state")
    assert closed.goodput_requests_per_s is None
    r = run("--concurrency", "64", "--input-len", "1024", "--output-len", "128", "--goodput", "ttft:200,tpot:x")
    assert r.exit_code == 2 and "METRIC:MILLISECONDS" in r.output


def test_metric_percentiles_as_vllm_bench_serve_asks():
    """--metric-percentiles 50,90,99 gives each metric's median, p90 and p99 as the report's own statistics give
    them (the same requests), ordered, with p100 the largest (a TTFT no request exceeds); past 100 is refused."""
    r = run(
        "--concurrency",
        "32",
        "--input-len",
        "1024",
        "--output-len",
        "128",
        "--metric-percentiles",
        "50,90,99,100",
        "--json",
    )
    assert r.exit_code == 0, r.output
    p = json.loads(r.output)
    for metric, stats in (("ttft", p["ttft"]), ("tpot", p["tpot"]), ("itl", p["itl"]), ("e2el", p["e2e"])):
        got = p["percentiles"][metric]
        assert (got["p50"], got["p90"], got["p99"]) == pytest.approx((stats["median"], stats["p90"], stats["p99"]))
        assert got["p50"] <= got["p90"] <= got["p99"] <= got["p100"]
    assert p["percentiles"]["ttft"]["p100"] >= p["ttft"]["p99"]
    bad = run("--concurrency", "32", "--input-len", "1024", "--output-len", "128", "--metric-percentiles", "50,190")
    assert bad.exit_code == 1 and "(0, 100]" in bad.output

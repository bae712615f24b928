"""costmodel recommend: the fewest GPUs under targets, checked by pricing the answer and one GPU fewer directly;
launch commands in the engines' documented flags, read back into the same engine."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest
from click.testing import CliRunner

import costmodel
from costmodel.cli.commands import main
from costmodel.deploy.capacity import misses
from costmodel.deploy.disagg import Pool, serve_disaggregated
from costmodel.deploy.launch import engine_settings, flags_of, launch, parse
from costmodel.deploy.recommend import BUDGETS, recommend, units
from costmodel.engine.config import EngineFlags, engine
from costmodel.engine.layout import Layout
from costmodel.engine.load import Load

#: Each engine's launch flags as its own sources declare them (read there, not in costmodel.deploy.launch):
#: vLLM 0.12 vllm/engine/arg_utils.py EngineArgs.add_cli_args (booleans as argparse.BooleanOptionalAction, so
#: --no-X too); SGLang 0.5 python/sglang/srt/server_args.py ServerArgs.add_cli_args; TensorRT-LLM
#: tensorrt_llm/commands/serve.py (NVIDIA/TensorRT-LLM@00209af: the click options of `serve`). A disaggregated
#: worker's role: vLLM's --kv-transfer-config (EngineArgs, KVTransferConfig), SGLang's --disaggregation-mode
#: (ServerArgs.disaggregation_mode).
DOCUMENTED = {
    "vllm": {
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--data-parallel-size",
        "--enable-expert-parallel",
        "--max-num-batched-tokens",
        "--max-num-seqs",
        "--gpu-memory-utilization",
        "--block-size",
        "--max-model-len",
        "--kv-cache-dtype",
        "--quantization",
        "--revision",
        "--kv-transfer-config",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--async-scheduling",
        "--no-async-scheduling",
    },
    "sglang": {
        "--model-path",
        "--tp-size",
        "--pp-size",
        "--dp-size",
        "--enable-dp-attention",
        "--ep-size",
        "--chunked-prefill-size",
        "--max-running-requests",
        "--mem-fraction-static",
        "--page-size",
        "--context-length",
        "--kv-cache-dtype",
        "--quantization",
        "--revision",
        "--disaggregation-mode",
        "--disable-radix-cache",
        "--disable-overlap-schedule",
    },
    "trtllm": {
        "--tp_size",
        "--pp_size",
        "--ep_size",
        "--max_batch_size",
        "--max_num_tokens",
        "--max_seq_len",
        "--kv_cache_free_gpu_memory_fraction",
        "--enable_chunked_prefill",
    },
    # ROCm/ATOM atom/model_engine/arg_utils.py EngineArgs.add_cli_args @0027562, every flag it declares
    "atom": {
        "--model",
        "--tensor-parallel-size",
        "--data-parallel-size",
        "--enforce-eager",
        "--enable_prefix_caching",
        "--port",
        "--kv_cache_dtype",
        "--block-size",
        "--max-model-len",
        "--cudagraph-capture-sizes",
        "--level",
        "--load_dummy",
        "--enable-expert-parallel",
        "--torch-profiler-dir",
        "--enable-dp-attention",
        "--method",
        "--num-speculative-tokens",
        "--max-num-batched-tokens",
        "--max-num-seqs",
        "--gpu-memory-utilization",
    },
}


@pytest.fixture(scope="module")
def contract():
    args = [
        "recommend",
        "--model",
        "llama-3.1-70b",
        "--gpu",
        "h100",
        "--gpu",
        "h200",
        "--input-len",
        "2048",
        "--output-len",
        "512",
        "--request-rate",
        "10",
        "--ttft-ms",
        "2000",
        "--tpot-ms",
        "50",
        "--json",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_the_answer_reprices_within_the_targets(contract):
    assert {"gpu", "gpus", "command", "launch"} <= set(contract)
    assert contract["gpu"] in ("h100_sxm", "h200_sxm") and isinstance(contract["gpus"], int)
    assert contract["command"][0] == "predict" and isinstance(contract["launch"], str)
    again = CliRunner().invoke(main, [*contract["command"], "--json"])
    assert again.exit_code == 0, again.output
    p = json.loads(again.output)
    assert p["ttft_s"] <= 2.0 and p["tpot_s"] <= 0.05 and not p["overloaded"]
    devices = p["devices"] if contract["mode"] == "disagg" else p["tp"] * p["replicas"]
    assert p["request_rate"] == 10 and devices == contract["gpus"]


def test_a_disaggregated_answer_less_a_worker_in_either_pool_misses():
    """Sized in closed form, simulated whole and trimmed: priced directly the answer's pools meet the targets, and
    a prefill worker fewer or a decode worker fewer does not."""
    m, hw = costmodel.load_model("llama-3.1-70b"), costmodel.load_profile("h200")
    requests = Load(2048, 512, request_rate=10.0)
    rec = recommend(m, [hw], requests, ttft_s=2.0, tpot_s=0.05)
    assert (
        rec.mode == "disagg" and rec.gpus == rec.prefill_workers * rec.prefill_tp + rec.decode_workers * rec.decode_tp
    )

    def priced(prefill_workers, decode_workers):
        return serve_disaggregated(
            m,
            hw,
            requests,
            prefill=Pool(tp=rec.prefill_tp, workers=prefill_workers),
            decode=Pool(tp=rec.decode_tp, workers=decode_workers),
        )

    answer = priced(rec.prefill_workers, rec.decode_workers)
    assert not answer.overloaded and misses(answer, "mean", 0.05, 2.0) is None
    assert answer.ttft_s == rec.at.ttft_s and answer.tpot_s == rec.at.tpot_s
    for fewer in ((rec.prefill_workers - 1, rec.decode_workers), (rec.prefill_workers, rec.decode_workers - 1)):
        if min(fewer) >= 1:
            p = priced(*fewer)
            assert p.overloaded or misses(p, "mean", 0.05, 2.0), fewer
    # the launch: one line per pool, each flag in the engine's own sources, read back as the pool's engine
    lines = rec.launch.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["prefill", "decode"]
    for line, tp in zip(lines, (rec.prefill_tp, rec.decode_tp)):
        argv = shlex.split(line.split(": ", 1)[1])
        assert {a for a in argv if a.startswith("--")} <= DOCUMENTED["vllm"]
        assert argv[argv.index("--kv-transfer-config") + 1] == '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
        assert parse(argv)[2].tp == tp


@pytest.mark.parametrize(
    "engine_name, requests, why",
    [
        ("vllm", Load(1024, 256, concurrency=64), "a closed loop"),
        ("trtllm", Load(1024, 256, request_rate=5.0), "YAML"),
    ],
)
def test_disaggregated_pools_are_searched_for_a_rate_on_engines_launched_by_flags(engine_name, requests, why):
    m, hws = costmodel.load_model("llama-3-8b"), [costmodel.load_profile("h100")]
    rec = recommend(m, hws, requests, engine_name=engine_name, tpot_s=0.03)
    assert rec.mode == "agg" and not [c for c in rec.candidates if c.mode == "disagg"]
    assert any("disaggregated pools not searched" in a and why in a for a in rec.assumptions)
    searched = recommend(m, hws, requests.with_(concurrency=None, request_rate=5.0), tpot_s=0.03)
    assert [c for c in searched.candidates if c.mode == "disagg"]


def _fewer_fails(rec, m, hws, requests, statistic, evaluator, targets):
    """Every unit searched, on every device kind and at every token budget searched, with as many replicas as one
    GPU fewer than the answer holds (the most that share the load evenly), priced directly: each misses a target
    or is overloaded."""
    for hw, budget in ((hw, b) for hw in hws for b in (None, *BUDGETS)):
        flags = EngineFlags(max_num_batched_tokens=budget)
        for unit in units(m, rec.gpus - 1):
            r = (rec.gpus - 1) // unit.devices
            if requests.concurrency:
                while r and requests.concurrency % r:
                    r -= 1
            if not r:
                continue
            try:
                p = costmodel.serve(m, hw, requests, layout=replace(unit, replicas=r), evaluator=evaluator, flags=flags)
            except costmodel.CostModelError:
                continue  # a layout the model cannot take
            missed = misses(p, statistic, targets.get("tpot_s"), targets.get("ttft_s"))
            assert p.overloaded or missed, (hw.id, unit, r, budget)


@pytest.mark.parametrize(
    "requests,targets",
    [
        (Load(1024, 256, request_rate=30.0), dict(tpot_s=0.02)),
        (Load(1024, 256, concurrency=96), dict(ttft_s=0.5, tpot_s=0.02)),
    ],
    ids=["open loop", "closed loop"],
)
def test_one_gpu_fewer_misses_the_targets_means(requests, targets):
    m, hws = costmodel.load_model("llama-3-8b"), [costmodel.load_profile("h100"), costmodel.load_profile("a100")]
    rec = recommend(m, hws, requests, **targets)
    assert rec.gpus >= 2 and not misses(rec.at, "mean", targets.get("tpot_s"), targets.get("ttft_s"))
    _fewer_fails(rec, m, hws, requests, "mean", "steady-state", targets)


def test_one_gpu_fewer_misses_the_targets_p90_simulated():
    m, hws = costmodel.load_model("llama-3-8b"), [costmodel.load_profile("h100")]
    requests = Load(512, 128, request_rate=40.0, num_requests=300)
    targets = dict(tpot_s=0.012)
    rec = recommend(m, hws, requests, statistic="p90", max_gpus=8, **targets)
    assert rec.evaluator == "simulation" and rec.at.tpot.p90 <= 0.012
    _fewer_fails(rec, m, hws, requests, "p90", "simulation", targets)


#: (layout, settings) of the launch commands tried, and what TensorRT-LLM takes only in its YAML options (tried on
#: the other engines alone).
LAUNCHES = {
    "tp": (Layout(tp=4), {}),
    "pp": (Layout(tp=2, pipeline_parallel=2), dict(max_num_seqs=64, max_num_batched_tokens=4096)),
    "ep": (Layout(tp=8, expert_parallel=True), dict(memory_fraction=0.8, max_model_len=8192)),
    "attention dp": (Layout(tp=1, attention_dp=4, expert_parallel=True), dict(async_scheduling=False)),
    "switches": (Layout(tp=2), dict(prefix_caching=False, async_scheduling=True, page_size=32)),
}
YAML_ONLY = {("trtllm", "attention dp"), ("trtllm", "switches")}
#: What ATOM 0.1 has no flag for: pipeline stages, a page size of 32 (its blocks are multiples of 16: it has one),
#: the overlap scheduler
NO_FLAG = {("atom", "pp"), ("atom", "switches")}
CASES = [(e, k) for e in ("vllm", "sglang", "trtllm", "atom") for k in LAUNCHES if (e, k) not in YAML_ONLY | NO_FLAG]


@pytest.mark.parametrize("engine_name,case", CASES, ids=[f"{e}-{k}" for e, k in CASES])
def test_launch_commands_use_documented_flags_and_read_back(engine_name, case):
    """The command's flags are all in the engine's own sources; parsed back, it states the same layout, and the
    engine set up from what it states is the one the prediction assumed."""
    layout, settings = LAUNCHES[case]
    hw = costmodel.load_profile("h100")
    default = engine(engine_name, capacity_bytes=hw.engine_memory, device_name=hw.name, tp=layout.tp)
    flags = flags_of(settings)
    resolved = default.with_flags(**flags.settings())
    argv = launch(engine_name, "acme/model", layout, engine_settings(resolved), engine_settings(default), "fp8")
    named = {a for a in argv if a.startswith("--")}
    assert named <= DOCUMENTED[engine_name], named - DOCUMENTED[engine_name]
    name, model, back, stated, kv = parse(shlex.split(shlex.join(argv)))
    assert (name, model) == (engine_name, "acme/model")
    assert (back.tp, back.attention_dp, back.pipeline_parallel, back.expert_parallel) == (
        layout.tp,
        layout.attention_dp,
        layout.pipeline_parallel,
        layout.expert_parallel,
    )
    assert default.with_flags(**flags_of(stated).settings()) == resolved
    assert kv == ("fp8" if engine_name != "trtllm" else None)


@pytest.mark.parametrize(
    "extra,said",
    [
        (["--tpot-ms", "50"], "--request-rate R or --concurrency C"),
        (["--request-rate", "5"], "needs a target"),
        (["--request-rate", "100000", "--tpot-ms", "1", "--max-gpus", "8"], "serves"),
    ],
)
def test_a_recommendation_it_cannot_make_is_one_error_line(extra, said):
    r = CliRunner().invoke(
        main,
        ["recommend", "--model", "llama-3-8b", "--gpu", "h100", "--input-len", "512", "--output-len", "64", *extra],
    )
    assert r.exit_code == 1 and said in r.output and "Traceback" not in r.output


def test_what_tensorrt_llm_takes_only_in_yaml_is_refused_by_name():
    hw = costmodel.load_profile("h100")
    default = engine("trtllm", capacity_bytes=hw.engine_memory, device_name=hw.name, tp=2)
    with pytest.raises(costmodel.CostModelError, match="page_size"):
        launch("trtllm", "acme/m", Layout(tp=2), engine_settings(default) | {"page_size": 16}, engine_settings(default))
    with pytest.raises(costmodel.CostModelError, match="YAML"):
        launch("trtllm", "acme/m", Layout(tp=1, attention_dp=2), engine_settings(default), engine_settings(default))


def test_a_recommendation_with_engine_flags_reprices_from_its_command():
    """Engine flags given to recommend ride into its command under predict's own names and reprice the answer
    within the targets."""
    args = [
        "recommend",
        "--model",
        "llama-3-8b",
        "--gpu",
        "h100",
        "--input-len",
        "1024",
        "--output-len",
        "256",
        "--request-rate",
        "20",
        "--tpot-ms",
        "20",
        "--max-num-seqs",
        "64",
        "--gpu-memory-utilization",
        "0.8",
        "--no-enable-prefix-caching",
        "--json",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    rec = json.loads(r.output)
    assert {"--max-num-seqs", "--gpu-memory-utilization", "--no-enable-prefix-caching"} <= set(rec["command"])
    again = CliRunner().invoke(main, [*rec["command"], "--json"])
    assert again.exit_code == 0, again.output
    p = json.loads(again.output)
    assert p["tpot_s"] <= 0.02 and p["engine"]["max_num_seqs"] == 64 and p["engine"]["memory_fraction"] == 0.8


def test_a_disaggregated_answer_under_a_sequence_limit_launches_and_reprices_with_it():
    """--max-num-seqs given to recommend is each pool's limit: every worker's launch line states it, and the
    command's --prefill-max-num-seqs and --decode-max-num-seqs reprice the answer within its targets."""
    args = ["recommend", "--model", "llama-3.1-70b", "--gpu", "h200", "--input-len", "2048", "--output-len", "512"]
    args += ["--request-rate", "10", "--ttft-ms", "2000", "--tpot-ms", "50", "--max-num-seqs", "512", "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    rec = json.loads(r.output)
    assert rec["mode"] == "disagg"
    for line in rec["launch"].splitlines():
        argv = shlex.split(line.split(": ", 1)[1])
        assert argv[argv.index("--max-num-seqs") + 1] == "512"
    again = CliRunner().invoke(main, [*rec["command"], "--json"])
    assert again.exit_code == 0, again.output
    p = json.loads(again.output)
    assert p["ttft_s"] <= 2.0 and p["tpot_s"] <= 0.05 and not p["overloaded"]
    assert p["prefill"]["max_num_seqs"] == p["decode"]["max_num_seqs"] == 512

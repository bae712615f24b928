"""The layout planner: the layouts it enumerates counted by hand, its front checked for dominance by brute force,
every front point re-priced alone through the engine model, the best under targets, and the command's errors."""

import json

import numpy as np
import pytest

import costmodel
from costmodel import Layout, Load
from costmodel.deploy.disagg import Pool, serve_disaggregated
from costmodel.deploy.planner import layouts, plan
from costmodel.engine.served import serve


@pytest.fixture(scope="module")
def small_plan():
    m, hw = costmodel.load_model("llama-3.1-8b"), costmodel.load_profile("h100")
    return m, hw, plan(m, [hw], devices=4, input_len=1024, output_len=64, tpot_s=0.012, max_concurrency=64)


def test_layouts_counted_by_hand():
    """4 devices, a dense model: TP1 x 4, TP2 x 2, TP4 x 1; pipelines TP1 x PP4, TP2 x PP2; disaggregated (prefill workers x TP, decode workers x
    TP): 1x1+3x1, 2x1+2x1, 3x1+1x1, 2x1+1x2, 1x2+2x1, 1x2+1x2: nine. A mixture of experts adds the expert-parallel
    twin of every layout whose tensor-parallel groups have 2 or more devices, and attention data parallel (DP4 x TP1,
    DP2 x TP2: the experts over all four, whole or each sharded by width), and a decode pool of one worker of
    attention data parallel groups (whole or width-sharded experts)
    wherever its devices make more than one group (1P x TP1 + DP3 x TP1, 2P x TP1 + DP2 x TP1, 1P x TP2 + DP2 x
    TP1)."""
    dense = layouts(costmodel.load_model("llama-3.1-8b"), 4)
    assert len(dense) == 11 and all(lay.devices == 4 for lay in dense)
    assert {lay.describe() for lay in dense if lay.pipeline_parallel > 1} == {"TP1 x PP4", "TP2 x PP2"}
    assert {lay.describe() for lay in dense if lay.mode == "disagg"} == {
        "1P x TP1 + 3D x TP1",
        "2P x TP1 + 2D x TP1",
        "3P x TP1 + 1D x TP1",
        "2P x TP1 + 1D x TP2",
        "1P x TP2 + 2D x TP1",
        "1P x TP2 + 1D x TP2",
    }
    moe = layouts(costmodel.load_model("Qwen/Qwen3-235B-A22B"), 4)
    # + TP2 x 2 EP, TP4 EP, 1P x TP2 + 1D x TP2 EP, TP2 x PP2 EP; DP4 x TP1 (EP or not), DP2 x TP2 (EP or not)
    assert len(moe) == 11 + 4 + 4 + 6
    assert {lay.describe() for lay in moe if lay.attention_dp > 1} == {
        "DP4 x TP1 EP",
        "DP2 x TP2 EP",
        "DP4 x TP1",
        "DP2 x TP2",
    }
    assert {lay.describe() for lay in moe if lay.decode_attention_dp > 1} == {
        f"{pools}{ep}"
        for pools in ("1P x TP1 + 1D x DP3 x TP1", "2P x TP1 + 1D x DP2 x TP1", "1P x TP2 + 1D x DP2 x TP1")
        for ep in ("", " EP")
    }
    assert all(lay.devices == 4 for lay in moe)


def test_front_is_not_dominated(small_plan):
    _, _, p = small_plan
    assert p.front
    for f in p.front:
        assert f in p.points
        assert not any(
            q.output_tokens_per_s_per_device >= f.output_tokens_per_s_per_device
            and q.output_tokens_per_s_per_user >= f.output_tokens_per_s_per_user
            and (q.output_tokens_per_s_per_device, q.output_tokens_per_s_per_user)
            != (f.output_tokens_per_s_per_device, f.output_tokens_per_s_per_user)
            for q in p.points
        )
    # every simulated point is on the front or beaten on both axes by one of it
    for q in p.points:
        assert q in p.front or any(
            f.output_tokens_per_s_per_device >= q.output_tokens_per_s_per_device
            and f.output_tokens_per_s_per_user >= q.output_tokens_per_s_per_user
            for f in p.front
        )


def test_front_points_repriced_alone(small_plan):
    """A front point's numbers are those of serving its layout alone, with the same load, through serve()."""
    m, hw, p = small_plan
    for f in p.front:
        if f.mode == "agg":
            r = serve(
                m,
                hw,
                Load(concurrency=f.concurrency // f.replicas, input_len=1024, output_len=64),
                layout=Layout(tp=f.tp, expert_parallel=f.expert_parallel, attention_dp=f.attention_dp),
            )
        else:
            r = serve_disaggregated(
                m,
                hw,
                Load(input_len=1024, output_len=64, concurrency=f.concurrency),
                prefill=Pool(tp=f.prefill_tp, workers=f.prefill_workers),
                decode=Pool(tp=f.decode_tp, workers=f.decode_workers),
            )
        assert (r.ttft_s, r.tpot_s) == (f.ttft_s, f.tpot_s)
        assert r.output_tokens_per_s_per_device == pytest.approx(f.output_tokens_per_s_per_device, rel=1e-12)


def test_best_meets_the_targets(small_plan):
    _, _, p = small_plan
    (b,) = p.best
    assert b.tpot_s <= 0.012 and b.meets_targets
    assert all(
        q.output_tokens_per_s_per_device <= b.output_tokens_per_s_per_device for q in p.points if q.meets_targets
    )
    assert any(not q.meets_targets for q in p.points)  # the target binds somewhere


def test_plan_command(run_cli, tmp_path):
    args = [
        "plan",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--gpus",
        "2",
        "--input-len",
        "512",
        "--output-len",
        "32",
        "--max-concurrency",
        "16",
    ]
    r = run_cli(*args, "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["devices"] == 2 and got["front"] and all(f["device"] == "h100_sxm" for f in got["front"])
    out = tmp_path / "front.png"
    r = run_cli(*args, "--gpu", "a100", "--plot", str(out))
    assert r.exit_code == 0 and out.stat().st_size > 0 and "a100_80gb_sxm: the front" in r.output
    base = [a for a in args if a not in ("--gpus", "2")]
    for bad, says in ((["--gpus", "0"], "--gpus"), (["--gpus", "2", "--tpot-ms", "-1"], "--tpot-ms")):
        r = run_cli(*base, *bad)
        assert r.exit_code != 0 and "Error:" in r.output and says in r.output and "Traceback" not in r.output, r.output
    r = run_cli(*[a if a != "llama-3.1-8b" else "nope-1b" for a in args])
    assert r.exit_code != 0 and r.output.startswith("Error:") and "nope-1b" in r.output
    big = tmp_path / "none.png"
    r = run_cli(
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100",
        "--gpus",
        "2",
        "--input-len",
        "512",
        "--output-len",
        "32",
        "--plot",
        str(big),
    )
    assert r.exit_code != 0 and "no layout" in r.output and not big.exists()


def test_every_front_point_carries_the_command_that_prices_it_alone(run_cli):
    """Each point of the front (aggregated with replicas, disaggregated pools, one tensor-parallel group) and the best
    under the targets name the ``costmodel predict`` arguments of that layout under its clients; run, they print the
    point's TTFT and TPOT."""
    r = run_cli(
        "plan",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--gpus",
        "4",
        "--input-len",
        "2048",
        "--output-len",
        "64",
        "--max-concurrency",
        "16",
        "--tpot-ms",
        "8",
        "--json",
    )
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    commands = [" ".join(p["command"]) for p in got["front"]]
    assert any("--replicas" in c for c in commands) and any("--disaggregated" in c for c in commands)
    for point in got["front"] + got["best"]:
        again = run_cli(*point["command"], "--json")
        assert again.exit_code == 0, again.output
        alone = json.loads(again.output)
        assert (alone["ttft_s"], alone["tpot_s"]) == (point["ttft_s"], point["tpot_s"])


def test_a_points_decode_step_is_its_engines_decode_iteration(run_cli):
    """An aggregated point's ``step_command`` prices one decode step of each replica's clients at the mean context:
    the same time (within the iteration table's interpolation) as the served engine's decode-only iteration of that
    batch and context, which the simulation interpolates from its grid."""
    from costmodel.engine.config import engine
    from costmodel.engine.served import Setup
    from costmodel.model.pricing import pricing

    r = run_cli(
        "plan",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--gpus",
        "2",
        "--input-len",
        "1024",
        "--output-len",
        "128",
        "--max-concurrency",
        "32",
        "--json",
    )
    got = json.loads(r.output)
    m, hw = costmodel.load_model("llama-3.1-8b"), costmodel.load_profile("h100")
    checked = 0
    for point in got["front"]:
        if point["mode"] != "agg":  # a decode worker's step: test_a_decoding_engines_step_is_its_decode_iteration
            continue
        assert point["step_command"] is not None
        step = json.loads(run_cli(*point["step_command"], "--json").output)
        batch, context = point["concurrency"] // point["replicas"], 1024 + 64
        assert step["workload"]["batch"] == batch and step["workload"]["context"] == context
        eng = engine("vllm", capacity_bytes=hw.engine_memory, device_name=hw.name, tp=point["tp"])
        table = Setup(m, pricing(m, hw, tp=point["tp"]), eng, max_context=1024 + 128).table
        iteration = float(table.decode_run(batch, batch * context, 1, None)[0])
        assert step["decode"]["time_s"] == pytest.approx(iteration, rel=0.01), point["layout"]
        checked += 1
    assert checked >= 3


def test_the_memory_limit_is_where_the_cache_cannot_hold_the_clients():
    """Llama 3.1 70B on two H100s, 4,096 + 1,024 tokens: a point is marked at its memory limit only if its clients'
    requests could not all be held whole with room for one more, and is marked wherever their prompts alone overflow
    the cache (the engine's KV tokens, as its own prediction states them)."""
    m, hw = costmodel.load_model("llama-3.1-70b"), costmodel.load_profile("h100")
    p = plan(m, [hw], devices=2, input_len=4096, output_len=1024, max_concurrency=64)
    request = 4096 + 1024
    marked = set()
    for q in p.points:
        assert q.mode == "agg" and q.replicas == 1
        kv_tokens = serve(
            m,
            hw,
            Load(concurrency=q.concurrency, input_len=4096, output_len=1024),
            layout=Layout(tp=q.tp),
            evaluator="steady-state",
        ).engine.kv_cache_tokens
        if (q.concurrency + 1) * request <= kv_tokens:
            assert not q.kv_cache_full, q
        if q.concurrency * 4096 > kv_tokens:
            assert q.kv_cache_full, q
        if q.kv_cache_full:
            marked.add(q.concurrency)
    assert marked and min(q.concurrency for q in p.points) not in marked  # one client fits, many do not


def test_a_points_range_moves_it_along_its_ray():
    """A served point's p10-p90 range on the front, by hand: TTFT 1 s (0.5-2 s), TPOT 0.1 s (0.05-0.2 s), 11 output
    tokens: end-to-end 2 s (1-4 s), so both rates, which go as one over it in a closed loop, span 0.5x to 2x."""
    from costmodel.render.plan_figure import draw_plan, rate_range

    point = {
        "ttft_s": 1.0,
        "tpot_s": 0.1,
        "ttft_band": {"low_s": 0.5, "high_s": 2.0},
        "tpot_band": {"low_s": 0.05, "high_s": 0.2},
    }
    assert rate_range(point, 11) == pytest.approx((0.5, 2.0))
    assert rate_range({**point, "tpot_band": None}, 11) is None
    # drawn: the shaded polygon's corners are the front's points scaled by their factors
    m, hw = costmodel.load_model("llama-3.1-8b"), costmodel.load_profile("h100")
    data = plan(m, [hw], devices=1, input_len=512, output_len=32, max_concurrency=8).model_dump(mode="json")
    fig = draw_plan(data)
    (shade,) = [a for a in fig.axes[0].patches if a.get_gid() == "band:h100_sxm"]
    front = sorted(data["front"], key=lambda q: q["output_tokens_per_s_per_user"])
    want = [
        (
            q["output_tokens_per_s_per_user"] * rate_range(q, 32)[0],
            q["output_tokens_per_s_per_device"] * rate_range(q, 32)[0],
        )
        for q in front
    ]
    np.testing.assert_allclose(shade.get_xy()[: len(front)], want, rtol=1e-9)


@pytest.mark.parametrize(
    "model,point",
    [
        (
            "mixtral-8x7b",
            {
                "mode": "agg",
                "tp": 2,
                "replicas": 1,
                "attention_dp": 1,
                "pipeline_parallel": 1,
                "expert_parallel": True,
                "concurrency": 8,
            },
        ),
        (
            "mixtral-8x7b",
            {
                "mode": "agg",
                "tp": 1,
                "replicas": 1,
                "attention_dp": 2,
                "pipeline_parallel": 1,
                "expert_parallel": True,
                "concurrency": 16,
            },
        ),
        (
            "llama-3.1-8b",
            {
                "mode": "disagg",
                "decode_tp": 2,
                "decode_workers": 2,
                "decode_attention_dp": 1,
                "attention_dp": 1,
                "pipeline_parallel": 1,
                "expert_parallel": False,
                "concurrency": 16,
            },
        ),
    ],
    ids=["expert parallel", "attention data parallel", "a disaggregated decode worker"],
)
def test_a_decoding_engines_step_is_its_decode_iteration(run_cli, model, point):
    """The decode step a point links (an expert-parallel replica; one of two attention-data-parallel groups, the
    other running as many sequences; a disaggregated decode worker with its share of the clients) is that engine's
    decode-only iteration: the same time as the served engine's table interpolates for that batch and context, the
    experts spread over the devices where the point's are."""
    from costmodel.cli.plan import step_command
    from costmodel.engine.config import engine
    from costmodel.engine.served import Setup
    from costmodel.model.pricing import pricing

    m, hw = costmodel.load_model(model), costmodel.load_profile("h100")
    cmd = step_command(
        {**point, "device": hw.id},
        m,
        model=model,
        input_len=1024,
        output_len=128,
        engine="vllm",
        weight_dtype=None,
        kv_dtype=None,
        routing=None,
    )
    step = json.loads(run_cli(*cmd, "--json").output)
    agg = point["mode"] == "agg"
    tp, engines, dp = (point["tp"], 1, point["attention_dp"]) if agg else (2, 2, 1)
    batch, context = point["concurrency"] // (engines * dp), 1024 + 64
    assert (
        step["workload"]["batch"],
        step["workload"]["context"],
        step["workload"]["tp"],
        step["workload"]["attention_dp"],
    ) == (batch, context, tp, dp)
    eng = engine("vllm", capacity_bytes=hw.engine_memory, device_name=hw.name, tp=tp)
    pr = pricing(m, hw, tp=tp, expert_parallel=point["expert_parallel"], attention_dp=dp)
    table = Setup(m, pr, eng, max_context=1024 + 128).table
    iteration = float(table.decode_run(batch, batch * context, 1, batch if dp > 1 else None)[0])
    assert step["decode"]["time_s"] == pytest.approx(iteration, rel=0.01)
    # pipeline stages run several micro-batches an iteration: no one step to link
    assert (
        step_command(
            {**point, "device": hw.id, "pipeline_parallel": 2},
            m,
            model=model,
            input_len=1024,
            output_len=128,
            engine="vllm",
            weight_dtype=None,
            kv_dtype=None,
            routing=None,
        )
        is None
    )


def test_a_plan_past_its_stated_maximum_is_refused_before_any_work():
    """`--gpus 1099511627776` was accepted and searched; past 256 devices a plan is an Error line at once."""
    from click.testing import CliRunner

    from costmodel.cli.commands import main
    from costmodel.deploy.planner import MAX_PLAN_DEVICES

    args = ["plan", "--gpu", "h100", "--model", "llama-3-8b", "--input-len", "512", "--output-len", "64"]
    result = CliRunner().invoke(main, [*args, "--gpus", "1099511627776"])
    assert result.exit_code == 1 and MAX_PLAN_DEVICES == 256
    assert result.output.strip() == "Error: devices must be an integer from 1 to 256, got 1099511627776"

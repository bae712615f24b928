"""The layout planner: the layouts it enumerates counted by hand, its front checked for dominance by brute force,
every front point re-priced alone through the engine model, the best under targets, and the command's errors."""

import json

import pytest

import costmodel
from costmodel.disagg import Pool, serve_disaggregated
from costmodel.planner import layouts, plan
from costmodel.served import serve


@pytest.fixture(scope="module")
def small_plan():
    m, hw = costmodel.load_model("llama-3.1-8b"), costmodel.load_profile("h100")
    return m, hw, plan(m, [hw], devices=4, input_len=1024, output_len=64, tpot_s=0.012, max_concurrency=64)


def test_layouts_counted_by_hand():
    """4 devices, a dense model: TP1 x 4, TP2 x 2, TP4 x 1; pipelines TP1 x PP4, TP2 x PP2; disaggregated (prefill workers x TP, decode workers x
    TP): 1x1+3x1, 2x1+2x1, 3x1+1x1, 2x1+1x2, 1x2+2x1, 1x2+1x2: nine. A mixture of experts adds the expert-parallel
    twin of every layout whose tensor-parallel groups have 2 or more devices, and attention data parallel (DP4 x TP1,
    DP2 x TP2: the experts over all four), and a decode pool of one worker of attention data parallel groups
    wherever its devices make more than one group (1P x TP1 + DP3 x TP1, 2P x TP1 + DP2 x TP1, 1P x TP2 + DP2 x
    TP1)."""
    dense = layouts(costmodel.load_model("llama-3.1-8b"), 4)
    assert len(dense) == 11 and all(lay.devices == 4 for lay in dense)
    assert {lay.describe() for lay in dense if lay.pipeline_parallel > 1} == {"TP1 x PP4", "TP2 x PP2"}
    assert {lay.describe() for lay in dense if lay.mode == "disagg"} == {
        "1P x TP1 + 3D x TP1", "2P x TP1 + 2D x TP1", "3P x TP1 + 1D x TP1", "2P x TP1 + 1D x TP2",
        "1P x TP2 + 2D x TP1", "1P x TP2 + 1D x TP2"}
    moe = layouts(costmodel.load_model("Qwen/Qwen3-235B-A22B"), 4)
    # + TP2 x 2 EP, TP4 EP, 1P x TP2 + 1D x TP2 EP, TP2 x PP2 EP; DP4 x TP1 EP, DP2 x TP2 EP
    assert len(moe) == 11 + 4 + 2 + 3
    assert {lay.describe() for lay in moe if lay.attention_dp > 1} == {"DP4 x TP1 EP", "DP2 x TP2 EP"}
    assert {lay.describe() for lay in moe if lay.decode_attention_dp > 1} == {
        "1P x TP1 + 1D x DP3 x TP1 EP", "2P x TP1 + 1D x DP2 x TP1 EP", "1P x TP2 + 1D x DP2 x TP1 EP"}
    assert all(lay.devices == 4 for lay in moe)


def test_front_is_not_dominated(small_plan):
    _, _, p = small_plan
    assert p.front
    for f in p.front:
        assert f in p.points
        assert not any(q.output_tokens_per_s_per_device >= f.output_tokens_per_s_per_device
                       and q.output_tokens_per_s_per_user >= f.output_tokens_per_s_per_user
                       and (q.output_tokens_per_s_per_device, q.output_tokens_per_s_per_user)
                       != (f.output_tokens_per_s_per_device, f.output_tokens_per_s_per_user)
                       for q in p.points)
    # every simulated point is on the front or beaten on both axes by one of it
    for q in p.points:
        assert q in p.front or any(f.output_tokens_per_s_per_device >= q.output_tokens_per_s_per_device
                                   and f.output_tokens_per_s_per_user >= q.output_tokens_per_s_per_user
                                   for f in p.front)


def test_front_points_repriced_alone(small_plan):
    """A front point's numbers are those of serving its layout alone, with the same load, through serve()."""
    m, hw, p = small_plan
    for f in p.front:
        if f.mode == "agg":
            r = serve(m, hw, tp=f.tp, concurrency=f.concurrency // f.replicas, input_len=1024, output_len=64,
                      expert_parallel=f.expert_parallel, attention_dp=f.attention_dp)
        else:
            r = serve_disaggregated(m, hw, input_len=1024, output_len=64, concurrency=f.concurrency,
                                    prefill=Pool(tp=f.prefill_tp, workers=f.prefill_workers),
                                    decode=Pool(tp=f.decode_tp, workers=f.decode_workers))
        assert (r.ttft_s, r.tpot_s) == (f.ttft_s, f.tpot_s)
        assert r.output_tokens_per_s_per_device == pytest.approx(f.output_tokens_per_s_per_device, rel=1e-12)


def test_best_meets_the_targets(small_plan):
    _, _, p = small_plan
    (b,) = p.best
    assert b.tpot_s <= 0.012 and b.meets_targets
    assert all(q.output_tokens_per_s_per_device <= b.output_tokens_per_s_per_device
               for q in p.points if q.meets_targets)
    assert any(not q.meets_targets for q in p.points)  # the target binds somewhere


def test_plan_command(run_cli, tmp_path):
    args = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--input-len", "512",
            "--output-len", "32", "--max-concurrency", "16"]
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
    r = run_cli("plan", "--model", "deepseek-v3", "--gpu", "h100", "--gpus", "2", "--input-len", "512",
                "--output-len", "32", "--plot", str(big))
    assert r.exit_code != 0 and "no layout" in r.output and not big.exists()


def test_every_front_point_carries_the_command_that_prices_it_alone(run_cli):
    """Each point of the front (aggregated with replicas, disaggregated pools, one tensor-parallel group) and the best
    under the targets name the ``costmodel predict`` arguments of that layout under its clients; run, they print the
    point's TTFT and TPOT."""
    r = run_cli("plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "4", "--input-len", "1024",
                "--output-len", "64", "--max-concurrency", "16", "--tpot-ms", "8", "--json")
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
    from costmodel.engines import engine
    from costmodel.model_step import pricing
    from costmodel.served import Setup

    r = run_cli("plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--input-len", "1024",
                "--output-len", "128", "--max-concurrency", "32", "--json")
    got = json.loads(r.output)
    m, hw = costmodel.load_model("llama-3.1-8b"), costmodel.load_profile("h100")
    checked = 0
    for point in got["front"]:
        if point["step_command"] is None:
            assert point["mode"] != "agg"
            continue
        step = json.loads(run_cli(*point["step_command"], "--json").output)
        batch, context = point["concurrency"] // point["replicas"], 1024 + 64
        assert step["workload"]["batch"] == batch and step["workload"]["context"] == context
        eng = engine("vllm", capacity_bytes=hw.engine_memory, device_name=hw.name, tp=point["tp"])
        table = Setup(m, pricing(m, hw, tp=point["tp"]), eng, max_context=1024 + 128).table
        iteration = float(table.decode_run(batch, batch * context, 1, None)[0])
        assert step["decode"]["time_s"] == pytest.approx(iteration, rel=0.01), point["layout"]
        checked += 1
    assert checked >= 3

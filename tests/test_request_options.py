"""The requests' options predict takes (lengths drawn, their count and warm-up, an open loop's burstiness, the front
end) work on plan, capacity and recommend, and ride into the commands that reprice their answers."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import costmodel
from costmodel.cli.commands import main
from costmodel.deploy.capacity import load_capacity
from costmodel.engine.load import Load

LLAMA = ["--model", "llama-3-8b", "--gpu", "h100", "--input-len", "1024", "--output-len", "128"]
DRAWN = ["--random-range-ratio", "0.5", "--frontend", "engine"]


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_capacity_takes_the_requests_lengths_as_the_api_does():
    """--random-range-ratio 0.5 is lengths drawn uniformly from half the length up to it: the API's Load of a
    range spread 0.5 gives the same clients; fixed lengths give others."""
    drawn = run("capacity", *LLAMA, "--tpot-ms", "20", "--random-range-ratio", "0.5", "--json")
    fixed = run("capacity", *LLAMA, "--tpot-ms", "20", "--json")
    m, hw = costmodel.load_model("llama-3-8b"), costmodel.load_profile("h100")
    api = load_capacity(m, [hw], Load(1024, 128, input_dist="range", output_dist="range", spread=0.5), tpot_s=0.02)
    assert [p["concurrency"] for p in drawn["points"]] == [p.concurrency for p in api.points]
    assert [p["concurrency"] for p in drawn["points"]] != [p["concurrency"] for p in fixed["points"]]


def test_recommend_reprices_with_the_same_requests():
    rec = run("recommend", *LLAMA, "--request-rate", "20", "--tpot-ms", "20", *DRAWN, "--json")
    command = rec["command"]
    assert command[command.index("--random-range-ratio") + 1] == "0.5" and "engine" in command
    again = run(*command, "--json")
    assert again["tpot_s"] == pytest.approx(rec["at"]["tpot_s"]) and again["tpot_s"] <= 0.02
    assert again["ttft_s"] == pytest.approx(rec["at"]["ttft_s"])


def test_a_plans_points_reprice_with_the_same_requests():
    """The front end's latency is in every TTFT: the engine's own server (--frontend engine) is quicker than
    Dynamo's, so each point's TTFT falls; each point's command, which names it, gives the point's numbers."""
    base = ["plan", *LLAMA, "--gpus", "2", "--max-concurrency", "8", "--json"]
    own, dynamo = run(*base, *DRAWN), run(*base, "--random-range-ratio", "0.5")
    assert min(p["ttft_s"] for p in own["points"]) < min(p["ttft_s"] for p in dynamo["points"])
    point = own["front"][0]
    assert "--frontend" in point["command"] and "--random-range-ratio" in point["command"]
    again = run(*point["command"], "--json")
    assert again["ttft_s"] == pytest.approx(point["ttft_s"]) and again["tpot_s"] == pytest.approx(point["tpot_s"])


def test_static_batching_refuses_the_requests_options():
    r = CliRunner().invoke(main, ["capacity", *LLAMA, "--tpot-ms", "20", "--batching", "static", "--spread", "0.5"])
    assert r.exit_code == 1 and "apply with --batching continuous" in r.output

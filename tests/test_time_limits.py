"""--time-limit: a search past its limit answers what it has, labelled as stopped; within it, nothing changes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main
from costmodel.core.deadline import Deadline
from costmodel.core.parallel import run_all

LLAMA = ["--model", "llama-3-8b", "--gpu", "h100", "--input-len", "512", "--output-len", "64"]
SEARCHES = {
    "recommend": ["recommend", *LLAMA, "--request-rate", "20", "--tpot-ms", "20", "--json"],
    "plan": ["plan", *LLAMA, "--gpus", "4", "--max-concurrency", "16", "--tpot-ms", "30", "--json"],
    "capacity": ["capacity", *LLAMA, "--tpot-ms", "20", "--statistic", "p90", "--json"],
    "curve": ["predict", *LLAMA, "--engine", "vllm", "--concurrency", "1:64:x2", "--json"],
}


def _stopped(name: str, out: dict):
    if name == "capacity":
        return out["stopped"] if isinstance(out, dict) else None
    return out.get("stopped")


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_a_search_past_its_limit_answers_what_it_has_labelled(name):
    """At --time-limit 0 each search prices at least one piece of work, then stops: its answer says so. With the
    default limit the same search finishes and says nothing of it."""
    runner = CliRunner()
    cut = runner.invoke(main, [*SEARCHES[name], "--time-limit", "0"])
    whole = runner.invoke(main, SEARCHES[name])
    assert cut.exit_code == whole.exit_code == 0, cut.output + whole.output
    short, full = json.loads(cut.output), json.loads(whole.output)
    assert "stopped at the time limit (0 s)" in _stopped(name, short)
    assert _stopped(name, full) is None
    if name == "recommend":  # the best so far is a real answer: its command reprices it within the target
        again = runner.invoke(main, [*short["command"], "--json"])
        assert again.exit_code == 0, again.output
        assert json.loads(again.output)["tpot_s"] <= 0.02
        assert short["gpus"] >= full["gpus"]
    if name == "curve":
        assert 1 <= len(short["points"]) < len(full["points"])
    if name == "plan":
        assert short["points"] and len(short["points"]) <= len(full["points"])


def test_run_all_takes_no_new_work_past_the_deadline():
    deadline = Deadline(0.0)
    got = run_all(abs, [-1, -2, -3, -4], 1, deadline=deadline)
    assert got == [1, None, None, None] and "1 of 4" in deadline.stopped
    assert run_all(abs, [-1, -2], 1, deadline=Deadline(None)) == [1, 2]

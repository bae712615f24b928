"""Assumptions a user reads in one pass: the long derivations (the time model, the transfer rule, each class's
origin, how ranges are derived) are behind `costmodel explain TOPIC`, and every assumption that points there names
a topic that prints more than the pointer said."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from costmodel.cli.commands import main
from costmodel.cli.explain import TOPICS

POINTER = re.compile(r"costmodel explain ([a-z-]+)")
COMMANDS = [
    ["predict", "--gpu", "a100"],
    ["predict", "--gpu", "h100", "--model", "llama-3-8b"],
    ["predict", "--gpu", "h200", "--model", "deepseek-v3"],
    [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3-8b",
        "--engine",
        "vllm",
        "--concurrency",
        "8",
        "--input-len",
        "512",
        "--output-len",
        "64",
    ],
]


def _assumptions(args: list[str]) -> list[str]:
    out = CliRunner().invoke(main, [*args, "--json"])
    assert out.exit_code == 0, out.output
    found: list[str] = []

    def walk(x):
        if isinstance(x, dict):
            found.extend(x.get("assumptions") or [])
            for k, v in x.items():
                if k != "assumptions":
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(json.loads(out.output))
    return found


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a[:4]) for a in COMMANDS])
def test_every_pointer_names_a_topic_that_says_more(args):
    lines = _assumptions(args)
    pointers = [(line, topic) for line in lines for topic in POINTER.findall(line)]
    assert pointers  # each of these predictions points somewhere
    for line, topic in pointers:
        assert topic in TOPICS, line
        gpu = ["--gpu", "h100"] if topic == "efficiency" else []
        shown = CliRunner().invoke(main, ["explain", topic, *gpu])
        assert shown.exit_code == 0 and len(shown.output) > 100, shown.output


@pytest.mark.parametrize("args", COMMANDS[:3], ids=[" ".join(a[:4]) for a in COMMANDS[:3]])
def test_kernel_assumptions_read_in_one_pass(args):
    """No assumption of a kernel or model prediction runs past 400 characters (the transfer rule was 2,310)."""
    assert max(map(len, _assumptions(args))) <= 400


def test_the_transfer_rule_is_whole_behind_its_name():
    from costmodel.price.transfer import TRANSFER_RULE

    shown = CliRunner().invoke(main, ["explain", "transfer-rule"]).output
    assert TRANSFER_RULE in shown and len(TRANSFER_RULE) > 1000


def test_each_class_origin_on_a_device():
    """The H100's fitted classes and those carried from the A100, one line each, as resolved."""
    from costmodel.hardware.catalog import load_profile
    from costmodel.price.origin import resolve

    shown = CliRunner().invoke(main, ["explain", "efficiency", "--gpu", "h100"]).output
    resolved = resolve(load_profile("h100"), "graph")
    assert all(f"  {cls}: {origin}" in shown for cls, origin in resolved.origin.items())
    missing = CliRunner().invoke(main, ["explain", "efficiency"])
    assert missing.exit_code == 1 and "needs --gpu" in missing.output


def test_without_a_topic_the_topics():
    shown = CliRunner().invoke(main, ["explain"]).output
    assert [line.split()[0] for line in shown.splitlines()] == list(TOPICS)

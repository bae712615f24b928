"""Engine releases: the defaults each release's own source states, chosen by --engine name==release or
--engine-version, and refused outside the releases whose defaults are known."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import costmodel
from costmodel.cli.commands import main
from costmodel.engine.config import engine

GIB = 1 << 30


def on(name, gpu, version=None, tp=1):
    hw = costmodel.load_profile(gpu)
    return engine(name, capacity_bytes=hw.engine_memory, device_name=hw.name, tp=tp, version=version)


# vLLM's own expectations: tests/engine/test_arg_utils.py test_defaults_with_usage_context at v0.8 (the OpenAI API
# server: 8192 tokens and 1024 sequences when the device's name holds h100 or h200, else 2048 and 256), and
# EngineArgs.get_batch_defaults from v0.9 (the same pair on any device of at least 70 GiB but an A100)
@pytest.mark.parametrize(
    "gpu, v08, v012",
    [
        ("h100", (8192, 1024), (8192, 1024)),
        ("h200", (8192, 1024), (8192, 1024)),
        ("b200", (2048, 256), (8192, 1024)),
        ("mi300x", (2048, 256), (8192, 1024)),
        ("a100", (2048, 256), (2048, 256)),
        ("l40s", (2048, 256), (2048, 256)),
    ],
)
def test_vllm_batch_defaults_follow_each_release(gpu, v08, v012):
    for version, (tokens, seqs) in (("0.8.5", v08), ("0.10.1", v012), (None, v012)):
        eng = on("vllm", gpu, version)
        assert (eng.max_num_batched_tokens, eng.max_num_seqs) == (tokens, seqs), (gpu, version)
    assert on("vllm", "b200", "0.8.5").version == "0.8.5" and on("vllm", "b200").version == "0.12"


@pytest.mark.parametrize("tp, fraction", [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81), (16, 0.79)])
def test_sglang_04_takes_its_memory_fraction_from_tp_alone(tp, fraction):
    """SGLang 0.4.4-0.4.6 server_args.py: mem_fraction_static by tp, the same on every device; 0.5 by memory."""
    assert on("sglang", "h100", "0.4.5", tp).memory_fraction == fraction
    assert on("sglang", "h200", "0.4", tp).memory_fraction == fraction
    assert on("sglang", "h100", tp=tp).memory_fraction != on("sglang", "h200", tp=tp).memory_fraction


def test_sglang_04_chunks_by_memory_under_25_000_mib():
    """chunked_prefill_size 2048 where nvidia-smi reports under 25,000 MiB (an L4's 22.5 GiB), 8192 above; 0.5
    steps it by memory (4096 on a 40 GB A100, under 60 GiB)."""
    assert on("sglang", "l4", "0.4.6").max_num_batched_tokens == 2048
    assert on("sglang", "a100_40gb_sxm", "0.4.6").max_num_batched_tokens == 8192
    assert on("sglang", "a100_40gb_sxm").max_num_batched_tokens == 4096
    assert on("sglang", "h100", "0.4.6").max_num_batched_tokens == 8192


@pytest.mark.parametrize(
    "name, version, said",
    [
        ("vllm", "0.7.3", "vllm 0.7.3: defaults are known for vllm 0.8.x, 0.9-0.12"),
        ("vllm", "0.13", "vllm 0.13: defaults are known"),
        ("sglang", "0.4.9", "sglang 0.4.9: defaults are known for sglang 0.4.0-0.4.6, 0.5.x"),
        ("trtllm", "1.2.0", "trtllm 1.2.0: defaults are known for trtllm 1.0.x"),
        ("vllm", "latest", "'latest' is not a release like 0.10 or 0.10.1"),
    ],
)
def test_a_release_whose_defaults_are_unknown_is_refused(name, version, said):
    with pytest.raises(costmodel.CostModelError, match=said.replace(".", r"\.")):
        on(name, "h100", version)


SERVED = ["predict", "--gpu", "b200", "--model", "llama-3-8b", "--concurrency", "1", "--num-requests", "1"]
SERVED += ["--input-len", "8192", "--output-len", "128", "--json"]


def test_engine_name_pins_a_release_on_the_command_line():
    """--engine vllm==0.8.5 and --engine vllm --engine-version 0.8.5 are the same request; on a B200 that release
    has a quarter of the later token budget, so a lone 8,192-token prompt takes four iterations (8192 / 2048)
    instead of one, three more passes over the weights before its first token."""
    runner = CliRunner()
    pinned = runner.invoke(main, [*SERVED, "--engine", "vllm==0.8.5"])
    spelled = runner.invoke(main, [*SERVED, "--engine", "vllm", "--engine-version", "0.8.5"])
    latest = runner.invoke(main, [*SERVED, "--engine", "vllm"])
    assert pinned.exit_code == spelled.exit_code == latest.exit_code == 0, pinned.output + spelled.output
    old, same, new = (json.loads(r.output) for r in (pinned, spelled, latest))
    assert old == same
    assert old["engine"]["version"] == "0.8.5" and old["engine"]["max_num_batched_tokens"] == 2048
    assert new["engine"]["version"] == "0.12" and new["engine"]["max_num_batched_tokens"] == 8192
    assert old["iterations"] - new["iterations"] == 3
    assert old["ttft_s"] > new["ttft_s"]


@pytest.mark.parametrize(
    "extra, code, said",
    [
        (["--engine", "vllm==0.7"], 1, "Error: vllm 0.7: defaults are known for vllm 0.8.x, 0.9-0.12"),
        (["--engine", "vllm==0.8", "--engine-version", "0.9"], 2, "differs from the release --engine names (0.8)"),
        (["--engine-version", "0.9", "--engine", "vllm==0.8"], 2, "names release 0.8, --engine-version 0.9"),
        (["--engine", "tgi==1.0"], 2, "'tgi' is not one of"),
    ],
)
def test_a_bad_or_conflicting_release_is_one_error(extra, code, said):
    r = CliRunner().invoke(main, [*SERVED, *extra])
    assert r.exit_code == code and said in r.output and "Traceback" not in r.output, r.output


def test_recommend_carries_the_release_into_its_command():
    args = ["recommend", "--model", "llama-3-8b", "--gpu", "b200", "--engine", "vllm==0.8.5", "--input-len", "1024"]
    args += ["--output-len", "256", "--request-rate", "5", "--tpot-ms", "30", "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    rec = json.loads(r.output)
    i = rec["command"].index("--engine-version")
    assert rec["command"][i + 1] == "0.8.5"
    again = CliRunner().invoke(main, [*rec["command"], "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["engine"]["max_num_batched_tokens"] == 2048

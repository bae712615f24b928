"""A shared prefix found in the prefix cache, and long prompts in chunks: a full hit leaves only the tail's prefill in
TTFT, by hand from the iteration table; hits never take more pages than the pool holds (the prefix evicted when no
running request holds it); prompt tokens are conserved (computed + found = admitted) and Little's law holds with
prefix hits and speculation on together; a 128k-token prompt's chunks each attend to every earlier position; a
request past the engine's model length or the KV cache is refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import costmodel
from costmodel.cli.commands import main
from costmodel.core.errors import CostModelError
from costmodel.engine.config import engine
from costmodel.engine.load import Load
from costmodel.engine.served import Setup
from costmodel.engine.simulate import simulate
from costmodel.engine.speculation import parse
from costmodel.model.pricing import pricing

OFF = {"iteration_s": 0.0, "request_s": 0.0}


def _setup(m, hw, engine_name="vllm", max_context=8192, spec=None, **flags):
    eng = engine(engine_name, capacity_bytes=hw.engine_memory, device_name=hw.name).with_flags(**flags)
    return Setup(m, pricing(m, hw, **eng.kernels), eng, max_context=max_context, overheads=OFF, speculation=spec)


@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "trtllm", "atom"])
def test_a_full_hit_leaves_only_the_tails_prefill_in_ttft(llama, h100, engine_name):
    """One client, every prompt 4,096 tokens starting with the same 3,584: the first request prefills all of it,
    every later one only its last 512 (after 3,584 cached, whose attention it still reads); ATOM's cache is off
    unless asked for."""
    st = _setup(llama, h100, engine_name, **({"prefix_caching": True} if engine_name == "atom" else {}))
    n, prompt, prefix = 5, 4096, 3584
    prompts, outputs = np.full(n, prompt), np.full(n, 2)
    shared = Load(prompt, 2, prefix_len=prefix, prefix_share=1.0).conversations(prompts, outputs)[1]
    res = simulate(
        st.table,
        st.eng,
        kv_tokens=st.kv_tokens,
        prompts=prompts,
        outputs=outputs,
        concurrency=1,
        prefix=shared,
    )
    whole = st.table.time(decode_seqs=0, decode_context_sum=0, chunks=[(0, prompt)], outputs=1).total_s
    tail = st.table.time(decode_seqs=0, decode_context_sum=0, chunks=[(prefix, prompt - prefix)], outputs=1).total_s
    ttft = res.first - res.arrival
    assert ttft[0] == pytest.approx(whole, rel=1e-9)
    assert ttft[1:] == pytest.approx(np.full(n - 1, tail), rel=1e-9)
    assert res.prefix_hits == n - 1 and res.prefix_hit_tokens == (n - 1) * prefix
    assert tail < whole / 4  # the tail's own tokens and their attention to the prefix


def test_hits_never_take_more_pages_than_the_pool_holds(llama, h100):
    """A pool of 12,000 tokens, three requests in four sharing a 6,144-token prefix of their 7,000: a request that
    does not share it finds no room beside it, so the prefix is evicted once no running request holds it, and
    cached again by the next sharing request's prefill; no iteration ever overdraws the pages, and every prompt
    token is computed once or found: sum of prompts = prefilled - recomputed after preemptions + found."""
    st = _setup(llama, h100, max_context=12_000)
    n = 40
    prompts, outputs = np.full(n, 7000), np.full(n, 16)
    shared = Load(7000, 16, prefix_len=6144, prefix_share=0.75).conversations(prompts, outputs)[1]
    res = simulate(
        st.table,
        st.eng,
        kv_tokens=12_000,
        prompts=prompts,
        outputs=outputs,
        concurrency=2,
        check=True,
        prefix=shared,
    )
    assert res.violations == []
    assert res.prefix_evictions >= 1 and res.prefix_hits >= 1
    assert res.prefill_tokens - res.recomputed_tokens + res.prefix_hit_tokens == prompts.sum()


@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "trtllm", "atom"])
def test_tokens_and_littles_law_with_prefix_hits_and_speculation(llama, h100, engine_name):
    """Random lengths, 70% of requests sharing a 1,024-token prefix, MTP drafting 3 with acceptance 2.2, a cache
    that binds: invariants hold, prompt tokens are conserved, every request yields its output, C = X x W."""
    spec = parse('{"method": "mtp", "num_speculative_tokens": 3}', 2.2)
    # an engine that neither chunks nor reserves (ATOM) recomputes a preempted request whole in one iteration
    budget = 4096 if engine_name == "atom" else 2048
    flags = dict(max_num_batched_tokens=budget, max_num_seqs=16, prefix_caching=True)  # ATOM's is off by default
    st = _setup(llama, h100, engine_name, max_context=4096, spec=spec, **flags)
    rng = np.random.default_rng(11)
    n = 240
    prompts, outputs = rng.integers(1100, 2000, n), rng.integers(2, 400, n)
    shared = Load(1800, 200, prefix_len=1024, prefix_share=0.7).conversations(prompts, outputs)[1]
    res = simulate(
        st.table,
        st.eng,
        kv_tokens=9000,
        prompts=prompts,
        outputs=outputs,
        concurrency=24,
        check=True,
        wall=st.wall,
        spec=st.drafting,
        prefix=shared,
    )
    assert res.violations == [] and res.prefix_hits > n / 3
    assert res.prefill_tokens + res.prefix_hit_tokens >= prompts.sum()  # preempted requests compute again
    assert (res.finish > res.first).all()
    assert np.mean(res.finish - res.arrival) * n / res.finish.max() == pytest.approx(24, rel=0.06)


def test_the_switch_turns_hits_off_and_the_report_says_so(llama, h100):
    load = costmodel.Load(4096, 64, concurrency=8, prefix_len=3584, prefix_share=1.0)
    on = costmodel.serve(llama, h100, load)
    off = costmodel.serve(llama, h100, load, flags=costmodel.EngineFlags(prefix_caching=False))
    plain = costmodel.serve(llama, h100, costmodel.Load(4096, 64, concurrency=8))
    assert off.ttft_s == plain.ttft_s and off.prefix_hit_rate == 0 and plain.prefix_hit_rate is None
    assert on.ttft_s < 0.8 * plain.ttft_s and 0.8 < on.prefix_hit_rate < 3584 / 4096
    assert any("found the first 3584 tokens cached" in a for a in on.assumptions)
    assert any("prefix caching off" in a for a in off.assumptions)


def test_the_command_lines_prefix_options():
    args = "predict --gpu h100 --model llama-3.1-8b --engine vllm --concurrency 4 --input-len 4096 --json".split()
    got = CliRunner().invoke(main, [*args, "--output-len", "32", "--enable-prefix-caching", "--prefix-len", "3584"])
    assert got.exit_code == 0, got.output
    assert '"prefix_hit_rate": 0.8' in got.output
    long = CliRunner().invoke(main, [*args, "--output-len", "32", "--prefix-len", "4096"])
    assert long.exit_code == 1 and "Error: a shared prefix of 4096 tokens needs longer prompts" in long.output
    alone = CliRunner().invoke(main, [*args, "--output-len", "32", "--prefix-share", "0.5"])
    assert alone.exit_code != 0 and "--prefix-share goes with --prefix-len" in alone.output


def test_a_128k_prompts_chunks_attend_to_every_earlier_position(llama, h100):
    """One 131,072-token prompt in chunks of the 8,192-token budget: its TTFT is the sum over its 16 chunks of their
    iterations, each chunk's attention A(s + c) - A(s) against every earlier position; they add up to the whole
    prompt's attention A(131,072), far above 16 lone chunks' 16 x A(8,192)."""
    n, c = 131_072, 8192
    st = _setup(llama, h100, max_context=n + 2)
    res = simulate(
        st.table, st.eng, kv_tokens=st.kv_tokens, prompts=np.array([n]), outputs=np.array([2]), concurrency=1
    )
    t = st.table
    chunks = [
        t.time(decode_seqs=0, decode_context_sum=0, chunks=[(s, c)], outputs=int(s + c == n)).total_s
        for s in range(0, n, c)
    ]
    assert res.first[0] == pytest.approx(sum(chunks), rel=1e-9)
    attention = sum(float(t.prompt_attention_time(s + c) - t.prompt_attention_time(s)) for s in range(0, n, c))
    assert attention == pytest.approx(float(t.prompt_attention_time(n)), rel=1e-9)
    assert attention > 10 * 16 * float(t.prompt_attention_time(c))


@pytest.mark.parametrize(
    "extra,words",
    [
        (["--max-model-len", "32768"], "longer than max_model_len 32,768"),
        (["--gpu-memory-utilization", "0.2"], "KV cache of"),
    ],
)
def test_a_request_that_cannot_fit_is_refused_with_the_reason(extra, words):
    args = ["predict", "--gpu", "h100", "--model", "llama-3.1-8b", "--engine", "vllm", "--concurrency", "1"]
    got = CliRunner().invoke(main, [*args, "--input-len", "65536", "--output-len", "128", *extra])
    assert got.exit_code == 1 and got.output.startswith("Error:") and words in got.output, got.output


def test_a_prefix_past_the_prompt_is_refused_by_the_library(llama, h100):
    with pytest.raises(CostModelError, match="needs longer prompts"):
        costmodel.serve(llama, h100, costmodel.Load(512, 16, concurrency=2, prefix_len=512, prefix_share=1.0))


def test_a_conversations_turns_reuse_the_turns_before_by_hand(llama, h100):
    """Conversations of 4 turns of 512 new prompt tokens and 128 output each: turn t's prompt is 640 t + 512 tokens
    and it finds the 640 t before it cached (whole pages of 16), so the prompt tokens found are (640 + 1,280 +
    1,920) / (512 + 1,152 + 1,792 + 2,432) = 3,840 / 5,888 of all, with a pool that never evicts."""
    p = costmodel.serve(llama, h100, costmodel.Load(512, 128, concurrency=16, turns=4))
    assert p.prefix_hit_rate == pytest.approx(3840 / 5888, rel=1e-12)
    assert p.input_len == pytest.approx(5888 / 4) and p.num_requests == 160
    off = costmodel.serve(
        llama,
        h100,
        costmodel.Load(512, 128, concurrency=16, turns=4),
        flags=costmodel.EngineFlags(prefix_caching=False),
    )
    assert off.prefix_hit_rate == 0 and off.ttft_s > p.ttft_s


@pytest.mark.parametrize("loop", [dict(concurrency=6), dict(request_rate=3.0)])
def test_a_turn_is_sent_as_the_turn_before_finishes(llama, h100, loop):
    """Every turn after the first arrives exactly when its conversation's turn before finished; a closed loop of C
    clients keeps C conversations going (C = X x W over the turns); the cache never overdraws the pool."""
    st = _setup(llama, h100, max_context=8192)
    turns, c = 3, 60
    rng = np.random.default_rng(2)
    prompts, outputs = rng.integers(200, 900, c * turns), rng.integers(10, 300, c * turns)
    load = Load(500, 150, turns=turns, **loop)
    prompts, prefix = load.conversations(prompts, outputs)
    res = simulate(
        st.table, st.eng, kv_tokens=20_000, prompts=prompts, outputs=outputs, check=True, prefix=prefix, **loop
    )
    assert res.violations == []
    later = np.arange(len(prompts)) % turns > 0
    assert (res.arrival[later] == res.finish[np.flatnonzero(later) - 1]).all()
    if "concurrency" in loop:
        assert np.mean(res.finish - res.arrival) * len(prompts) / res.finish.max() == pytest.approx(6, rel=0.08)
    assert res.prefix_hits > 0


def test_plan_and_capacity_take_a_shared_prefix_and_recommend_says_it_cannot(llama, h100):
    """A plan with a shared prefix screens and simulates in the engine (the closed form has no prefix cache): its
    front point's own command prints the same TPOT, and disaggregated layouts are skipped with the reason; capacity
    under a TPOT target serves more clients when most of each prompt is found cached; recommend, which sizes
    replicas in closed form, refuses with an Error line."""
    import json

    plan = CliRunner().invoke(
        main,
        "plan --model llama-3.1-8b --gpu h100 --gpus 2 --input-len 4096 --output-len 256 --prefix-len 3584 "
        "--max-concurrency 8 --json".split(),
    )
    assert plan.exit_code == 0, plan.output
    d = json.loads(plan.output)
    assert any("not model the prefix cache" in s["reason"] for s in d["skipped"])
    point = d["front"][0]
    again = json.loads(CliRunner().invoke(main, [*point["command"], "--json"]).output)
    assert again["tpot_s"] == pytest.approx(point["tpot_s"], rel=1e-12) and again["prefix_hit_rate"] > 0.5
    kw = dict(tpot_s=0.03, variants=False)
    cached = costmodel.load_capacity(llama, [h100], costmodel.Load(4096, 256, prefix_len=3584, prefix_share=1.0), **kw)
    plain = costmodel.load_capacity(llama, [h100], costmodel.Load(4096, 256), **kw)
    assert cached.points[0].concurrency > plain.points[0].concurrency
    refused = CliRunner().invoke(
        main,
        "recommend --model llama-3.1-8b --gpu h100 --input-len 4096 --output-len 256 --request-rate 5 "
        "--tpot-ms 30".split()
        + ["--prefix-len", "3584"],
    )
    assert refused.exit_code != 0 and "No such option" in refused.output  # not offered where it cannot be priced
    from costmodel.deploy.recommend import recommend

    with pytest.raises(CostModelError, match="closed form, which has no prefix cache"):
        recommend(llama, [h100], costmodel.Load(4096, 256, request_rate=5.0, prefix_len=3584, prefix_share=1.0))

"""Speculative decoding: the engines' spellings read as one; every draft rejected costs more than none; every draft
kept divides TPOT by k + 1 and multiplies it by the verify step's time over a plain step's, by hand from the
iteration table; the simulator keeps its invariants (budget, sequences, pages with the drafts' slots), yields each
request's tokens exactly, and Little's law holds."""

from __future__ import annotations

import numpy as np
import pytest

import costmodel
from costmodel.core.errors import CostModelError
from costmodel.engine.config import engine
from costmodel.engine.served import Setup
from costmodel.engine.simulate import simulate
from costmodel.engine.speculation import parse
from costmodel.model.pricing import pricing

MTP3 = '{"method": "mtp", "num_speculative_tokens": 3}'
OFF = {"iteration_s": 0.0, "request_s": 0.0}


@pytest.mark.parametrize(
    "text",
    [
        MTP3,
        '{"method": "deepseek_mtp", "num_speculative_tokens": 3}',
        '{"speculative_algorithm": "NEXTN", "speculative_num_draft_tokens": 4}',  # SGLang counts the bonus position
        '{"speculative_algorithm": "NEXTN", "speculative_num_steps": 3}',
        '{"decoding_type": "MTP", "num_nextn_predict_layers": 3}',  # TensorRT-LLM
    ],
)
def test_every_engines_spelling_is_the_same_speculation(text):
    spec = parse(text, 2.5)
    assert (spec.method, spec.k, spec.slots, spec.acceptance) == ("mtp", 3, 4, 2.5)


def test_acceptance_from_per_position_rates_by_hand():
    # a draft is kept only if every earlier one was: 1 (the bonus) + 0.8 + 0.8 x 0.6 + 0.8 x 0.6 x 0.4
    assert parse(MTP3, acceptance_rates=[0.8, 0.6, 0.4]).acceptance == pytest.approx(2.472, abs=1e-12)


@pytest.mark.parametrize(
    "text,length,words",
    [
        (MTP3, None, "needs its acceptance"),
        (MTP3, 4.5, "1 to 4"),
        (MTP3, 0.5, "1 to 4"),
        ('{"method": "medusa2", "num_speculative_tokens": 3}', 2.0, "is not known"),
        ('{"method": "mtp"}', 2.0, "give the drafted tokens"),
        ('{"method": "draft_model", "num_speculative_tokens": 3}', 2.0, 'needs "model"'),
        ("{not json", 2.0, "is not JSON"),
    ],
)
def test_a_bad_speculation_is_refused_naming_what_is_wrong(text, length, words):
    with pytest.raises(CostModelError, match=words.replace("(", r"\(").replace('"', '"')):
        parse(text, length)


def test_a_verify_step_yields_the_acceptance_length_exactly_in_whole_tokens():
    spec = parse(MTP3, 2.5)
    steps = np.arange(0, 1001)
    tokens = spec.tokens(steps)
    assert tokens[-1] == 2500 and set(np.diff(tokens)) <= {2, 3}
    # the steps a sequence needs for its tokens, from any point: enough, and one fewer is not
    for done in (0, 1, 7):
        for left in (1, 2, 3, 10, 99):
            n = int(spec.steps_for(np.array([done]), np.array([left]))[0])
            assert spec.tokens(done + n) - spec.tokens(done) >= left > spec.tokens(done + n - 1) - spec.tokens(done)


def _served(llama, h100, spec=None, **load):
    return costmodel.serve(llama, h100, costmodel.Load(**load), speculation=spec, overheads=OFF)


def test_every_draft_rejected_costs_more_than_none(llama, h100):
    load = dict(input_len=1024, output_len=256, concurrency=8)
    plain, rejected = _served(llama, h100, **load), _served(llama, h100, parse(MTP3, 1.0), **load)
    assert rejected.tpot_s > plain.tpot_s and rejected.output_tokens_per_s < plain.output_tokens_per_s


@pytest.mark.parametrize("method", ["mtp", "ngram"])
@pytest.mark.parametrize("clients", [1, 32])
def test_every_draft_kept_divides_tpot_by_k_plus_one_times_the_verify_steps_cost(llama, h100, method, clients):
    """One wave of clients whose prompts (200 tokens) all prefill in the first iteration, then decode 96 tokens
    together (the cache grows by a fifth): TPOT with every draft kept over TPOT without = (a verify step: the
    per-token ops over 4 tokens a sequence, each sequence's attention over its cache once, 4 heads a sequence; and
    the proposer) / (4 plain decode steps), by hand from the iteration table's parts at the mean context (no fixed
    cost per iteration, no host time)."""
    k, prompt, out = 3, 200, 97
    spec = parse(f'{{"method": "{method}", "num_speculative_tokens": {k}}}', k + 1)
    load = dict(input_len=prompt, output_len=out, concurrency=clients, num_requests=clients)
    plain, fast = _served(llama, h100, **load), _served(llama, h100, spec, **load)
    eng = engine("vllm", capacity_bytes=h100.engine_memory, device_name=h100.name)
    pr = pricing(llama, h100, **eng.kernels)
    st = Setup(llama, pr, eng, max_context=prompt + out, overheads=OFF, speculation=spec)
    ctx, t, d = prompt + out / 2, st.table, clients

    def step(slots):  # per-token ops over d x slots tokens, d sequences' attention over their caches, the heads
        compute, comm = t.per_token(d * slots)
        return float(compute) + float(comm) + float(t.decode_attention_time(d, ctx)) + float(t.head_time(d * slots))

    verify = step(k + 1) + float(st.drafting.propose(d, ctx))
    assert fast.tpot_s / plain.tpot_s == pytest.approx(verify / ((k + 1) * step(1)), rel=0.01)
    assert (method == "ngram") == (float(st.drafting.propose(d, ctx)) == 0.0)


@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "trtllm", "atom"])
def test_invariants_tokens_and_littles_law_with_drafts(llama, h100, engine_name):
    """A cache small enough to bind: every iteration within the budget (k + 1 tokens a decode sequence), the
    sequence limit and the pages (the drafts' slots held); each request's output produced exactly; C = X x W."""
    spec = parse(MTP3, 2.3)
    # an engine that neither chunks nor reserves (ATOM) recomputes a preempted request whole in one iteration
    eng = engine(engine_name, capacity_bytes=h100.engine_memory, device_name=h100.name).with_flags(
        max_num_batched_tokens=4096 if engine_name == "atom" else 2048, max_num_seqs=12
    )
    st = Setup(llama, pricing(llama, h100), eng, max_context=4096, overheads=OFF, speculation=spec)
    rng = np.random.default_rng(5)
    prompts, outputs = rng.integers(100, 2000, 200), rng.integers(2, 600, 200)
    res = simulate(
        st.table,
        eng,
        kv_tokens=6000,
        prompts=prompts,
        outputs=outputs,
        concurrency=24,
        check=True,
        wall=st.wall,
        spec=st.drafting,
    )
    assert res.violations == []
    assert (res.finish >= res.first).all() and (res.first > res.arrival - 1e-12).all()
    span = res.finish.max()
    assert np.mean(res.finish - res.arrival) * len(prompts) / span == pytest.approx(24, rel=0.06)
    # tokens out: each request's decode steps yield its outputs (first token from its prefill, then floor(a s))
    steps = spec.steps_for(np.zeros(len(outputs), np.int64), outputs - 1)
    assert (spec.tokens(steps) >= outputs - 1).all()


def test_a_draft_model_takes_its_weights_and_cache_from_the_budget(llama, h100):
    spec = parse('{"method": "draft_model", "num_speculative_tokens": 4, "model": "llama-3.1-8b"}', 3.0)
    eng = engine("vllm", capacity_bytes=h100.engine_memory, device_name=h100.name)
    alone = Setup(llama, pricing(llama, h100), eng, max_context=4096, overheads=OFF)
    drafted = Setup(llama, pricing(llama, h100), eng, max_context=4096, overheads=OFF, speculation=spec)
    # the same model as its own draft: twice the weights, twice the bytes per token, so fewer tokens fit
    assert drafted.weights == pytest.approx(2 * alone.weights, rel=1e-9)
    assert drafted.kv_per_token == pytest.approx(2 * alone.kv_per_token, rel=1e-9)
    assert drafted.kv_tokens < alone.kv_tokens / 2


def test_the_command_line_takes_the_engines_spelling(llama):
    from click.testing import CliRunner

    from costmodel.cli.commands import main

    args = "predict --gpu h100 --model llama-3.1-8b --engine sglang --concurrency 4 --input-len 512 --json".split()
    args += ["--output-len", "64"]
    spec = ["--speculative-config", '{"speculative_algorithm": "NEXTN", "speculative_num_steps": 3}']
    got = CliRunner().invoke(main, [*args, *spec, "--acceptance-length", "2.5"])
    assert got.exit_code == 0, got.output
    assert any("yields 2.5 tokens" in a for a in __import__("json").loads(got.output)["assumptions"])
    refused = CliRunner().invoke(main, [*args, *spec])
    assert refused.exit_code != 0 and "Error: speculative decoding needs its acceptance" in refused.output
    alone = CliRunner().invoke(main, [*args, "--acceptance-length", "2"])
    assert alone.exit_code != 0 and "go with --speculative-config" in alone.output


@pytest.mark.parametrize("rate", [0.85, 0.90])
def test_deepseek_v3s_documented_mtp_speedup(rate):
    """DeepSeek-V3's technical report (arXiv 2412.19437, section 5.4.3): its MTP module's second token is accepted
    85-90% of the time, "delivering 1.8 times TPS". One MTP draft at that rate, DeepSeek-V3 on 8 H200s under SGLang
    at one client (the report states no batch; one client is the decoding speed a user sees): the tokens per second
    rise 1.8x within 10%, the TPOT error the non-speculative served rows show being 6% median."""
    m, h200 = costmodel.load_model("deepseek-v3"), costmodel.load_profile("h200")
    load = costmodel.Load(1024, 256, concurrency=1, num_requests=2)
    kw = dict(layout=costmodel.Layout(tp=8), engine_name="sglang")
    spec = parse('{"method": "mtp", "num_speculative_tokens": 1}', acceptance_rates=[rate])
    plain, fast = costmodel.serve(m, h200, load, **kw), costmodel.serve(m, h200, load, speculation=spec, **kw)
    assert fast.output_tokens_per_s / plain.output_tokens_per_s == pytest.approx(1.8, rel=0.10)


def test_disaggregated_pools_refuse_speculation_with_an_error_line():
    """The pools do not model speculative decoding: one Error line naming it, not an internal error."""
    from click.testing import CliRunner

    from costmodel.cli.commands import main

    args = "predict --gpu h100 --model llama-3.1-8b --engine vllm --request-rate 4 --input-len 512 --output-len 64"
    pools = "--disaggregated --prefill-workers 1 --decode-tp 1 --acceptance-length 2".split()
    got = CliRunner().invoke(main, [*args.split(), *pools, "--speculative-config", MTP3])
    assert got.exit_code == 1 and got.output.startswith("Error: speculative decoding"), got.output
    assert "do not model the prefix cache or speculative decoding" in got.output

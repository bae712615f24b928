"""A served model under load: the simulation against independent oracles (a lone request priced by the step,
conservation laws, the scheduler's invariants), the closed form against the simulation, the engines' KV
arithmetic by hand, and ``validate --serving`` on bad files."""

import csv
import json
import math

import numpy as np
import pytest

import costmodel
from costmodel import EngineFlags, Layout, Load
from costmodel.core.errors import CostModelError
from costmodel.engine.config import engine, kv_capacity_tokens
from costmodel.engine.iteration import exact_time
from costmodel.engine.served import Setup, serve
from costmodel.engine.simulate import simulate
from costmodel.model.pricing import pricing
from tests.kwargs import split

OFF = {"iteration_s": 0.0, "request_s": 0.0}


@pytest.fixture(scope="module")
def h100():
    return costmodel.load_profile("h100")


@pytest.fixture(scope="module")
def llama(h100):
    return costmodel.load_model("llama-3.1-8b")


def test_one_client_is_one_request(llama, h100):
    """At concurrency 1 (overheads off) the TTFT is the prompt's prefill and every TPOT a lone decode step,
    both priced without the iteration table's grid."""
    p = serve(llama, h100, Load(input_len=1000, output_len=50, concurrency=1, num_requests=3), overheads=OFF)
    pr = pricing(llama, h100)
    assert p.ttft_s == pytest.approx(exact_time(llama, pr, decode_seqs=0, decode_context=0, prompt=1000), rel=0.02)
    steps = [exact_time(llama, pr, decode_seqs=1, decode_context=1000 + i, prompt=0) for i in range(1, 50)]
    assert p.tpot_s == pytest.approx(np.mean(steps), rel=0.01)
    assert p.mean_batch == pytest.approx(1.0)


@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "trtllm", "atom"])
def test_littles_law_and_tokens(llama, h100, engine_name):
    """Closed loop: throughput x mean time in the system = clients (Little's law, up to the first and last
    waves); every output token is produced exactly once."""
    c, n = 16, 400
    p = serve(
        llama,
        h100,
        Load(
            input_len=512,
            output_len=64,
            concurrency=c,
            num_requests=n,
            input_dist="uniform",
            output_dist="uniform",
            spread=0.5,
        ),
        engine_name=engine_name,
        overheads=OFF,
    )
    assert p.requests_per_s * p.e2e_s == pytest.approx(c, rel=0.05)
    assert p.output_tokens_per_s == pytest.approx(p.requests_per_s * p.output_len, rel=1e-9)


def _setup(llama, h100, eng, max_context):
    pr = pricing(llama, h100)
    return Setup(llama, pr, eng, max_context=max_context, overheads=OFF)


@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "trtllm", "atom"])
def test_scheduler_invariants(llama, h100, engine_name):
    """Budget, sequence limit and pages hold in every iteration, with a cache small enough to bind."""
    eng = engine(engine_name, capacity_bytes=h100.engine_memory, device_name=h100.name).with_flags(
        max_num_batched_tokens=2048, max_num_seqs=12
    )
    st = _setup(llama, h100, eng, 4096)
    rng = np.random.default_rng(3)
    prompts, outputs = rng.integers(100, 1800, 150), rng.integers(20, 300, 150)
    res = simulate(st.table, eng, kv_tokens=6000, prompts=prompts, outputs=outputs, concurrency=24, check=True)
    assert res.violations == []
    assert res.seqs_max <= 12 and res.batch_tokens_max <= 2048
    assert res.kv_pages_max <= res.kv_pages
    assert np.all(res.first >= res.arrival) and np.all(res.finish >= res.first)


def test_preempted_requests_are_recomputed(llama, h100):
    """vLLM takes pages as it goes: a cache too small for every running sequence preempts. Tokens are conserved:
    the tokens prefilled are the prompts, plus one for each preempted request that had started decoding (it
    returns to compute its last token), plus what a preemption lost. Without prefix caching that is everything
    the preempted requests had cached; with it (vLLM's default) nothing, as their KV is found again."""
    base = engine("vllm", capacity_bytes=h100.engine_memory, device_name=h100.name).with_flags(max_num_seqs=16)
    st = _setup(llama, h100, base, 2048)
    n = 64
    prompts, outputs = np.full(n, 200), np.full(n, 400)
    runs = {}
    for caching in (False, True):
        eng = base.with_flags(prefix_caching=caching)
        res = simulate(st.table, eng, kv_tokens=4096, prompts=prompts, outputs=outputs, concurrency=16, check=True)
        assert res.preemptions > 0 and res.violations == []
        assert np.all(res.finish > 0) and np.all(res.first > 0)
        assert res.prefill_tokens == prompts.sum() + res.resumed + res.recomputed_tokens
        assert 0 < res.resumed <= res.preemptions
        runs[caching] = res
    assert runs[False].recomputed_tokens >= runs[False].resumed * prompts[0]  # each had its prompt cached at least
    assert runs[True].recomputed_tokens == 0
    assert base.prefix_caching  # vLLM's default
    # the no-evict engine never preempts under the same pressure
    eng2 = engine("trtllm", capacity_bytes=h100.engine_memory, device_name=h100.name).with_flags(max_num_seqs=16)
    res2 = simulate(
        st.table, eng2, kv_tokens=4096, prompts=np.full(n, 200), outputs=np.full(n, 400), concurrency=16, check=True
    )
    assert res2.preemptions == 0 and res2.violations == []
    assert res2.seqs_max <= 4096 // (32 * math.ceil(600 / 32))


GRID = [
    ("llama-3.1-8b", 1, 8, 1024, 256),
    ("llama-3.1-8b", 1, 32, 2048, 512),
    ("llama-3.1-8b", 1, 128, 1024, 128),
    ("qwen3-32b", 2, 8, 1024, 256),
    ("qwen3-32b", 2, 64, 2048, 256),
]


#: Agreement asked of the closed form: 5% where prefill rides in decode iterations; 8% for SGLang's separate
#: prefill iterations, whose TTFT the closed form takes with half a decode iteration in flight (at 8 clients the
#: simulation's mean TTFT is 5-7% above it).
AGREEMENT = {"vllm": 0.05, "trtllm": 0.05, "sglang": 0.08}


@pytest.mark.parametrize("engine_name", ["vllm", "trtllm", "sglang"])
@pytest.mark.parametrize("model,tp,c,isl,osl", GRID)
def test_closed_form_agrees_with_simulation(h100, engine_name, model, tp, c, isl, osl):
    """Steady-state means (the requests after the first wave and before the last; lengths spread so requests
    do not move in lock-step; every client fits the cache and the sequence limit): the closed form within
    :data:`AGREEMENT` of the simulation's TTFT and TPOT."""
    from costmodel.engine.load import lengths

    m = costmodel.load_model(model)
    over = {"iteration_s": 0.002, "request_s": 0.0}
    cf = serve(
        m,
        h100,
        Load(input_len=isl, output_len=osl, concurrency=c),
        layout=Layout(tp=tp),
        engine_name=engine_name,
        overheads=over,
        evaluator="steady-state",
    )
    pr = pricing(m, h100, tp=tp)
    eng = engine(engine_name, capacity_bytes=h100.engine_memory, device_name=h100.name, tp=tp)
    n = 30 * c
    prompts, outputs = lengths("uniform", isl, n, spread=0.25), lengths("uniform", osl, n, spread=0.25, seed=1)
    st = Setup(m, pr, eng, max_context=int(prompts.max() + outputs.max()), overheads=over)
    res = simulate(
        st.table, eng, kv_tokens=st.kv_tokens, prompts=prompts, outputs=outputs, concurrency=c, overhead_s=0.002
    )
    steady = slice(c, n - c)
    assert cf.ttft_s == pytest.approx(res.ttft[steady].mean(), rel=AGREEMENT[engine_name])
    more = outputs[steady] > 1
    tpot = (res.finish[steady] - res.first[steady])[more] / (outputs[steady][more] - 1)
    assert cf.tpot_s == pytest.approx(tpot.mean(), rel=AGREEMENT[engine_name])


@pytest.mark.parametrize("engine_name", ["trtllm", "vllm"])
def test_the_hosts_time_by_hand(llama, h100, engine_name):
    """One client, so every decode iteration carries one sequence: the host's 32 layers x (1 ms + 0.5 ms per
    sequence) = 48 ms per iteration, ten times the GPU's step. An overlap scheduler (TensorRT-LLM) runs it beside the
    GPU: every decode iteration lasts 48 ms, and so does TPOT, in both evaluators. A scheduler that plans after the
    GPU (vLLM) adds it: TPOT is the GPU's step + 48 ms."""
    host = {"layer_s": 1e-3, "layer_seq_s": 0.5e-3}
    kw = dict(input_len=128, output_len=64, engine_name=engine_name, concurrency=1, num_requests=3)
    st = Setup(
        llama,
        pricing(llama, h100),
        engine(engine_name, capacity_bytes=h100.engine_memory),
        max_context=192,
        overheads=OFF | host,
    )
    assert llama.layers == 32 and st.host_s([1, 4]).tolist() == pytest.approx([48e-3, 96e-3])
    without = serve(llama, h100, **split(overheads=OFF, **kw)).tpot_s
    assert without < 48e-3 / 5
    for evaluator in ("simulation", "steady-state"):
        got = serve(llama, h100, **split(overheads=OFF | host, evaluator=evaluator, **kw)).tpot_s
        assert got == pytest.approx(48e-3 if engine_name == "trtllm" else without + 48e-3, rel=1e-3), evaluator


@pytest.mark.parametrize(
    "model,tp,c,isl,osl",
    [("qwen3-32b", 8, 128, 1024, 512), ("qwen3-32b", 8, 96, 1024, 512), ("qwen3-32b", 8, 128, 2048, 256)],
)
def test_closed_form_agrees_with_simulation_where_the_host_binds(h100, model, tp, c, isl, osl):
    """As :func:`test_closed_form_agrees_with_simulation`, with TensorRT-LLM's host time (about its fitted size,
    :data:`costmodel.engine.served.OVERHEADS`) binding at large batches on many GPUs."""
    from costmodel.engine.load import lengths

    m = costmodel.load_model(model)
    over = {"iteration_s": 0.002, "request_s": 0.0, "layer_s": 80e-6, "layer_seq_s": 1.5e-6}
    cf = serve(
        m,
        h100,
        Load(input_len=isl, output_len=osl, concurrency=c),
        layout=Layout(tp=tp),
        engine_name="trtllm",
        overheads=over,
        evaluator="steady-state",
    )
    gpu_bound = serve(
        m,
        h100,
        Load(input_len=isl, output_len=osl, concurrency=c),
        layout=Layout(tp=tp),
        engine_name="trtllm",
        overheads={"iteration_s": 0.002, "request_s": 0.0},
        evaluator="steady-state",
    )
    assert cf.tpot_s > 1.02 * gpu_bound.tpot_s  # the host binds
    eng = engine("trtllm", capacity_bytes=h100.engine_memory, device_name=h100.name, tp=tp)
    n = 30 * c
    prompts, outputs = lengths("uniform", isl, n, spread=0.25), lengths("uniform", osl, n, spread=0.25, seed=1)
    st = Setup(m, pricing(m, h100, tp=tp), eng, max_context=int(prompts.max() + outputs.max()), overheads=over)
    res = simulate(st.table, eng, kv_tokens=st.kv_tokens, prompts=prompts, outputs=outputs, concurrency=c, wall=st.wall)
    steady = slice(c, n - c)
    assert cf.ttft_s == pytest.approx(res.ttft[steady].mean(), rel=AGREEMENT["trtllm"])
    more = outputs[steady] > 1
    tpot = (res.finish[steady] - res.first[steady])[more] / (outputs[steady][more] - 1)
    assert cf.tpot_s == pytest.approx(tpot.mean(), rel=AGREEMENT["trtllm"])


def test_kv_capacity_by_hand(llama, h100):
    """vLLM: 0.9 x the device's memory as the driver reports it (81,559 MiB on an H100 80GB HBM3, nvidia-smi) -
    weights - activations, in blocks of 16; Llama 3.1 8B in bf16 caches 2 (K, V) x 32 layers x 8 heads x 128 x 2
    bytes = 131,072 bytes per token."""
    assert h100.engine_memory == 81559 * 2**20
    eng = engine("vllm", capacity_bytes=h100.engine_memory, device_name=h100.name)
    st = _setup(llama, h100, eng, 2048)
    assert st.kv_per_token == 2 * 32 * 8 * 128 * 2
    weights = 8_030_261_248 * 2  # the preset's parameters, independently 8.03B (model card)
    act = 8192 * (2 * 14336 + 4 * 4096) * 2
    budget = 0.9 * 81559 * 2**20 - weights - act
    assert st.kv_tokens == math.floor(budget / (131072 * 16)) * 16
    assert kv_capacity_tokens(eng, 16 * 131072 * 10 + 5, 131072) == 160


def test_presets_match_published_parameters():
    """The served models' presets hold the parameters their model cards publish (within 1%)."""
    for name in (
        "Qwen/Qwen3-32B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-70B",
        "Qwen/Qwen3-235B-A22B-FP8",
        "MiniMaxAI/MiniMax-M2.5",
        "openai/gpt-oss-120b",
        "deepseek-ai/DeepSeek-R1",
    ):
        m = costmodel.load_model(name)
        from costmodel.model.memory import param_count

        assert param_count(m) == pytest.approx(m.published_params, rel=0.01), name


def test_bad_load_is_refused(llama, h100):
    with pytest.raises(CostModelError, match="concurrency"):
        serve(llama, h100, Load(input_len=10, output_len=10))
    with pytest.raises(CostModelError, match="request rate"):
        serve(llama, h100, Load(input_len=10, output_len=10, request_rate=-1))
    with pytest.raises(CostModelError, match="unknown engine"):
        serve(llama, h100, Load(input_len=10, output_len=10, concurrency=1), engine_name="tgi")
    with pytest.raises(CostModelError, match="KV cache"):
        serve(costmodel.load_model("llama-3.1-70b"), h100, Load(input_len=10, output_len=10, concurrency=1))
    with pytest.raises(CostModelError, match="max_num_seqs"):
        serve(llama, h100, Load(input_len=10, output_len=10, concurrency=1), flags=EngineFlags(max_num_seqs=0))


def test_open_loop_runs(llama, h100):
    p = serve(llama, h100, Load(input_len=256, output_len=32, request_rate=5.0, num_requests=100), overheads=OFF)
    # a light load: nearly every request alone, so TTFT close to one prefill
    assert p.requests_per_s == pytest.approx(5.0, rel=0.35)
    assert p.ttft.median < 3 * exact_time(llama, pricing(llama, h100), decode_seqs=0, decode_context=0, prompt=256)


@pytest.mark.parametrize("evaluator", ["simulation", "steady-state"])
def test_arrivals_beyond_what_the_engine_completes_overload_it(llama, h100, evaluator):
    """The most an engine completes is a closed loop of as many clients as it runs sequences (8 here); Poisson
    arrivals at 1.5 times that overload it: both evaluators say so, complete requests at that rate, not the
    arrivals', and the mean TTFT is the queue's over the run (request i waits about i (1/X - 1/rate)), which the
    closed form and the simulation agree on; at half the rate neither is overloaded."""
    kw = dict(input_len=512, output_len=64, overheads=OFF, max_num_seqs=8)
    closed = serve(llama, h100, **split(concurrency=8, num_requests=1600, evaluator="simulation", **kw))
    light = serve(llama, h100, **split(request_rate=1.0, num_requests=20, evaluator=evaluator, **kw))
    most = light.saturation_requests_per_s
    assert (light.saturation_sequences, light.saturation_binds, light.overloaded) == (8, "sequence limit", False)
    assert most == pytest.approx(closed.requests_per_s, rel=0.05)
    n = 2000
    over = serve(llama, h100, **split(request_rate=1.5 * most, num_requests=n, evaluator=evaluator, **kw))
    assert over.overloaded and over.saturation_requests_per_s == pytest.approx(most, rel=1e-9)
    assert over.requests_per_s == pytest.approx(most, rel=0.05)
    queue = (n - 8) / 2 * (1 / most - 1 / (1.5 * most))  # the mean wait of a deterministic queue, by hand
    assert over.ttft_s == pytest.approx(queue, rel=0.15)
    under = serve(llama, h100, **split(request_rate=0.5 * most, num_requests=400, evaluator=evaluator, **kw))
    assert not under.overloaded and under.ttft_s < 0.1
    assert under.requests_per_s == pytest.approx(0.5 * most, rel=0.2 if evaluator == "simulation" else 1e-9)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0, math.inf])
def test_arrivals_are_sent_as_vllms_bench_serve_sends_them(burstiness):
    """Gaps of a gamma distribution of shape k have a coefficient of variation 1/sqrt(k) (1: Poisson; inf: none);
    the times are scaled so the last request goes at n / rate, so the rate is the asked one whatever the draw."""
    from costmodel.engine.load import arrival_times

    n, rate = 20000, 7.0
    t = arrival_times(n, rate, burstiness, seed=3)
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert t[-1] == pytest.approx(n / rate, rel=1e-12) and np.all(gaps >= 0)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), abs=0.03)


def test_burstier_arrivals_queue_longer(llama, h100, run_cli):
    """At the same mean rate, bunched arrivals wait for each other: the simulated TTFT's p90 rises as the
    burstiness falls, and the throughput stays the rate's; the closed form's means do not see it."""
    kw = dict(input_len=2048, output_len=256, request_rate=10.0, num_requests=1500, overheads=OFF)
    runs = {b: serve(llama, h100, **split(burstiness=b, **kw)) for b in (0.25, 1.0, math.inf)}
    assert runs[0.25].ttft.p90 > 1.5 * runs[1.0].ttft.p90 > 1.5 * runs[math.inf].ttft.p90
    for p in runs.values():
        assert p.requests_per_s == pytest.approx(10.0, rel=0.05) and p.burstiness in runs
    closed = [serve(llama, h100, **split(burstiness=b, evaluator="steady-state", **kw)).ttft_s for b in (0.25, 1.0)]
    assert closed[0] == closed[1]
    args = [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--input-len",
        "512",
        "--output-len",
        "64",
    ]
    r = run_cli(*args, "--concurrency", "4", "--burstiness", "0.5")
    assert r.exit_code != 0 and r.output.startswith("Error:") and "--request-rate" in r.output
    r = run_cli(*args, "--request-rate", "2", "--burstiness", "0")
    assert r.exit_code != 0 and "--burstiness" in r.output and "Traceback" not in r.output
    assert "gaps of shape 0.5" in run_cli(*args, "--request-rate", "2", "--burstiness", "0.5").output


@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "trtllm", "atom"])
def test_closed_form_agrees_with_simulation_on_open_loops(h100, engine_name):
    """Poisson arrivals below saturation: the closed form's mean TTFT (the engine's, the rest of the iteration an
    arrival lands in, and its prompt's queue) and TPOT against a simulation of 3,000 requests, at 30% and 80% of the
    most the engine completes."""
    for name, tp, isl, osl in (("llama-3.1-8b", 1, 2048, 256), ("qwen3-32b", 2, 1024, 512)):
        m = costmodel.load_model(name)
        kw = dict(input_len=isl, output_len=osl, tp=tp, engine_name=engine_name)
        most = serve(
            m, h100, **split(request_rate=1.0, num_requests=1, evaluator="steady-state", **kw)
        ).saturation_requests_per_s
        for share in (0.3, 0.8):
            sim = serve(m, h100, **split(request_rate=share * most, num_requests=3000, **kw))
            cf = serve(m, h100, **split(request_rate=share * most, num_requests=3000, evaluator="steady-state", **kw))
            # ATOM neither mixes nor overlaps: its M/D/1 queue of one prompt's prefill overstates a wait that its
            # prefill batches shorten (Llama 3.1 8B at 80%: 11% high, docs/serving.md)
            tol = 0.15 if engine_name == "atom" and share > 0.5 else 0.1
            assert cf.ttft_s == pytest.approx(sim.ttft_s, rel=tol), (name, share)
            assert cf.tpot_s == pytest.approx(sim.tpot_s, rel=0.05), (name, share)


def test_an_overloaded_open_loop_says_so(run_cli):
    args = [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--input-len",
        "512",
        "--output-len",
        "64",
        "--max-num-seqs",
        "8",
        "--evaluator",
        "steady-state",
    ]
    over = run_cli(*args, "--request-rate", "100")
    assert over.exit_code == 0 and "overloaded: requests arrive at 100/s" in over.output
    assert "measured on deployments that kept up with their load" in over.output  # the range says whose it is
    assert "as many as its sequence limit holds" in over.output
    calm = run_cli(*args, "--request-rate", "2", "--json")
    record = json.loads(calm.output)
    assert record["overloaded"] is False and record["saturation_requests_per_s"] > 2
    assert "overloaded" not in run_cli(*args, "--request-rate", "2").output


# --- validate --serving ------------------------------------------------------------------------------

COLUMNS = [
    "id",
    "silicon_data_source",
    "backend",
    "backend_version",
    "model_path",
    "system",
    "precision",
    "mode",
    "isl",
    "osl",
    "gemm_quant_mode",
    "moe_quant_mode",
    "batch_size",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
] + [
    f"{role}_{k}"
    for role in ("prefill", "decode")
    for k in ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
]


def _row(**kw):
    base = dict(
        id="r",
        silicon_data_source="silicon_concurrency=4",
        backend="vllm",
        backend_version="0.12.0",
        model_path="meta-llama/Llama-3.1-8B-Instruct",
        system="h100_sxm",
        precision="",
        mode="agg",
        isl="512",
        osl="32",
        gemm_quant_mode="",
        moe_quant_mode="",
        batch_size="4.0",
        tp_size="1.0",
        pp_size="1.0",
        attention_dp_size="",
        moe_tp_size="1.0",
        moe_ep_size="1.0",
        silicon_ttft_ms="50",
        silicon_tpot_ms="8",
    )
    return base | kw


def _write(path, rows, columns=COLUMNS):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def test_validate_serving_counts_reasons(tmp_path, run_cli):
    path = tmp_path / "d.csv"
    _write(
        path,
        [
            _row(id="ok"),
            _row(id="unknown", model_path="acme/Nope-7B"),
            _row(id="bad", isl="x"),
            _row(id="ep", moe_ep_size="8"),
            _row(
                id="dis",
                mode="disagg",
                batch_size="",
                tp_size="",
                prefill_num_workers="2.0",
                prefill_tp_size="1.0",
                prefill_batch_size="1.0",
                decode_num_workers="1.0",
                decode_tp_size="2.0",
                decode_batch_size="8.0",
            ),
            _row(
                id="dis-adp",
                mode="disagg",
                batch_size="",
                prefill_attention_dp_size="4.0",
                prefill_num_workers="1.0",
                decode_num_workers="1.0",
            ),
            _row(
                id="dis-ep",
                mode="disagg",
                model_path="Qwen/Qwen3-235B-A22B-FP8",
                precision="fp8",
                gemm_quant_mode="fp8_block",
                batch_size="",
                tp_size="",
                prefill_num_workers="1.0",
                prefill_tp_size="1.0",
                prefill_attention_dp_size="8.0",
                prefill_moe_ep_size="8.0",
                prefill_batch_size="1.0",
                decode_num_workers="1.0",
                decode_tp_size="8.0",
                decode_moe_ep_size="8.0",
                decode_batch_size="8.0",
            ),
            _row(
                id="adp",
                model_path="Qwen/Qwen3-235B-A22B-FP8",
                silicon_data_source="silicon_concurrency=8",
                batch_size="2.0",
                tp_size="2.0",
                attention_dp_size="4.0",
                moe_ep_size="8.0",
                precision="fp8",
                gemm_quant_mode="fp8_block",
            ),
            _row(
                id="adp-tp",
                model_path="Qwen/Qwen3-235B-A22B-FP8",
                tp_size="2.0",
                attention_dp_size="4.0",
                moe_ep_size="2.0",
                precision="fp8",
            ),
            _row(
                id="hyb",
                model_path="Qwen/Qwen3-235B-A22B-FP8",
                tp_size="4.0",
                moe_tp_size="2.0",
                moe_ep_size="2.0",
                precision="fp8",
                gemm_quant_mode="fp8_block",
            ),
            _row(
                id="dis-c", mode="disagg", silicon_data_source="", prefill_num_workers="1.0", decode_num_workers="1.0"
            ),
            _row(id="dis-w", mode="disagg", prefill_num_workers="1.0"),
            _row(
                id="dis-sg",
                mode="disagg",
                backend="sglang",
                batch_size="",
                tp_size="",
                prefill_tp_size="2.0",
                decode_tp_size="2.0",
                decode_num_workers="1.0",
            ),
            _row(id="fp4", precision="fp4", model_path="openai/gpt-oss-120b", system="b200_sxm", backend="trtllm"),
            _row(id="neg", silicon_ttft_ms="-3"),
            _row(
                id="moe",
                model_path="Qwen/Qwen3-235B-A22B-FP8",
                tp_size="8.0",
                moe_ep_size="8.0",
                precision="fp8",
                gemm_quant_mode="fp8_block",
            ),
            _row(id="rep", silicon_data_source="silicon_concurrency=12"),
            _row(id="rep-odd", silicon_data_source="silicon_concurrency=10"),
            _row(id="big", model_path="meta-llama/Llama-3.1-70B", tp_size="1.0"),
        ],
    )
    out = tmp_path / "out.json"
    r = run_cli("validate", "--serving", str(path), "--json", str(out))
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    assert set(report) == {"rows", "skipped", "summary"}
    reasons = {s["id"]: s["reason"] for s in report["skipped"]}
    assert reasons == {
        "unknown": "unknown model",
        "bad": "bad numbers",
        "ep": "expert parallel across other groups",
        "dis-adp": "attention data parallel on a dense model",
        "dis-c": "no concurrency",
        "adp-tp": "attention data parallel without expert parallel over all its devices",
        "dis-w": "disaggregated without worker counts",
        "neg": "bad numbers",
        "rep-odd": "more clients than the batch, not a whole number of replicas",
        "big": reasons["big"],
    }
    # a model whose weights leave its devices no cache for one request is counted apart, with the tp that holds one
    assert reasons["big"].startswith("too big for its devices: ") and "raise tp (tp 2 holds one)" in reasons["big"]
    assert "   1  too big for its devices" in r.output
    # expert parallel over the tp group is modelled, and disaggregated pools, and replicas sharing the clients, and
    # MXFP4 on a GPU with FP4 math
    assert [r["id"] for r in report["rows"]] == ["ok", "dis", "dis-ep", "adp", "hyb", "dis-sg", "fp4", "moe", "rep"]
    # an SGLang row that records no prefill workers takes SGLang's own deployment (one), and says so; vLLM's is refused
    sg = report["rows"][5]
    assert sg["command"][sg["command"].index("--prefill-workers") + 1] == "1"
    assert sg["assumed"] == ["prefill workers 1: the row records none (sglang's own deployment)"]
    assert all("assumed" not in r for r in report["rows"] if r["id"] != "dis-sg")
    report["rows"].pop(5)  # its command re-run below with the others'
    report["rows"].append(sg)
    rep = report["rows"][7]["command"]
    assert rep[rep.index("--replicas") + 1] == "3" and rep[rep.index("--concurrency") + 1] == "12"
    for row in report["rows"]:
        again = run_cli(*row["command"], "--json")
        got = json.loads(again.output)
        assert got["ttft_s"] == row["predicted_ttft_s"] and got["tpot_s"] == row["predicted_tpot_s"]
    assert "--expert-parallel" in report["rows"][6]["command"]
    hyb = report["rows"][4]["command"]
    assert hyb[hyb.index("--expert-parallel-size") + 1] == "2" and "--expert-parallel" not in hyb
    pools = report["rows"][2]["command"]  # a prefill worker of 8 attention data parallel groups, experts over all
    assert pools[pools.index("--prefill-attention-dp") + 1] == "8" and "--prefill-expert-parallel" in pools
    adp = report["rows"][3]["command"]
    assert adp[adp.index("--attention-dp") + 1] == "4" and "--expert-parallel" in adp
    dis = report["rows"][1]["command"]
    assert dis[dis.index("--prefill-workers") + 1] == "2" and dis[dis.index("--decode-tp") + 1] == "2"


def test_attention_data_parallel_rows_with_no_moe_sizes_run_as_their_engine_does():
    """vLLM's data parallel without --enable-expert-parallel shards every expert over all DP x TP devices (its
    docs): a vLLM MoE row with attention data parallel and no MoE sizes is that layout (no --expert-parallel in
    its command); a TensorRT-LLM row the same is refused; recorded sizes of dp x tp say so for any engine."""
    from costmodel.validation.deployments import parse

    row = _row(
        model_path="Qwen/Qwen3-235B-A22B-FP8",
        precision="fp8",
        tp_size="1.0",
        attention_dp_size="4.0",
        moe_tp_size="0.0",
        moe_ep_size="0.0",
        silicon_data_source="silicon_concurrency=8",
        batch_size="2.0",
    )
    d = parse(row)
    assert d.layout.attention_dp == 4 and not d.layout.expert_parallel
    cmd = d.command()
    assert cmd[cmd.index("--attention-dp") + 1] == "4" and "--expert-parallel" not in cmd
    assert parse(row | {"backend": "trtllm"}) == "attention data parallel without expert parallel over all its devices"
    d = parse(row | {"backend": "trtllm", "moe_tp_size": "4.0", "moe_ep_size": "1.0"})
    assert d.layout.attention_dp == 4 and not d.layout.expert_parallel


def test_validate_serving_bad_file(tmp_path, run_cli):
    path = tmp_path / "d.csv"
    _write(path, [_row()], columns=[c for c in COLUMNS if c != "silicon_tpot_ms"])
    out = tmp_path / "out.json"
    r = run_cli("validate", "--serving", str(path), "--json", str(out))
    assert r.exit_code != 0 and r.output.startswith("Error:") and "silicon_tpot_ms" in r.output
    assert not out.exists()
    r = run_cli("validate", "--serving", str(tmp_path / "missing.csv"))
    assert r.exit_code != 0 and "Error:" in r.output and "Traceback" not in r.output


# --- capacity under load -----------------------------------------------------------------------------


def test_capacity_is_the_edge_of_the_targets(llama, h100):
    """At the reported concurrency every target holds and the engine holds every client; one more client
    breaks what ``binds`` names (checked by pricing both points directly)."""
    from costmodel.deploy.capacity import largest_concurrency

    for kw in ({"tpot_s": 0.02}, {"ttft_s": 0.1}, {"tpot_s": 0.05}):
        pt = largest_concurrency(llama, h100, Load(2048, 512), **kw)
        c = pt.concurrency
        here = serve(llama, h100, Load(input_len=2048, output_len=512, concurrency=c), evaluator="steady-state")
        more = serve(llama, h100, Load(input_len=2048, output_len=512, concurrency=c + 1), evaluator="steady-state")
        assert here.tpot_s <= kw.get("tpot_s", 1e9) and here.ttft_s <= kw.get("ttft_s", 1e9)
        assert here.max_batch >= c
        broken = {
            "tpot": more.tpot_s > kw.get("tpot_s", 1e9),
            "ttft": more.ttft_s > kw.get("ttft_s", 1e9),
            "kv cache": more.max_batch < c + 1,
        }
        assert broken[pt.binds], (kw, pt.binds, c)


@pytest.mark.parametrize("statistic", ["mean", "p90"])
def test_the_highest_rate_is_the_edge_of_the_targets(llama, h100, statistic):
    """At the reported arrival rate every target holds and the engine keeps up; 2% of its most higher (twice the
    search's precision), what ``binds`` names fails: a target, or saturation (the arrivals reach the most it
    completes). Checked by pricing both rates directly, with the evaluator the search used."""
    from costmodel.deploy.capacity import RATE_PRECISION, highest_rate

    evaluator = "steady-state" if statistic == "mean" else "simulation"
    get = (lambda s: s.mean) if statistic == "mean" else (lambda s: s.p90)
    kw = dict(input_len=1024, output_len=128)
    binds = set()
    for targets in ({"tpot_s": 0.02}, {"ttft_s": 0.15}, {"tpot_s": 0.2}):
        pt = highest_rate(llama, h100, Load(1024, 128, num_requests=300), statistic=statistic, **targets)
        most = serve(
            llama, h100, **split(request_rate=1.0, num_requests=1, evaluator="steady-state", **kw)
        ).saturation_requests_per_s
        here = serve(llama, h100, **split(request_rate=pt.request_rate, num_requests=300, evaluator=evaluator, **kw))
        higher = serve(
            llama,
            h100,
            **split(
                request_rate=pt.request_rate + 2 * RATE_PRECISION * most, num_requests=300, evaluator=evaluator, **kw
            ),
        )
        assert pt.concurrency is None and 0 < pt.request_rate < most and not here.overloaded
        assert get(here.tpot) <= targets.get("tpot_s", 1e9) and get(here.ttft) <= targets.get("ttft_s", 1e9)
        broken = {
            "tpot": get(higher.tpot) > targets.get("tpot_s", 1e9),
            "ttft": get(higher.ttft) > targets.get("ttft_s", 1e9),
            "saturation": higher.overloaded,
        }
        assert broken[pt.binds], (targets, pt.binds, pt.request_rate)
        binds.add(pt.binds)
    assert "saturation" in binds and len(binds) > 1


def test_capacity_by_request_rate_on_the_command_line(run_cli):
    args = [
        "capacity",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-8b",
        "--input-len",
        "1024",
        "--output-len",
        "128",
        "--tpot-ms",
        "200",
        "--no-variants",
    ]
    r = run_cli(*args, "--load", "request-rate", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    point = report["points"][0]
    assert report["load"] == "request-rate" and point["concurrency"] is None and point["binds"] == "saturation"
    assert point["request_rate"] == pytest.approx(point["at"]["request_rate"])
    assert " req/s " in run_cli(*args, "--load", "request-rate").output
    bad = run_cli(*args, "--batching", "static", "--load", "request-rate")
    assert bad.exit_code != 0 and bad.output.startswith("Error:") and "--load" in bad.output


def test_static_batching_keeps_its_answer(run_cli):
    """`--batching static` is the largest static batch, as costmodel.model.requests.capacity computes it."""
    from costmodel.model.requests import capacity

    r = run_cli(
        "capacity",
        "--gpu",
        "h100",
        "--model",
        "llama-3-8b",
        "--input-len",
        "512",
        "--output-len",
        "64",
        "--tpot-ms",
        "30",
        "--batching",
        "static",
        "--no-variants",
        "--json",
    )
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)["points"][0]["batch"]
    want = (
        capacity(
            costmodel.load_model("llama-3-8b"),
            [costmodel.load_profile("h100")],
            input_len=512,
            output_len=64,
            tpot_s=0.03,
            variants=False,
        )
        .points[0]
        .batch
    )
    assert got == want > 0


def test_lengths_file(tmp_path, run_cli):
    """A file of lengths is taken in order: one client sends them one after the other, so the run's tokens
    out are the file's output tokens; bad lines are refused by number."""
    good = tmp_path / "lengths.csv"
    good.write_text("input,output\n100,20\n300,50\n")
    r = run_cli(
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--concurrency",
        "1",
        "--num-requests",
        "4",
        "--lengths-file",
        good,
        "--json",
    )
    assert r.exit_code == 0, r.output
    p = json.loads(r.output)
    assert p["num_requests"] == 4 and p["input_len"] == 200 and p["output_len"] == 35
    # Little's law on one client, in the engine: requests/s x mean end-to-end there = 1 (the front end's latency,
    # added to each request's times, does not hold the engine)
    from costmodel.engine.served import OVERHEADS

    front = OVERHEADS["vllm"]["request_s"]
    assert p["requests_per_s"] * (p["e2e_s"] - front) == pytest.approx(1.0, rel=1e-9)
    bad = tmp_path / "bad.csv"
    bad.write_text("100,20\n7\n")
    r = run_cli(
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--concurrency",
        "1",
        "--lengths-file",
        bad,
    )
    assert r.exit_code != 0 and r.output.startswith("Error:") and "line 2" in r.output


def test_warmup_requests_leave_the_first_wave_out(llama, h100):
    """All clients start at once, so the first wave queues for prefill: leaving it out (as aiperf's warm-up
    count does) lowers the mean TTFT to the steady one, and the statistics count only the measured requests."""
    kw = dict(input_len=2000, output_len=64, concurrency=16, num_requests=160, overheads=OFF)
    cold = serve(llama, h100, **split(**kw))
    warm = serve(llama, h100, **split(**kw, warmup_requests=16))
    assert warm.num_requests == cold.num_requests == 160
    assert warm.ttft_s < cold.ttft_s
    assert warm.requests_per_s * warm.e2e_s == pytest.approx(16, rel=0.05)  # Little's law in the measured window


def test_engine_options_need_a_served_model(run_cli):
    r = run_cli("predict", "--gpu", "h100", "--model", "llama-3-8b", "--max-num-seqs", "8")
    assert r.exit_code != 0 and "--max-num-seqs applies to a served model" in r.output
    r = run_cli("predict", "--gpu", "h100", "--model", "llama-3-8b", "--no-enable-prefix-caching")
    assert r.exit_code != 0 and "--enable-prefix-caching applies to a served model" in r.output


def test_prefix_caching_is_the_engines_and_settable(run_cli):
    base = [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-8b",
        "--concurrency",
        "2",
        "--input-len",
        "128",
        "--output-len",
        "8",
        "--json",
    ]
    got = {}
    for engine_name in ("vllm", "sglang"):
        for flag in ((), ("--no-enable-prefix-caching",), ("--enable-prefix-caching",)):
            r = run_cli(*base, "--engine", engine_name, *flag)
            assert r.exit_code == 0, r.output
            got[engine_name, flag] = json.loads(r.output)["engine"]["prefix_caching"]
    assert got["vllm", ()] is True and got["sglang", ()] is False
    assert not got["vllm", ("--no-enable-prefix-caching",)] and got["sglang", ("--enable-prefix-caching",)]


def test_the_iteration_grid_is_the_step_it_interpolates(llama, h100):
    """Off the grid points, a pure decode iteration and a lone whole prompt interpolated from the table are within
    2% of the same iteration priced directly by the model step's ops."""
    from costmodel.engine.served import iteration_table

    pr = pricing(llama, h100)
    table = iteration_table(llama, pr, 8192, 512, 8192)
    for d, ctx in ((7, 1000), (50, 3000), (333, 777)):
        grid = table.time(decode_seqs=d, decode_context_sum=d * ctx, chunks=[], outputs=d).total_s
        assert grid == pytest.approx(exact_time(llama, pr, decode_seqs=d, decode_context=ctx, prompt=0), rel=0.02)
    for n in (17, 1000, 3000, 5000):
        grid = table.time(decode_seqs=0, decode_context_sum=0, chunks=[(0, n)], outputs=1).total_s
        assert grid == pytest.approx(exact_time(llama, pr, decode_seqs=0, decode_context=0, prompt=n), rel=0.02)


@pytest.mark.parametrize(
    "model,tp,ep",
    [("llama-3-8b", 1, False), ("qwen3-235b-a22b-fp8", 4, True), ("deepseek-v3", 8, False), ("gemma-2-9b", 1, False)],
)
def test_the_iteration_grid_priced_at_once_is_each_point_priced_alone(h100, model, tp, ep):
    """The table evaluates the step's compiled programs on arrays of sizes; at every grid point that is the
    model step priced at that one size (dense, expert parallel, latent attention, sliding windows)."""
    from costmodel.engine.iteration import IterationTable, _parts

    m = costmodel.load_model(model)
    pr = pricing(m, h100, tp=tp, expert_parallel=ep)
    table = IterationTable(m, pr, max_tokens=2048, max_seqs=64, max_context=4096)
    one = lambda phase, b, ctx: _parts(m, pr, phase, b, ctx)  # noqa: E731
    for i, t in enumerate(table.t_grid):
        alone = one("decode", int(t), 1)
        assert table.token[i] == pytest.approx(float(alone["token"]), rel=1e-12)
        assert table.comm[i] == pytest.approx(float(alone["comm"]), rel=1e-12, abs=1e-15)
    for i, d in enumerate(table.d_grid[::7]):
        for j, c in enumerate(table.c_grid[::9]):
            alone = one("decode", int(d), max(int(c), 1))
            assert table.decode_attention[7 * i, 9 * j] == pytest.approx(float(alone["attention"]), rel=1e-12)
        assert table.head[7 * i] == pytest.approx(float(alone["head"]), rel=1e-12)
    for n, a in zip(table.c_grid[1::5], table.prompt_attention[1::5]):
        assert a == pytest.approx(float(one("prefill", 1, int(n))["attention"]), rel=1e-12)


def test_mxfp4_weights_as_hopper_runs_them():
    """An MXFP4 checkpoint on an H100 (no FP4 math): 4-bit weights and one 8-bit scale per 32 (4.25 bits), read
    and multiplied in bf16; the served rows of gpt-oss-120b are predicted on an H100 and on a GPU with FP4 math.
    FP4 rows of other models are NVFP4."""
    from costmodel.model.memory import weight_width
    from costmodel.validation.deployments import parse

    assert weight_width("mxfp4", 32) == (4 + 8 / 32) / 8
    pr = pricing(costmodel.load_model("gpt-oss-120b"), costmodel.load_profile("h100"), weight_dtype="mxfp4", tp=2)
    assert pr.gemm_dtype is None and pr.group == 32  # dequantized in the kernel
    row = _row(
        model_path="openai/gpt-oss-120b",
        precision="fp4",
        gemm_quant_mode="nvfp4",
        moe_quant_mode="nvfp4",
        tp_size="2.0",
        moe_tp_size="2.0",
    )
    assert parse(row).weight_dtype == "mxfp4"
    assert parse({**row, "model_path": "Qwen/Qwen3-32B"}).weight_dtype == "nvfp4"
    assert parse({**row, "model_path": "Qwen/Qwen3-32B", "system": "b200_sxm"}).weight_dtype == "nvfp4"
    assert parse({**row, "system": "b200_sxm"}).weight_dtype == "mxfp4"


def test_mxfp4_experts_on_a_gpu_with_fp4_math_take_the_engines_activations(run_cli):
    """On a B200 an engine feeding MXFP4 experts MXFP8 activations (SGLang's and TensorRT-LLM's default) runs the
    experts' GEMMs at the fp8 peak and every other GEMM in bf16; vLLM's default (bf16 activations) and an H100 (no
    FP4 math, whatever is asked) run them all in bf16. The bytes read are the same 4.25-bit weights either way."""
    from costmodel.model.step import phase_ops

    m, b200, h100 = costmodel.load_model("gpt-oss-120b"), costmodel.load_profile("b200"), costmodel.load_profile("h100")
    assert [engine(e, capacity_bytes=b200.engine_memory).mxfp4_activations for e in ("vllm", "sglang", "trtllm")] == [
        "bf16",
        "mxfp8",
        "mxfp8",
    ]

    def gemms(hw, activations):
        pr = pricing(m, hw, weight_dtype="mxfp4", tp=2, mxfp4_activations=activations)
        ops = phase_ops(m, pr, "prefill", 1, 2048, 1)
        return {(s.section, s.name): (s.op.dtype, s.op.bytes) for s in ops if s.op.kind == "projection"}

    fast, slow, hopper = gemms(b200, "mxfp8"), gemms(b200, "bf16"), gemms(h100, "mxfp8")
    experts = {("experts", "experts_gate_up"), ("experts", "experts_down")}
    assert experts < set(fast) and ("self-attention", "qkv_proj") in fast
    assert {n for n, (dtype, _) in fast.items() if dtype == "fp8"} == experts
    assert {dtype for dtype, _ in slow.values()} == {dtype for dtype, _ in hopper.values()} == {"bf16"}
    assert {n: b for n, (_, b) in fast.items()} == {n: b for n, (_, b) in slow.items()}
    r = run_cli(
        "predict",
        "--gpu",
        "b200",
        "--model",
        "gpt-oss-120b",
        "--weight-dtype",
        "mxfp4",
        "--engine",
        "trtllm",
        "--concurrency",
        "2",
        "--input-len",
        "64",
        "--output-len",
        "4",
        "--mxfp4-activations",
        "fp6",
    )
    assert r.exit_code != 0 and "fp6" in r.output and "bf16" in r.output


def test_nvfp4_weights_at_the_fp4_peak_where_a_gpu_has_one():
    """NVFP4: 4-bit weights and an FP8 scale per 16 (4.5 bits, by hand). On a B200 (fp4 math) a projection runs at
    the fp4 peak in the NVFP4 GEMM class fitted on the B200's table; on an H100 (none) the same weights are read at
    4.5 bits and multiplied in bf16. The parameters do not depend on the precision."""
    from costmodel.model.memory import param_count, weight_bytes, weight_width
    from costmodel.model.step import op_time, phase_ops

    assert weight_width("nvfp4", 16) == (4 + 8 / 16) / 8 == 0.5625
    m = costmodel.load_model("llama-3.1-8b")
    b200, h100 = costmodel.load_profile("b200"), costmodel.load_profile("h100")
    fast, slow = pricing(m, b200, weight_dtype="nvfp4"), pricing(m, h100, weight_dtype="nvfp4")
    assert (fast.gemm_dtype, fast.group, slow.gemm_dtype) == ("fp4", 16, None)
    up = {s.name: s for s in phase_ops(m, fast, "decode", 8, 1024, 1)}["ffn_gate_up"]
    assert (up.op.dtype, op_time(up, fast).cls) == ("fp4", "gemm_nvfp4")
    weights = m.d_model * 2 * m.d_ff  # gate and up, one layer
    assert up.op.bytes == 2 * (8 * m.d_model + 8 * 2 * m.d_ff) + 0.5625 * weights  # x, out in bf16; the weights
    same = {s.name: s for s in phase_ops(m, slow, "decode", 8, 1024, 1)}["ffn_gate_up"]
    assert (same.op.dtype, op_time(same, slow).cls, same.op.bytes) == ("bf16", "gemm", up.op.bytes)
    lm_head = {s.name: s for s in phase_ops(m, fast, "decode", 8, 1024, 1)}["lm_head"]
    assert lm_head.op.dtype == "bf16"  # the output projection stays in the activation dtype
    d, f, kv, L = m.d_model, m.d_ff, m.kv_heads * m.head_dim, m.layers  # by hand: the layers' projections at 4.5
    projections = L * (2 * d * d + 2 * d * kv + 3 * d * f)  # bits, embeddings (untied) and norms in bf16
    assert weight_bytes(m, fast) == 0.5625 * projections + 2 * (2 * m.vocab * d + (2 * L + 1) * d)
    assert param_count(m) == costmodel.predict_model(m, b200, weight_dtype="nvfp4").model.params


def test_an_nvfp4_checkpoint_reads_as_nvfp4(tmp_path):
    import json as _json

    cfg = {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 100,
        "intermediate_size": 128,
        "hidden_act": "silu",
        "model_type": "llama",
        "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
    }
    (tmp_path / "config.json").write_text(_json.dumps(cfg))
    q = costmodel.load_model(str(tmp_path / "config.json")).quantization
    assert (q.weight_dtype, q.group_size) == ("nvfp4", 16)


def test_each_launcher_gives_the_engine_its_token_budget():
    """A row's token budget is its launcher's: aiconfigurator's generator (no image recorded, or a Dynamo image)
    gives TensorRT-LLM batch + isl + 1500 tokens in whole 32-token blocks (8 + 1024 + 1500 = 2532 -> 80 blocks =
    2560, by hand) and vLLM none of its own (vLLM's scheduler default, 2048); an engine's own server image keeps
    the engine's default; the command carries the budget."""
    from costmodel.validation.deployments import parse

    trt = _row(backend="trtllm", batch_size="8.0", isl="1024", silicon_data_source="silicon_concurrency=8")
    assert parse(trt).max_num_batched_tokens == 2560
    assert parse({**trt, "isl": "1020"}).max_num_batched_tokens == 2528  # 2528 = 79 blocks exactly
    dynamo = "silicon_concurrency=8; image=nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.0"
    assert parse({**trt, "silicon_data_source": dynamo}).max_num_batched_tokens == 2560
    assert parse(_row()).max_num_batched_tokens == 2048
    own = parse(_row(silicon_data_source="silicon_concurrency=4; image=vllm/vllm-openai:v0.18.0"))
    assert own.max_num_batched_tokens is None and "--max-num-batched-tokens" not in own.command()
    cmd = parse(trt).command()
    assert cmd[cmd.index("--max-num-batched-tokens") + 1] == "2560"


def test_aiconfigurators_trtllm_engines_keep_their_templates_kv_share():
    """aiconfigurator's generator gives TensorRT-LLM free_gpu_memory_fraction 0.80 (its template default); an engine's
    own server and every vLLM row keep their engine's default (None). TensorRT-LLM's cache is that fraction of what the
    weights and activations leave, so at 0.80 it is 8/9 of the 0.9 default's, by hand; the command carries it and
    reproduces the prediction's setting."""
    from costmodel.engine.config import engine
    from costmodel.engine.served import Setup
    from costmodel.model.pricing import pricing
    from costmodel.validation.deployments import parse
    from costmodel.validation.launchers import DYNAMO_TRTLLM_KV_FRACTION

    trt = _row(backend="trtllm", batch_size="8.0", isl="1024", silicon_data_source="silicon_concurrency=8")
    d = parse(trt)
    assert d.memory_fraction == DYNAMO_TRTLLM_KV_FRACTION == 0.80
    cmd = d.command()
    assert cmd[cmd.index("--free-gpu-memory-fraction") + 1] == "0.8"
    own = parse({**trt, "silicon_data_source": "silicon_concurrency=8; image=nvcr.io/nvidia/tensorrt-llm/release:1.0"})
    assert own.memory_fraction is None and "--free-gpu-memory-fraction" not in own.command()
    assert parse(_row()).memory_fraction is None
    m, hw = costmodel.load_model("llama-3.1-8b"), costmodel.load_profile("h100_sxm")
    budgets = []
    for fraction in (0.9, 0.8):
        eng = engine("trtllm", capacity_bytes=hw.engine_memory, tp=1).with_flags(memory_fraction=fraction)
        budgets.append(Setup(m, pricing(m, hw, **eng.kernels), eng, max_context=1056).kv_budget)
    assert budgets[1] / budgets[0] == pytest.approx(8 / 9, rel=1e-12)


def test_the_published_systems_are_profiles():
    """Every system id the deployments files name maps to a shipped profile (the Blackwell Ultra and NVL72 parts
    included), through the profiles' ids and aliases, and a row on one of them is predicted with that profile."""
    from costmodel.validation.deployments import parse
    from costmodel.validation.launchers import profile_of

    systems = {
        "h100_sxm": "h100_sxm",
        "h200_sxm": "h200_sxm",
        "b200_sxm": "b200",
        "a100_sxm": "a100_80gb_sxm",
        "l40s": "l40s",
        "b300_sxm": "b300",
        "gb200": "gb200",
        "gb300": "gb300",
        "rtx_pro_6000_server": "rtx_pro_6000_server",
        "h800_sxm": "h800_sxm",
    }
    for system, profile in systems.items():
        assert profile_of(system) == profile == costmodel.load_profile(profile).id, system
    for system in ("b300_sxm", "gb200", "gb300", "h800_sxm"):
        d = parse(_row(system=system))
        assert d.command()[d.command().index("--gpu") + 1] == systems[system]
    assert parse(_row(system="mi999")) == "unknown system mi999"
    # MXFP4 is predicted where the device has FP4 math and where it has none
    oss = _row(model_path="openai/gpt-oss-120b", precision="fp4", tp_size="2.0", moe_tp_size="2.0")
    assert parse({**oss, "system": "gb300"}).weight_dtype == parse({**oss, "system": "h20"}).weight_dtype == "mxfp4"


def test_rows_name_models_and_precisions_as_aiconfigurator_writes_them():
    """A mixture of experts' weights follow its experts' quant mode (Kimi K2.5's int4 experts beside bf16 GEMMs);
    aiconfigurator's mode names map to the formats they run (int4_wo as W4A16 int4); NVIDIA's quantized checkpoints
    are priced as the model their name carries, at the row's precision; a mode whose math is not modelled (w4afp8)
    and a checkpoint of an unknown model are refused by name."""
    from costmodel.validation.deployments import parse

    kimi = parse(
        _row(
            model_path="moonshotai/Kimi-K2.5",
            system="b200_sxm",
            tp_size="8.0",
            moe_tp_size="1.0",
            moe_ep_size="8.0",
            gemm_quant_mode="bfloat16",
            moe_quant_mode="int4_wo",
            backend="trtllm",
        )
    )
    assert kimi.weight_dtype == "int4" and "--expert-parallel" in kimi.command()
    assert costmodel.load_model(kimi.model_name).moe.experts == 384
    fp4 = parse(
        _row(
            model_path="nvidia/Qwen3-32B-NVFP4",
            system="b200_sxm",
            precision="fp4",
            gemm_quant_mode="nvfp4",
            moe_quant_mode="nvfp4",
        )
    )
    assert fp4.weight_dtype == "nvfp4" and fp4.model_path == "nvidia/Qwen3-32B-NVFP4"
    cmd = fp4.command()
    assert cmd[cmd.index("--model") + 1] == "qwen3_32b"
    assert (
        parse(
            _row(model_path="nvidia/DeepSeek-R1-0528-FP4-v2", precision="fp4", tp_size="8.0", moe_tp_size="8.0")
        ).model_name
        == "deepseek_v3"
    )
    assert parse(_row(model_path="nvidia/Nope-9B-NVFP4")) == "unknown model"
    assert costmodel.load_model("Llama-3.3-70B-Instruct").id == "llama_3_3_70b"  # an id without its owner
    # an MXFP4 mode that names the activations sets them, whatever the engine's default
    oss = _row(model_path="openai/gpt-oss-120b", system="b200_sxm", precision="fp4", tp_size="2.0", moe_tp_size="2.0")
    named = {mode: parse({**oss, "moe_quant_mode": mode}) for mode in ("w4a8_mxfp4_mxfp8", "w4a16_mxfp4", "nvfp4")}
    assert [d.mxfp4_activations for d in named.values()] == ["mxfp8", "bf16", None]
    assert {d.weight_dtype for d in named.values()} == {"mxfp4"}
    cmd = named["w4a8_mxfp4_mxfp8"].command()
    assert (
        cmd[cmd.index("--mxfp4-activations") + 1] == "mxfp8" and "--mxfp4-activations" not in named["nvfp4"].command()
    )
    assert (
        parse(_row(model_path="deepseek-ai/DeepSeek-R1", moe_quant_mode="w4afp8", tp_size="8.0", moe_tp_size="8.0"))
        == "precision w4afp8"
    )


def test_pricing_options_an_engine_does_not_take_are_refused(run_cli):
    base = [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--concurrency",
        "2",
        "--input-len",
        "100",
        "--output-len",
        "10",
    ]
    for extra in (["--without", "tiles"], ["--overlap", "sum"], ["--execution", "unfused"]):
        r = run_cli(*base, *extra)
        assert r.exit_code != 0 and f"{extra[0]} does not apply to a served model" in r.output


def test_capacity_where_the_weights_leave_no_cache():
    """Llama 3 70B in bf16 on one 24 GB L4: no client fits, and the cache is what binds."""
    from costmodel.deploy.capacity import load_capacity

    report = load_capacity(
        costmodel.load_model("llama-3-70b"),
        [costmodel.load_profile("l4")],
        Load(512, 64),
        tpot_s=0.1,
        variants=False,
    )
    [point] = report.points
    assert point.concurrency == 0 and point.binds == "kv cache" and point.at is None


def test_a_model_too_big_for_its_devices_is_told_the_smallest_tp_that_holds_a_request(run_cli):
    """Llama 3.1 70B in bf16 (141 GB) on one H100 under vLLM: the error names tp 2, the smallest power of two whose
    devices hold the weights and one request's cache; tp 2 runs, and one device does not."""
    args = [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "meta-llama/Llama-3.1-70B",
        "--engine",
        "vllm",
        "--concurrency",
        "4",
        "--input-len",
        "1024",
        "--output-len",
        "64",
        "--num-requests",
        "8",
    ]
    bad = run_cli(*args)
    assert bad.exit_code != 0 and "raise tp (tp 2 holds one)" in bad.output and "Traceback" not in bad.output
    assert run_cli(*args, "--tp", "2").exit_code == 0
    # DeepSeek-V3's 673 GB: 8 H100s hold 84 GB each, more than a device has; 16 hold one request
    big = run_cli(
        "predict",
        "--gpu",
        "h100",
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--engine",
        "vllm",
        "--concurrency",
        "4",
        "--input-len",
        "1024",
        "--output-len",
        "64",
        "--num-requests",
        "8",
    )
    assert "raise tp (tp 16 holds one)" in big.output


def test_a_served_prediction_says_whose_kernels_it_prices(llama):
    """The kernel classes are fitted on vLLM's kernels as aiconfigurator's tables time them (vLLM 0.19.0 on the
    H100, 0.14.0 on the A100, read from the tables' file names): a served prediction says so, and says when the
    engine modelled runs kernels of its own; a device priced by its datasheet alone says nothing of the kind."""

    def line(gpu, engine_name):
        p = serve(
            llama,
            costmodel.load_profile(gpu),
            Load(input_len=128, output_len=8, concurrency=2, num_requests=4),
            engine_name=engine_name,
        )
        return [a for a in p.assumptions if a.startswith("kernel times")]

    assert "vLLM 0.19.0's kernels as timed on h100_sxm" in line("h100", "vllm")[0]
    assert "TensorRT-LLM's own kernels were timed on h100_sxm" in line("h100", "trtllm")[0]
    assert "SGLang's own for decode_attention" in line("h100", "sglang")[0]
    # the A100's own fit of every class keeps it; SGLang's timed kernels are named
    assert (
        "vLLM 0.14.0" in line("a100", "vllm")[0]
        and "SGLang's own kernels were timed on h100_sxm" in line("a100", "sglang")[0]
    )
    # another vendor's GPU says its kernels are the H100's, carried to it, and that none of its own were timed
    (amd,) = line("mi300x", "vllm")
    assert "as timed on h100_sxm" in amd and "to AMD's mi300x" in amd and "no kernel of its own stack" in amd
    assert line("tpu-v5p", "vllm") == []  # a datasheet-only device prices no kernel class


def test_sglang_sizes_its_memory_from_the_device(h100):
    """SGLang's own rule (server_args._handle_gpu_memory_settings), by hand: an H100 reports 81,559 MiB; below 160
    GiB the chunk is 8192 and the CUDA graphs' largest batch 256 (tp < 4) or 512; it reserves 512 MiB + 1.5 MiB per
    chunk token + 2 MiB per graph batch + tp/8 GiB (at least 10 GiB) and keeps the rest for weights and cache."""
    for tp, graph in ((1, 256), (2, 256), (4, 512), (8, 512)):
        e = engine("sglang", capacity_bytes=h100.engine_memory, device_name=h100.name, tp=tp)
        reserved = 512 + 8192 * 1.5 + graph * 2 + tp * 128
        assert e.max_num_batched_tokens == 8192
        assert e.memory_fraction == round((81559 - reserved) / 81559, 3)
    assert engine("sglang", capacity_bytes=h100.engine_memory, tp=1).memory_fraction == 0.835
    b200 = engine("sglang", capacity_bytes=180e9, tp=8)  # 171,661 MiB: above 160 GiB, a chunk of 16384
    assert b200.max_num_batched_tokens == 16384
    assert b200.memory_fraction == round((180e9 / 2**20 - (512 + 16384 * 1.5 + 1024 + 1024)) / (180e9 / 2**20), 3)


class _EveryIteration:
    """An iteration table whose every iteration takes ``t`` seconds, whatever it carries."""

    def __init__(self, t):
        self.t = t

    def others_for(self, running, ratio):
        return None

    def decode_run(self, d, ctx, steps, others, per_step=1.0, slots=1):
        return np.full(steps, self.t)

    def decode_comm(self, tokens, others, seqs=None):
        return 0.0

    def time(self, **kw):
        from types import SimpleNamespace

        return SimpleNamespace(total_s=self.t, prefill_s=0.0, decode_s=self.t, comm_s=0.0)


@pytest.mark.parametrize("overlapped", [False, True])
def test_async_scheduling_by_hand(h100, overlapped):
    """Two clients, iterations of 1 ms. Requests 0 and 1 start together (first tokens at 1 ms) and request 0's
    three tokens end at 3 ms, when its client sends request 2. Planned as iteration 3 ends, iteration 4 takes
    request 2 (its first token at 4 ms: TTFT 1 ms); planned while iteration 3 runs (from 2 ms), iteration 4 cannot,
    and iteration 5 does (first token at 5 ms: TTFT 2 ms). An idle engine takes a request at once either way."""
    eng = engine("vllm", capacity_bytes=h100.engine_memory, device_name=h100.name).with_flags(
        async_scheduling=overlapped
    )
    res = simulate(
        _EveryIteration(1e-3),
        eng,
        kv_tokens=4096,
        prompts=np.full(3, 10),
        outputs=np.array([3, 5, 3]),
        concurrency=2,
        check=True,
    )
    assert res.violations == []
    assert res.arrival.tolist() == pytest.approx([0.0, 0.0, 3e-3])
    assert res.ttft.tolist() == pytest.approx([1e-3, 1e-3, 2e-3 if overlapped else 1e-3])
    alone = simulate(
        _EveryIteration(1e-3), eng, kv_tokens=4096, prompts=np.full(3, 10), outputs=np.full(3, 3), concurrency=1
    )
    assert alone.ttft.tolist() == pytest.approx([1e-3] * 3)


@pytest.mark.parametrize("evaluator", ["simulation", "steady-state"])
def test_replicas_share_the_clients(llama, h100, evaluator):
    """Four replicas under 32 clients are four copies of one engine under 8: each request's latencies are the same,
    the throughput four times one's (Little's law: clients = requests/s x end-to-end time, for both), per device
    the same, and every request counted."""
    kw = dict(input_len=1024, output_len=128, evaluator=evaluator, engine_name="vllm")
    one = serve(llama, h100, **split(concurrency=8, **kw))
    four = serve(llama, h100, **split(concurrency=32, replicas=4, **kw))
    assert (four.ttft_s, four.tpot_s, four.e2e_s) == (one.ttft_s, one.tpot_s, one.e2e_s)
    assert four.requests_per_s == pytest.approx(4 * one.requests_per_s)
    assert four.output_tokens_per_s_per_device == pytest.approx(one.output_tokens_per_s_per_device)
    assert four.num_requests == 4 * one.num_requests and four.concurrency == 32 and four.replicas == 4
    assert four.requests_per_s * four.e2e_s == pytest.approx(32, rel=0.1)
    assert any(a.startswith("data parallel: 4 replicas") for a in four.assumptions)
    with pytest.raises(CostModelError, match="multiple of replicas 4"):
        serve(llama, h100, **split(concurrency=30, replicas=4, **kw))


def test_a_clients_connections_by_hand():
    """Three clients and two connections: requests 0 and 1 start at once, request 2 (sent at 0 too) waits for the
    first finish; each later request is sent when its client's last one finishes, the (n - 3)-th finish, and the
    engine gets it at the (n - 2)-th."""
    from costmodel.engine.simulate import SimResult, client_queue

    # the engine's closed loop of two: starts at 0, 0, then at each finish
    finish = np.array([4.0, 5.0, 9.0, 11.0, 14.0])
    arrival = np.array([0.0, 0.0, 4.0, 5.0, 9.0])
    res = SimResult(
        arrival=arrival, first=arrival + 1, finish=finish, output=np.full(5, 8), iterations=0, prefill_iterations=0
    )
    got = client_queue(res, 3)
    assert list(got.arrival) == [0.0, 0.0, 0.0, 4.0, 5.0]
    assert list(got.ttft) == [1.0, 1.0, 5.0, 2.0, 5.0] and list(got.tpot) == list(res.tpot)


@pytest.mark.parametrize("evaluator", ["simulation", "steady-state"])
def test_fewer_connections_than_clients(llama, h100, evaluator):
    """With as many connections as clients nothing changes; with fewer, the engine runs what the connections hold
    (TPOT as at that concurrency), the others wait in the client: Little's law over the client's requests holds
    (throughput x end-to-end = clients), and the two evaluators agree."""
    kw = dict(input_len=512, output_len=64, engine_name="vllm", num_requests=600, evaluator=evaluator)
    alone = serve(llama, h100, **split(concurrency=24, **kw))
    assert serve(llama, h100, **split(concurrency=24, client_connections=24, **kw)).model_dump() == alone.model_dump()
    capped = serve(llama, h100, **split(concurrency=60, client_connections=24, **kw))
    assert capped.tpot_s == pytest.approx(alone.tpot_s, rel=0.02)
    assert capped.requests_per_s * capped.e2e_s == pytest.approx(60, rel=0.05)
    assert capped.ttft_s > alone.ttft_s + (60 - 24) / capped.requests_per_s * 0.9
    assert any("holds 24 connections" in a for a in capped.assumptions)


def test_connections_agree_across_evaluators(llama, h100):
    """Steady-state means (lengths spread so requests do not move in lock-step, the first wave left out): the
    closed form's client wait, (clients - connections) / throughput, within 5% of the simulation's."""
    spread = dict(input_dist="uniform", output_dist="uniform", spread=0.25)
    got = {
        ev: serve(
            llama,
            h100,
            **split(
                input_len=512,
                output_len=64,
                concurrency=60,
                client_connections=24,
                num_requests=1800,
                warmup_requests=120,
                evaluator=ev,
                **spread if ev == "simulation" else {},
            ),
        )
        for ev in ("simulation", "steady-state")
    }
    for field in ("ttft_s", "tpot_s", "e2e_s"):
        assert got["steady-state"].model_dump()[field] == pytest.approx(
            got["simulation"].model_dump()[field], rel=0.05
        ), field


def test_connections_need_a_closed_loop(llama, h100, run_cli):
    with pytest.raises(CostModelError, match="client_connections"):
        serve(llama, h100, Load(input_len=512, output_len=64, request_rate=2.0, client_connections=10))
    out = run_cli(
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--request-rate",
        "2",
        "--client-connections",
        "10",
        "--input-len",
        "512",
        "--output-len",
        "64",
    )
    assert out.exit_code != 0 and "Error: --client-connections applies with --concurrency" in out.output
    out = run_cli(
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--concurrency",
        "8",
        "--client-connections",
        "4",
        "--disaggregated",
        "--input-len",
        "512",
        "--output-len",
        "64",
    )
    assert out.exit_code != 0 and "--client-connections does not apply with --disaggregated" in out.output


def test_range_lengths_are_drawn_as_benchmark_serving_draws_them():
    """``range`` draws uniform integers from int(len x (1 - spread)) to len, both ends included (vLLM's
    benchmark_serving.py ``sample_uniform`` with --random-range-ratio 0.8 for spread 0.2): 1024 gives 819..1024, each
    value about equally often, mean (819 + 1024) / 2."""
    from costmodel.engine.load import lengths

    x = lengths("range", 1024, 200_000, spread=0.2, seed=3)
    assert x.min() == 819 and x.max() == 1024  # int(1024 * 0.8) = int(819.2)
    assert x.mean() == pytest.approx((819 + 1024) / 2, abs=0.5)
    counts = np.bincount(x - 819)
    assert len(counts) == 206 and counts.min() > 0.8 * counts.mean()
    assert (lengths("range", 7, 50, spread=0.0) == 7).all()
    assert lengths("range", 1, 50, spread=0.5).min() == 1  # int(0.5) = 0 tokens would be no request


def test_the_engine_front_end_moves_ttft_by_its_latency_alone(llama, h100):
    """A front end adds its latency to every TTFT and end-to-end time and holds nothing: the same load behind vLLM's
    own server (``frontend="engine"``) differs from it behind Dynamo's by exactly the two latencies' difference, with
    the same TPOT and throughput; an engine whose own server is not measured apart takes Dynamo's value, and says
    so; an unknown front end is refused by name."""
    from costmodel.engine.served import ENGINE_FRONT_END_S, OVERHEADS

    kw = dict(input_len=512, output_len=32, concurrency=4, num_requests=16)
    dyn, own = (serve(llama, h100, **split(engine_name="vllm", frontend=f, **kw)) for f in ("dynamo", "engine"))
    gap = OVERHEADS["vllm"]["request_s"] - ENGINE_FRONT_END_S["vllm"]
    assert dyn.ttft_s - own.ttft_s == pytest.approx(gap, abs=1e-12)
    assert dyn.e2e_s - own.e2e_s == pytest.approx(gap, abs=1e-12)
    assert dyn.tpot_s == own.tpot_s and dyn.requests_per_s == own.requests_per_s
    assert any("the engine's own server, fitted on its own deployments" in a for a in own.assumptions)
    sg = [serve(llama, h100, **split(engine_name="sglang", frontend=f, **kw)) for f in ("dynamo", "engine")]
    assert sg[0].ttft_s == sg[1].ttft_s
    assert any("not measured apart from Dynamo's" in a for a in sg[1].assumptions)
    with pytest.raises(costmodel.CostModelError, match="unknown frontend 'nginx'"):
        serve(llama, h100, **split(frontend="nginx", **kw))


def test_an_inferencex_run_is_predicted_as_its_recipe_and_client_ran_it(tmp_path, run_cli):
    """A row of a dated export (InferenceX's runs) is its recipe on the engine's own server, its requests' lengths
    drawn as its client draws them: the Llama-70B recipe's budget of 8192, fp8 KV cache, async scheduling and no
    prefix caching, lengths from 0.8 x to 1 x the row's, the vLLM server's own front end; with no image recorded it is
    still not a Dynamo launch (a row of aiconfigurator's own collection is). The command reproduces the prediction;
    a disaggregated InferenceX row draws its lengths alike."""
    from costmodel.validation.deployments import parse

    ix = _row(
        model_path="meta-llama/Llama-3.1-70B",
        precision="fp8",
        gemm_quant_mode="fp8",
        tp_size="4.0",
        silicon_data_source="source_file=2026-04-06.csv; silicon_concurrency=4; wip=False",
    )
    d = parse(ix)
    assert (d.max_num_batched_tokens, d.kv_dtype, d.async_scheduling, d.prefix_caching) == (8192, "fp8", True, False)
    assert (d.spread, d.frontend) == (0.2, "engine")
    aic = parse({**ix, "silicon_data_source": "source_file=/x/aic-auto-gap-analysis/a.csv; silicon_concurrency=4"})
    assert (aic.max_num_batched_tokens, aic.spread, aic.frontend, aic.async_scheduling) == (2048, 0.0, "dynamo", None)
    cmd = d.command()
    for flag, value in (
        ("--max-num-batched-tokens", "8192"),
        ("--kv-dtype", "fp8"),
        ("--length-dist", "range"),
        ("--spread", "0.2"),
        ("--frontend", "engine"),
    ):
        assert cmd[cmd.index(flag) + 1] == value
    assert "--async-scheduling" in cmd and "--no-enable-prefix-caching" in cmd
    path, out = tmp_path / "d.csv", tmp_path / "out.json"
    _write(path, [{**ix, "id": "ix"}])
    r = run_cli("validate", "--serving", str(path), "--json", str(out))
    assert r.exit_code == 0, r.output
    row = json.loads(out.read_text())["rows"][0]
    got = json.loads(run_cli(*row["command"], "--json").output)
    assert got["ttft_s"] == row["predicted_ttft_s"] and got["tpot_s"] == row["predicted_tpot_s"]
    assert got["input_len"] < 1 * 512 and got["input_len"] > 0.8 * 512  # the drawn lengths' mean
    dis = parse(
        _row(
            mode="disagg",
            backend="sglang",
            batch_size="",
            tp_size="",
            prefill_tp_size="2.0",
            decode_tp_size="2.0",
            prefill_num_workers="1.0",
            decode_num_workers="1.0",
            silicon_data_source="source_file=2026-03-25.csv; silicon_concurrency=4",
        )
    )
    assert dis.frontend == "engine" and dis.spread == 0.2
    cmd = dis.command()
    assert cmd[cmd.index("--length-dist") + 1] == "range" and "--disaggregated" in cmd


def test_an_inferencex_row_recorded_in_a_layout_its_recipe_does_not_run_is_predicted_as_the_recipe_runs():
    """InferenceX's MiniMax-M2.5 recipe runs one tensor-parallel server with expert parallel; a row of its runs that
    records 4 attention data parallel groups of a quarter of the clients is predicted as the recipe's one server of
    all the clients (no --attention-dp in its command), and says so; the same row outside InferenceX's runs keeps
    its recorded layout."""
    from costmodel.validation.deployments import parse

    mm = _row(
        model_path="MiniMaxAI/MiniMax-M2.5",
        precision="fp8",
        gemm_quant_mode="fp8_block",
        tp_size="4.0",
        attention_dp_size="4.0",
        moe_ep_size="16.0",
        batch_size="16.0",
        silicon_data_source="source_file=2026-04-06.csv; silicon_concurrency=64; wip=False",
    )
    d = parse(mm)
    assert (d.layout.tp, d.layout.attention_dp, d.layout.batch, d.layout.expert_parallel) == (4, 1, 64, True)
    assert d.concurrency == 64 and "--attention-dp" not in d.command() and "--expert-parallel" in d.command()
    assert any(a.startswith("layout: its recipe's, one server of 4 devices") for a in d.assumed)
    other = parse({**mm, "silicon_data_source": "source_file=/x/aic-auto-gap-analysis/m.csv; silicon_concurrency=64"})
    assert (other.layout.attention_dp, other.layout.batch) == (4, 16) and other.assumed == ()


def test_requests_decoding_at_once_by_littles_law():
    """Little's law on a closed loop's means, by hand: 10 clients, 1 s to the first token, 100 more tokens at 40 ms
    each: each request takes 5 s, 4 of them decoding, so 8 of the 10 are decoding at any time."""
    from costmodel.validation.serving import decoding_requests

    assert decoding_requests(10, 1.0, 0.04, 101) == pytest.approx(8.0)
    assert decoding_requests(10, 0.0, 0.04, 101) == pytest.approx(10.0)  # nothing waits: every client decodes


def test_the_token_budget_bounds_the_requests_decoding_at_once(llama, h100):
    """Tokens in = tokens out: a prompt enters decode only after the iterations' budget has carried all its tokens, so
    in steady state (budget - D) / prompt requests a step start decoding when D decode and the budget binds, and each
    stays output - 1 steps: D = (budget - D) / prompt x (output - 1), so D = budget (output - 1) / (prompt + output
    - 1). With 2,048 tokens an iteration, 4,096-token prompts and 128-token outputs that is 61.6 of 128 clients,
    whatever the kernels cost; Little's law on the simulation's own means finds it."""
    from costmodel.validation.serving import decoding_requests

    p = serve(
        llama,
        h100,
        Load(input_len=4096, output_len=128, concurrency=128, num_requests=640),
        flags=EngineFlags(max_num_batched_tokens=2048),
        engine_name="vllm",
        overheads=OFF,
    )
    decoding = decoding_requests(128, p.ttft_s, p.tpot_s, 128)
    assert decoding == pytest.approx(2048 * 127 / (4096 + 127), rel=0.05)


def test_the_admission_rule_by_hand():
    """The one rule both simulations schedule by: a budget of 100 tokens, 2 sequences, 16-token pages."""
    from costmodel.engine.scheduler import Admission, fewest_out, newest, pages

    chunks = Admission(budget=100, seq_limit=2, page=16, chunked=True, reserve_output=False)
    whole = Admission(budget=100, seq_limit=2, page=16, chunked=False, reserve_output=True)
    assert pages(0, 16) == 0 and pages(1, 16) == 1 and pages(16, 16) == 1 and pages(17, 16) == 2
    assert chunks.chunk(250, 100) == 100 and chunks.chunk(30, 100) == 30 and chunks.chunk(30, 0) is None
    assert whole.chunk(250, 100) is None and whole.chunk(100, 100) == 100
    assert chunks.has_slot(1) and not chunks.has_slot(2)
    # paging: a 40-token prompt's first 40 cached tokens take 3 pages; reserving: prompt and output, 50 tokens, 4
    assert chunks.admit(40, 10, 0, 40, free=3, room=100) == (40, 3)
    assert chunks.admit(40, 10, 0, 40, free=2, room=100) is None
    assert whole.admit(40, 10, 0, 40, free=4, room=100) == (40, 4)
    assert whole.admit(40, 10, 0, 40, free=3, room=100) is None
    # two sequences of 16 and 30 cached tokens holding 1 and 2 pages; 1 page free: the first grows a page at step
    # 1 (17 tokens), the second at step 3 (33): 2 steps fit
    assert chunks.steps_within(np.array([16, 30]), np.array([1, 2]), free=1, steps=10) == 2
    assert chunks.steps_within(np.array([16, 30]), np.array([1, 2]), free=5, steps=10) == 10
    reqs = [dict(n=0, out=5, prompt=10), dict(n=1, out=2, prompt=10), dict(n=2, out=2, prompt=40)]
    assert newest(np.array([3, 7, 5])) == 1
    assert fewest_out(reqs, lambda r: r["out"], lambda r: r["prompt"])["n"] == 2


def test_one_rule_admits_for_both_simulations(monkeypatch):
    """Single-pool and disaggregated simulations both take their prompt chunks from Admission.chunk: a rule
    that halves every chunk shows in both."""
    from costmodel.deploy.disagg import Pool, serve_disaggregated
    from costmodel.engine import scheduler

    m, hw = costmodel.load_model("llama-3-8b"), costmodel.load_profile("h100")
    kw = dict(input_len=1000, output_len=4, concurrency=1, num_requests=2)
    agg_before = serve(m, hw, **split(**kw)).ttft_s
    dis_before = serve_disaggregated(m, hw, **split(prefill=Pool(), decode=Pool(), **kw)).ttft_s
    original = scheduler.Admission.chunk
    monkeypatch.setattr(scheduler.Admission, "chunk", lambda self, left, room: original(self, left, min(room, 500)))
    assert serve(m, hw, **split(**kw)).ttft_s > agg_before * 1.01
    assert serve_disaggregated(m, hw, **split(prefill=Pool(), decode=Pool(), **kw)).ttft_s > dis_before * 1.01

"""Disaggregated serving against hand computations: TTFT = queueing + prefill + transfer, the bytes moved equal the
prompt's KV cache counted by hand, Little's law and token conservation over both pools, the pools' limits, the
link a cache crosses, and a tensor-parallel all-reduce across nodes priced by hand."""

import json

import numpy as np
import pytest

import costmodel
from costmodel import Load
from costmodel.core.errors import CostModelError
from costmodel.deploy.disagg import Pool, kv_link, serve_disaggregated
from costmodel.engine.iteration import exact_time
from costmodel.model.pricing import all_reduce_s, pricing
from tests.kwargs import split

OFF = {"iteration_s": 0.0, "request_s": 0.0}


def _kv_by_hand(m, tokens: int, kv_bytes: float = 2.0) -> float:
    """Keys and values of every layer of Llama 3.1 8B (config.json: 32 layers, 8 key/value heads of 128):
    layers x kv heads x head dim x 2 x bytes, per token."""
    assert m.id == "llama_3_1_8b"
    return 32 * 8 * 128 * 2 * kv_bytes * tokens


def test_one_client_ttft_is_prefill_plus_transfer(llama, h100):
    """One client, overheads off: TTFT is the prompt's prefill priced without the table's grid plus the cache's
    transfer at the NVLink one-way rate, with no queueing; every TPOT a lone decode step."""
    isl, osl = 2000, 40
    p = serve_disaggregated(
        llama,
        h100,
        Load(input_len=isl, output_len=osl, concurrency=1, num_requests=3),
        prefill=Pool(),
        decode=Pool(),
        overheads=OFF,
    )
    pr = pricing(llama, h100)
    prefill = exact_time(llama, pr, decode_seqs=0, decode_context=0, prompt=isl)
    kv = _kv_by_hand(llama, isl)
    transfer = kv / (900e9 / 2) + 2e-6
    assert p.kv_transfer.bytes_per_request == pytest.approx(kv, rel=1e-9)
    assert p.kv_transfer.time_s == pytest.approx(transfer, rel=1e-9)
    assert p.ttft_s == pytest.approx(prefill + transfer, rel=0.02)
    s = p.ttft_split
    assert s.queue_s == pytest.approx(0.0, abs=1e-9)
    assert s.queue_s + s.prefill_s + s.transfer_s + s.front_end_s == pytest.approx(p.ttft_s, rel=1e-9)
    steps = [exact_time(llama, pr, decode_seqs=1, decode_context=isl + i, prompt=0) for i in range(1, osl)]
    assert p.tpot_s == pytest.approx(np.mean(steps), rel=0.01)


def test_transferred_bytes_follow_the_shards(llama, h100):
    """Over tp decode devices the cache is stored in tp shards (8 kv heads over 2 devices): the request's bytes
    are the whole prompt's, each device's half; in fp8 half again."""
    p = serve_disaggregated(
        llama,
        h100,
        Load(input_len=1024, output_len=8, concurrency=1, num_requests=2),
        prefill=Pool(tp=1),
        decode=Pool(tp=2),
        overheads=OFF,
    )
    assert p.kv_transfer.bytes_per_request == pytest.approx(_kv_by_hand(llama, 1024), rel=1e-9)
    # the prefill device holds the whole cache and sends all of it
    assert p.kv_transfer.bytes_per_device == pytest.approx(_kv_by_hand(llama, 1024), rel=1e-9)
    f8 = serve_disaggregated(
        llama,
        h100,
        Load(input_len=1024, output_len=8, concurrency=1, num_requests=2),
        prefill=Pool(tp=2),
        decode=Pool(tp=2),
        overheads=OFF,
        kv_dtype="fp8",
    )
    assert f8.kv_transfer.bytes_per_device == pytest.approx(_kv_by_hand(llama, 1024, 1.0) / 2, rel=1e-9)


@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "trtllm", "atom"])
def test_littles_law_and_tokens(llama, h100, engine_name):
    """Closed loop over both pools: throughput x mean time in the system = clients; every decode token of every
    request is produced exactly once (the decode pool's iterations carry n x (output - 1) tokens); the pools'
    limits hold (checked iteration by iteration)."""
    c, n, osl = 24, 480, 48
    p = serve_disaggregated(
        llama,
        h100,
        Load(input_len=700, output_len=osl, concurrency=c, num_requests=n),
        engine_name=engine_name,
        prefill=Pool(workers=2, max_num_seqs=2, max_num_batched_tokens=1024),
        decode=Pool(workers=3, max_num_seqs=6),
        overheads=OFF,
        check=True,
    )
    assert p.requests_per_s * p.e2e_s == pytest.approx(c, rel=0.05)
    assert p.decode.mean_batch * p.decode.iterations == pytest.approx(n * (osl - 1), rel=1e-9)
    assert p.decode.mean_batch <= 6 and p.prefill.mean_batch <= 2
    assert p.decode_waits > 0  # 24 clients over 18 decode slots: some wait
    assert p.devices == 5


def test_drawn_lengths_conserve_tokens(llama, h100):
    """Lengths drawn as a benchmark client draws them (``range``: from 0.8 x to 1 x) over both pools: every decode
    token of every request is produced once (the decode iterations carry the sum of the drawn outputs less one
    each), the report's lengths are the drawn means, tokens out per second are the requests' rate times the mean
    output, and Little's law holds; the same seed draws the same lengths, so the run repeats exactly."""
    from costmodel.engine.load import lengths

    c, n = 16, 320
    kw = dict(
        input_len=700,
        output_len=48,
        prefill=Pool(workers=2, max_num_seqs=2, max_num_batched_tokens=1024),
        decode=Pool(workers=2, max_num_seqs=8),
        concurrency=c,
        num_requests=n,
        overheads=OFF,
        check=True,
        input_dist="range",
        output_dist="range",
        spread=0.2,
    )
    p = serve_disaggregated(llama, h100, **split(**kw))
    prompts, outputs = lengths("range", 700, n, spread=0.2), lengths("range", 48, n, spread=0.2, seed=1)
    assert p.input_len == pytest.approx(prompts.mean()) and p.output_len == pytest.approx(outputs.mean())
    assert 0.8 * 700 <= p.input_len < 700
    assert p.decode.mean_batch * p.decode.iterations == pytest.approx((outputs - 1).sum(), rel=1e-9)
    assert p.output_tokens_per_s == pytest.approx(p.requests_per_s * outputs.mean(), rel=1e-12)
    assert p.requests_per_s * p.e2e_s == pytest.approx(c, rel=0.05)
    assert serve_disaggregated(llama, h100, **split(**kw)).ttft_s == p.ttft_s


def test_queueing_grows_with_load(llama, h100):
    """One prefill worker: more clients queue longer for it, and TTFT's parts still add up."""
    ttft = []
    for c in (1, 8, 32):
        p = serve_disaggregated(
            llama,
            h100,
            Load(input_len=4000, output_len=64, concurrency=c),
            prefill=Pool(max_num_seqs=1),
            decode=Pool(),
            overheads=OFF,
        )
        s = p.ttft_split
        assert s.queue_s + s.prefill_s + s.transfer_s + s.front_end_s == pytest.approx(p.ttft_s, rel=1e-9)
        ttft.append(s.queue_s)
    assert ttft[0] < ttft[1] < ttft[2]


def test_the_link_a_cache_crosses(h100):
    b200 = costmodel.load_profile("b200")
    what, bw, _ = kv_link(h100, h100, 8)
    assert bw == 450e9 and "NVLink" in what
    what, bw, _ = kv_link(h100, h100, 16)  # two nodes: each device's 400 Gb/s port
    assert bw == 50e9
    assert kv_link(h100, b200, 2)[1] == 50e9  # two device kinds: the network
    assert kv_link(costmodel.load_profile("a100"), h100, 2)[1] == 25e9  # the slower port: A100's 200 Gb/s
    mi300x = costmodel.load_profile("mi300x")  # states no network port
    assert "Infinity Fabric" in kv_link(mi300x, mi300x, 8)[0]
    with pytest.raises(CostModelError, match="kv-link-bandwidth"):
        kv_link(mi300x, h100, 2)
    with pytest.raises(CostModelError, match="kv-link-bandwidth"):
        kv_link(mi300x, mi300x, 16)


def test_all_reduce_across_nodes_by_hand(h100):
    """16 devices of 8-device nodes: NCCL's ring over all 16 paced by its hops between the nodes, each over a
    device's 50 GB/s network port (2 x 15/16 of the buffer each way); the fixed latency of the in-node ring over
    NVLink (2 x 7 steps of 2 us, the datasheet conventions here) and of a ring of the 2 nodes (2 x 1 steps of 5 us)."""
    for nbytes in (1e4, 1e6, 1e8):
        by_hand = 2 * 15 / 16 * nbytes / 50e9 + 14 * 2e-6 + 2 * 5e-6
        assert all_reduce_s(h100, 16, nbytes) == pytest.approx(by_hand, rel=1e-12)
        assert all_reduce_s(h100, 8, nbytes) == pytest.approx(2 * 7 / 8 * nbytes / 450e9 + 14 * 2e-6, rel=1e-12)
        # the network port paces the ring: its transfer alone outlasts the whole in-node all-reduce
        assert all_reduce_s(h100, 16, nbytes) > all_reduce_s(h100, 8, nbytes)
        # a port faster than the in-node links: those pace it (the in-node ring's transfer, the same latencies)
        fast = h100.model_copy(
            update={"scale_out_bytes_per_s": h100.scale_out_bytes_per_s.model_copy(update={"value": 10e12})}
        )
        assert all_reduce_s(fast, 16, nbytes) == pytest.approx(
            2 * 7 / 8 * nbytes / 450e9 + 14 * 2e-6 + 2 * 5e-6, rel=1e-12
        )
    with pytest.raises(CostModelError, match="whole number of 8-device domains"):
        all_reduce_s(h100, 12, 1e6)
    with pytest.raises(CostModelError, match="scale_out_bytes_per_s"):
        all_reduce_s(h100.model_copy(update={"scale_out_bytes_per_s": None}), 16, 1e6)


def test_a_cross_node_all_reduce_is_stated(llama, h100):
    """The assumptions of a step whose tensor-parallel group spans nodes say how its all-reduce is priced: the
    ring over all 16 devices at the 50 GB/s port; a group inside one node keeps the fitted curves' line."""
    from costmodel.model.assumptions import step_assumptions

    across = " ".join(step_assumptions(llama, pricing(llama, h100, tp=16)))
    assert "NCCL's ring over all 16 devices" in across and "(50 GB/s one way" in across
    inside = " ".join(step_assumptions(llama, pricing(llama, h100, tp=8)))
    assert "NCCL's ring over all" not in inside and "all-reduce curves fitted" in inside


def test_cli_disaggregated(run_cli):
    args = [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--concurrency",
        "4",
        "--input-len",
        "1024",
        "--output-len",
        "32",
        "--num-requests",
        "8",
    ]
    r = run_cli(*args, "--disaggregated", "--prefill-workers", "2", "--decode-tp", "2", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["prefill"]["workers"] == 2 and got["decode"]["tp"] == 2 and got["devices"] == 4
    assert got["ttft_s"] > got["ttft_split"]["prefill_s"] > 0 and got["tpot_s"] > 0
    r = run_cli(*args, "--disaggregated")
    assert r.exit_code == 0 and "TTFT = queueing" in r.output
    for bad, says in (
        (["--decode-tp", "2"], "--decode-tp applies with --disaggregated"),
        (["--disaggregated", "--max-num-seqs", "4"], "--prefill-max-num-seqs"),
        (["--disaggregated", "--decode-gpu", "nope"], "nope"),
        (["--disaggregated", "--decode-gpu", "mi300x"], "--kv-link-bandwidth"),
    ):
        r = run_cli(*args, *bad)
        assert r.exit_code != 0 and r.output.startswith("Error:") and says in r.output, (bad, r.output)
    r = run_cli(*args, "--disaggregated", "--decode-gpu", "mi300x", "--kv-link-bandwidth", "25e9", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["kv_transfer"]["link_bytes_per_s"] == 25e9


@pytest.mark.parametrize("engine_name", ["vllm", "sglang"])
@pytest.mark.parametrize(
    "pools", [(Pool(), Pool()), (Pool(workers=2), Pool(tp=2)), (Pool(max_num_seqs=1), Pool(workers=2, max_num_seqs=16))]
)
def test_closed_form_agrees_with_the_simulation(llama, h100, pools, engine_name):
    """Steady-state means against the simulation (after a warm-up wave): TPOT within 5%, throughput within 10%,
    TTFT equal for one client; beyond, the closed form's TTFT is a lower bound (it leaves out the bursts in which
    requests that finished decoding together come back to the prefill pool). vLLM plans each iteration as the last
    ends, SGLang while it runs (both pools)."""
    pre, dec = pools
    for isl, osl in ((1024, 256), (4096, 512)):
        for c in (1, 16, 64):
            kw = dict(input_len=isl, output_len=osl, prefill=pre, decode=dec, concurrency=c, engine_name=engine_name)
            sim = serve_disaggregated(llama, h100, **split(num_requests=max(200, 10 * c), warmup_requests=c, **kw))
            cf = serve_disaggregated(llama, h100, **split(evaluator="steady-state", **kw))
            assert cf.tpot_s == pytest.approx(sim.tpot_s, rel=0.05), (isl, osl, c)
            assert cf.requests_per_s == pytest.approx(sim.requests_per_s, rel=0.10), (isl, osl, c)
            assert cf.ttft_s <= sim.ttft_s * 1.01, (isl, osl, c)
            if c == 1:
                assert cf.ttft_s == pytest.approx(sim.ttft_s, rel=0.01)
    with pytest.raises(costmodel.CostModelError, match="concurrency"):
        serve_disaggregated(
            llama,
            h100,
            Load(input_len=64, output_len=8, request_rate=1.0),
            prefill=pre,
            decode=dec,
            evaluator="steady-state",
        )


def test_a_network_port_needs_a_domain(h100):
    """A profile that gives a network port but not the domain it leaves is refused at load, naming the field."""
    from pydantic import ValidationError

    data = h100.model_dump()
    data["scale_up_devices"] = None
    with pytest.raises(ValidationError, match="scale_up_devices"):
        type(h100).model_validate(data)


def test_attention_data_parallel_pools(h100):
    """A decode worker of 4 attention data parallel groups (a mixture of experts' experts over all 4 devices) takes
    requests in each group: its devices are the groups' and it holds 4 groups' batches; Little's law and token
    conservation hold; one client's TPOT is a decode step priced with the 4 groups' experts over every device (each
    group's tokens gathered, the other groups loaded alike); without expert parallel each expert's width is
    sharded over the devices instead, and a dense model's groups are refused."""
    m = costmodel.load_model("deepseek-v2-lite")
    c, n, osl = 16, 160, 24
    pool = Pool(tp=1, workers=1, attention_dp=4, expert_parallel=True, max_num_seqs=3)
    p = serve_disaggregated(
        m,
        h100,
        Load(input_len=512, output_len=osl, concurrency=c, num_requests=n),
        prefill=Pool(tp=2, workers=2),
        decode=pool,
        overheads=OFF,
        check=True,
    )
    assert p.devices == 4 + 4 and p.decode.devices == 4
    assert p.requests_per_s * p.e2e_s == pytest.approx(c, rel=0.05)
    assert p.decode.mean_batch * p.decode.iterations == pytest.approx(n * (osl - 1), rel=1e-9)
    assert p.decode.mean_batch <= 3 and p.decode_waits > 0  # 16 clients over 4 x 3 slots
    one = serve_disaggregated(
        m,
        h100,
        Load(input_len=512, output_len=osl, concurrency=1, num_requests=2),
        prefill=Pool(),
        decode=pool,
        overheads=OFF,
    )
    pr = pricing(m, h100, tp=1, attention_dp=4, expert_parallel=True)
    steps = [exact_time(m, pr, decode_seqs=1, decode_context=512 + i, prompt=0) for i in range(1, osl)]
    assert one.tpot_s == pytest.approx(np.mean(steps), rel=0.01)
    alone = serve_disaggregated(
        m,
        h100,
        Load(input_len=512, output_len=osl, concurrency=1, num_requests=2),
        prefill=Pool(),
        decode=Pool(tp=1),
        overheads=OFF,
    )
    assert one.tpot_s != pytest.approx(alone.tpot_s, rel=0.01)  # the groups' collectives and gathered experts
    sharded = serve_disaggregated(
        m,
        h100,
        Load(input_len=512, output_len=osl, concurrency=1, num_requests=2),
        prefill=Pool(),
        decode=Pool(tp=1, workers=1, attention_dp=4, max_num_seqs=3),
        overheads=OFF,
    )
    pr = pricing(m, h100, tp=1, attention_dp=4)
    steps = [exact_time(m, pr, decode_seqs=1, decode_context=512 + i, prompt=0) for i in range(1, osl)]
    assert sharded.tpot_s == pytest.approx(np.mean(steps), rel=0.01)
    with pytest.raises(CostModelError, match="mixture-of-experts"):
        serve_disaggregated(
            costmodel.load_model("llama-3-8b"),
            h100,
            Load(input_len=64, output_len=8, concurrency=1),
            prefill=Pool(attention_dp=2),
            decode=Pool(),
        )


def test_cli_attention_data_parallel_pool(run_cli):
    args = [
        "predict",
        "--gpu",
        "h100",
        "--model",
        "deepseek-v2-lite",
        "--engine",
        "sglang",
        "--concurrency",
        "8",
        "--input-len",
        "1024",
        "--output-len",
        "32",
        "--num-requests",
        "16",
        "--disaggregated",
    ]
    r = run_cli(*args, "--decode-attention-dp", "2", "--decode-expert-parallel", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["decode"]["devices"] == 2 and got["devices"] == 3
    assert any("2 attention data parallel groups of 1" in line for line in got["assumptions"])
    r = run_cli(*args, "--decode-attention-dp", "2", "--json")  # without expert parallel: the experts' width sharded
    assert r.exit_code == 0, r.output
    assert any(
        "every routed expert's width sharded over all 2 devices" in line for line in json.loads(r.output)["assumptions"]
    )


class _Fixed:
    """An iteration table: every prefill iteration ``prefill`` seconds, every decode iteration ``decode``."""

    def __init__(self, prefill, decode):
        self.prefill, self.decode = prefill, decode

    def time(self, **kw):
        from types import SimpleNamespace

        return SimpleNamespace(total_s=self.prefill)

    def decode_run(self, seqs, context_sum, steps, others=None):
        return np.full(steps, self.decode)


def _no_host(gpu, sequences):
    """An iteration's time with no fixed cost and no host time (costmodel.engine.served.Setup.wall's shape)."""
    return gpu


@pytest.mark.parametrize("overlapped", [False, True])
def test_a_decode_worker_under_the_overlap_scheduler_by_hand(overlapped):
    """One prefill worker (one 10-token prompt per 0.6 ms iteration), one decode worker (1 ms iterations), KV moved
    in 0.3 ms, two clients. Request 0 reaches the decoder at 0.9 ms (its iterations 0.9-1.9 and 1.9-2.9 ms: done at
    2.9), request 1 at 1.5 ms, during the first. Planned as an iteration ends, 1.9-2.9 takes request 1 and its four
    steps end at 5.9 ms; planned while the one before runs (from 0.9 ms), it cannot, and they end at 6.9 ms (TPOT
    1.1 against 1.35 ms). Request 2 comes at 2.9 ms and reaches the decoder at 3.8 ms, during 2.9-3.9: its two steps
    end at 5.9 ms, or 6.9 ms under the overlap. Its first token is the prefill worker's either way."""
    from types import SimpleNamespace

    from costmodel.deploy.pools import simulate

    def setup(lag, table):
        eng = SimpleNamespace(
            chunked_prefill=True,
            reserve_output=False,
            name="vllm",
            max_num_batched_tokens=10,
            max_num_seqs=8,
            page_size=16,
            lag=lag,
            reserved_decode_tokens=0,
        )
        return SimpleNamespace(eng=eng, kv_tokens=4096, table=table, iteration_s=0.0, wall=_no_host)

    table = _Fixed(0.6e-3, 1e-3)
    sim = simulate(
        setup(0, table),
        setup(int(overlapped), table),
        Pool(tp=1, workers=1),
        Pool(tp=1, workers=1),
        prompts=np.full(3, 10),
        outputs=np.array([3, 5, 3]),
        concurrency=2,
        request_rate=None,
        transfer_s=0.3e-3,
        seed=0,
        check=True,
    )
    assert sim.violations == []
    reqs = sim.reqs
    assert [r.arrival for r in reqs] == pytest.approx([0.0, 0.0, 2.9e-3])
    assert [r.first for r in reqs] == pytest.approx([0.9e-3, 1.5e-3, 3.8e-3])
    late = 1e-3 if overlapped else 0.0
    assert [r.finish for r in reqs] == pytest.approx([2.9e-3, 5.9e-3 + late, 5.9e-3 + late])


@pytest.mark.parametrize("name", ["sglang", "vllm"])
def test_where_a_request_waits_for_decode_pages_by_hand(name):
    """A decode worker with KV pages for one request at a time (one 16-token page; 10 + 3 tokens take one), one
    prefill worker (0.6 ms a prompt), KV moved in 0.3 ms, 1 ms decode iterations, two clients at 0. Request 0:
    prefilled 0-0.6, first token 0.9, its two decode steps 0.9-2.9. SGLang's decode worker reserves before the
    prefill: request 1 waits for those pages, is prefilled 2.9-3.5 (first token 3.8, TTFT 3.8 ms) and decodes
    3.8-5.8 (TPOT 1 ms). vLLM prefills it at once (0.6-1.2, first token 1.5) and it waits for the pages after its
    first token: decode 2.9-4.9, TPOT (4.9 - 1.5) / 2 = 1.7 ms."""
    from types import SimpleNamespace

    from costmodel.deploy.pools import simulate

    eng = SimpleNamespace(
        chunked_prefill=True,
        reserve_output=False,
        name=name,
        max_num_batched_tokens=10,
        max_num_seqs=8,
        page_size=16,
        lag=0,
        reserved_decode_tokens=0,
    )
    table = _Fixed(0.6e-3, 1e-3)
    pre = SimpleNamespace(eng=eng, kv_tokens=4096, table=table, iteration_s=0.0, wall=_no_host)
    dec = SimpleNamespace(eng=eng, kv_tokens=16, table=table, iteration_s=0.0, wall=_no_host)
    sim = simulate(
        pre,
        dec,
        Pool(),
        Pool(),
        prompts=np.full(2, 10),
        outputs=np.full(2, 3),
        concurrency=2,
        request_rate=None,
        transfer_s=0.3e-3,
        seed=0,
        check=True,
    )
    assert sim.violations == [] and sim.waits == 1
    r0, r1 = sim.reqs
    assert (r0.first, r0.finish) == pytest.approx((0.9e-3, 2.9e-3))
    if name == "sglang":
        assert (r1.prefilled, r1.first, r1.finish) == pytest.approx((3.5e-3, 3.8e-3, 5.8e-3))
    else:
        assert (r1.prefilled, r1.first, r1.finish) == pytest.approx((1.2e-3, 1.5e-3, 4.9e-3))


def test_tensorrt_llms_context_servers_run_without_the_overlap_scheduler(llama, h100):
    """TensorRT-LLM's disaggregated guide turns the overlap scheduler off on its context servers only; SGLang keeps
    it in both pools; vLLM 0.12 has none: each pool's engine says so."""
    kw = dict(
        input_len=256,
        output_len=8,
        concurrency=2,
        num_requests=4,
        prefill=Pool(tp=1, workers=1),
        decode=Pool(tp=1, workers=1),
    )
    for name, prefill, decode in (("trtllm", False, True), ("sglang", True, True), ("vllm", False, False)):
        got = serve_disaggregated(llama, h100, **split(engine_name=name, **kw))
        (line,) = [a for a in got.assumptions if a.startswith("prefill workers' iterations")]
        pre, dec = line.split("; decode workers'")
        assert ("while the one before runs" in pre, "while the one before runs" in dec) == (prefill, decode), name


def test_sglang_decode_preallocation_and_retraction_by_hand():
    """SGLang's decode worker pre-allocates a request's prompt and keeps a headroom per request it holds (here 2
    tokens; 512 in SGLang), so with a 30-token cache two requests of 10 + 8 tokens are both taken at 0 where whole
    contexts (18 each) would hold one. One prefill worker (one prompt per 0.6 ms), KV moved in 0.3 ms, 1 ms decode
    steps. Request 0: first token 0.9, decodes from 0.9; request 1 arrives at 1.5 and joins at 1.9 (the cache then
    holds 12 + 11 = 23 tokens). Three steps of both fill it to 29 (4.9 ms); the next would not fit, so request 1 (3
    tokens out, fewer than request 0's 4) is retracted, its 14 tokens freed; request 0 finishes 4.9-7.9, request 1
    resumes and finishes 7.9-11.9. The cache never overflows and every token is produced once."""
    from types import SimpleNamespace

    from costmodel.deploy.pools import simulate

    eng = SimpleNamespace(
        chunked_prefill=True,
        reserve_output=False,
        name="sglang",
        max_num_batched_tokens=10,
        max_num_seqs=8,
        page_size=1,
        lag=0,
        reserved_decode_tokens=2,
    )
    table = _Fixed(0.6e-3, 1e-3)
    pre = SimpleNamespace(eng=eng, kv_tokens=4096, table=table, iteration_s=0.0, wall=_no_host)
    dec = SimpleNamespace(eng=eng, kv_tokens=30, table=table, iteration_s=0.0, wall=_no_host)
    sim = simulate(
        pre,
        dec,
        Pool(),
        Pool(),
        prompts=np.full(2, 10),
        outputs=np.full(2, 8),
        concurrency=2,
        request_rate=None,
        transfer_s=0.3e-3,
        seed=0,
        check=True,
    )
    assert sim.violations == [] and sim.waits == 0 and sim.D.retractions == 1
    r0, r1 = sim.reqs
    assert (r0.prefilled, r0.first, r0.finish) == pytest.approx((0.6e-3, 0.9e-3, 7.9e-3))
    assert (r1.prefilled, r1.first, r1.finish) == pytest.approx((1.2e-3, 1.5e-3, 11.9e-3))
    assert sim.D.seqs == 2 * (8 - 1)  # every decode token once, the retracted request's included
    # with no headroom to keep and a cache for one whole context only, request 1 waits before its prefill
    small = SimpleNamespace(
        eng=SimpleNamespace(**{**vars(eng), "reserved_decode_tokens": 0}),
        kv_tokens=18,
        table=table,
        iteration_s=0.0,
        wall=_no_host,
    )
    one = simulate(
        pre,
        small,
        Pool(),
        Pool(),
        prompts=np.full(2, 10),
        outputs=np.full(2, 8),
        concurrency=2,
        request_rate=None,
        transfer_s=0.3e-3,
        seed=0,
        check=True,
    )
    assert one.violations == [] and one.reqs[1].first > one.reqs[0].first + 1e-3


@pytest.mark.parametrize("isl, osl, binds", [(8192, 64, "prefill pool"), (512, 512, "decode pool")])
def test_arrivals_beyond_what_the_pools_complete_overload_them(llama, h100, isl, osl, binds):
    """The most a disaggregated deployment completes is its busier pool's capacity; simulated Poisson arrivals at
    1.5 times it complete requests at about that rate, not the arrivals', and are said to overload it; at half of
    it they do not, and complete at the arrivals' rate."""
    kw = dict(input_len=isl, output_len=osl, prefill=Pool(), decode=Pool(max_num_seqs=16))
    most = serve_disaggregated(llama, h100, **split(request_rate=1.0, num_requests=4, **kw))
    assert most.saturation_binds == binds and not most.overloaded
    x = most.saturation_requests_per_s
    over = serve_disaggregated(llama, h100, **split(request_rate=1.5 * x, num_requests=1500, **kw))
    assert over.overloaded and over.requests_per_s == pytest.approx(x, rel=0.1)
    under = serve_disaggregated(llama, h100, **split(request_rate=0.5 * x, num_requests=400, **kw))
    assert not under.overloaded and under.requests_per_s == pytest.approx(0.5 * x, rel=0.15)

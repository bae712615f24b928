"""Energy where a deployment is more than one engine: disaggregated pools (costmodel.deploy.disagg_energy), checked
by conservation (every device's power sums to the deployment's; a pool idle for the rest of its busy share) and by
hand (the KV transfer's link energy, dollars per million tokens)."""

from __future__ import annotations

import pytest

import costmodel
from costmodel import Load
from costmodel.core.errors import CostModelError
from costmodel.deploy.disagg import serve_disaggregated
from costmodel.deploy.pools import Pool
from costmodel.engine.served import serve
from costmodel.hardware.catalog import load_profile
from costmodel.hardware.power import PowerModel

H100 = load_profile("h100")
LLAMA = costmodel.load_model("meta-llama/Llama-3.1-8B")
IDLE_W = 0.10 * 700  # energy.yaml's idle share of the H100's 700 W board
LINK_J = 8 * 5.0e-12  # energy.yaml's 5 pJ/bit over a link, per byte


def _pools(load, prefill=1, decode=2, **kw):
    return serve_disaggregated(LLAMA, H100, load, prefill=Pool(workers=prefill), decode=Pool(workers=decode), **kw)


@pytest.mark.parametrize(
    "load, evaluator",
    [
        (Load(1024, 256, concurrency=64, num_requests=300), "simulation"),
        (Load(1024, 256, concurrency=64), "steady-state"),
        (Load(2048, 128, request_rate=6, num_requests=200), "simulation"),
    ],
)
def test_a_disaggregated_runs_power_is_its_pools_and_its_transfer(load, evaluator):
    p = _pools(load, evaluator=evaluator, price_per_gpu_hour=2.0)
    pre, dec = p.prefill, p.decode
    # every device's power: each pool's devices at their power, and the KV cache over the link
    summed = pre.devices * pre.energy.power_w + dec.devices * dec.energy.power_w + p.kv_transfer_w
    assert p.power_w * p.devices == pytest.approx(summed, rel=1e-9)
    assert p.kv_transfer_w == pytest.approx(p.requests_per_s * p.kv_transfer.bytes_per_request * LINK_J, rel=1e-9)
    # a pool's device is idle for the rest of its busy share, and draws between idle and its limit
    for s in (pre, dec):
        e = s.energy
        assert e.share["idle"] * e.energy_j == pytest.approx(IDLE_W * (1 - min(s.busy_share, 1.0)), abs=1e-6)
        assert IDLE_W <= e.power_w <= 700
        assert e.power_w_range[0] <= e.power_w <= e.power_w_range[1]
    # energy per output token: the deployment's watts over its output tokens a second
    assert p.energy_j_per_output_token == pytest.approx(p.power_w * p.devices / p.output_tokens_per_s, rel=1e-9)
    lo, hi = p.energy_j_per_output_token_range
    assert lo < p.energy_j_per_output_token < hi
    # dollars: price x devices x time / tokens
    assert p.usd_per_million_output_tokens == pytest.approx(2.0 * p.devices / 3600 / p.output_tokens_per_s * 1e6)


def test_idle_pools_draw_idle_power():
    p = _pools(Load(256, 16, request_rate=0.05, num_requests=10))
    assert p.prefill.busy_share < 0.05 and p.decode.busy_share < 0.1
    assert p.power_w < IDLE_W * 1.2
    assert PowerModel.of(H100).idle_w == pytest.approx(IDLE_W)


def test_a_binding_limit_slows_both_pools_and_says_so():
    load = Load(8192, 64, concurrency=16, num_requests=64)
    free, held = _pools(load), _pools(load, power_limit_w=300)
    assert held.ttft_split.prefill_s > free.ttft_split.prefill_s * 1.05  # the prompt's compute runs longer
    assert held.prefill.energy.power_w <= 300 and held.decode.energy.power_w <= 300
    assert held.prefill.energy.capped
    assert any("power limit of 300 W" in a and "prefill workers' prefill" in a for a in held.assumptions)


def test_the_cli_prints_a_disaggregated_runs_energy():
    from click.testing import CliRunner

    from costmodel.cli.commands import main

    args = ["predict", "--gpu", "h100", "--model", "meta-llama/Llama-3.1-8B", "--disaggregated"]
    args += ["--prefill-workers", "1", "--decode-workers", "1", "--concurrency", "8", "--input-len", "512"]
    args += ["--output-len", "64", "--num-requests", "24", "--price-per-gpu-hour", "2", "--power-limit", "500"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "prefill workers" in text and "W each" in text and "J per output token" in text
    assert "per million output tokens" in text


def _recommend(**kw):
    from costmodel.deploy.recommend import recommend

    hws = [H100, load_profile("l40s")]
    return recommend(LLAMA, hws, Load(1024, 256, request_rate=8), ttft_s=1.0, tpot_s=0.04, **kw)


def test_the_recommender_minimises_cost_at_each_devices_price():
    prices = {"h100_sxm": 2.5, "l40s": 0.7}
    fewest, cheapest = _recommend(price_per_gpu_hour=prices), _recommend(price_per_gpu_hour=prices, minimise="cost")
    assert (fewest.gpu, fewest.gpus) == ("h100_sxm", 1)  # one H100 serves it: the fewest GPUs, at $2.50 an hour
    # three L40S at $0.70 cost $2.10 an hour: price x GPUs, by hand
    assert cheapest.gpu == "l40s" and cheapest.cost_per_hour == pytest.approx(cheapest.gpus * 0.7)
    assert cheapest.cost_per_hour < fewest.cost_per_hour == pytest.approx(2.5)
    for c in cheapest.candidates:
        if c.gpus is not None and c.mode == "agg":
            assert c.cost_per_hour == pytest.approx(c.gpus * prices[c.gpu])
            assert c.cost_per_hour >= cheapest.cost_per_hour - 1e-9
    assert cheapest.at.ttft_s <= 1.0 and cheapest.at.tpot_s <= 0.04  # still under the targets


def test_the_recommender_minimises_energy_under_the_targets():
    least = _recommend(minimise="energy")
    assert least.minimise == "energy" and least.at.tpot_s <= 0.04 and least.at.ttft_s <= 1.0
    # its energy is the deployment's own: the answer priced again gives the same joules per output token
    again = serve(
        LLAMA,
        H100 if least.gpu == "h100_sxm" else load_profile(least.gpu),
        Load(1024, 256, request_rate=8),
        layout=costmodel.Layout(tp=least.tp, replicas=least.replicas),
        evaluator=least.evaluator,
    )
    assert again.energy_j_per_output_token == pytest.approx(least.at.energy_j_per_output_token, rel=1e-9)
    # no searched unit that meets the targets spends fewer joules per output token at its share of the load
    joules = [c.energy_j_per_output_token for c in least.candidates if c.energy_j_per_output_token is not None]
    assert len(joules) > 3 and least.at.energy_j_per_output_token <= min(joules) * 1.02


def test_a_bad_objective_or_price_is_refused():
    with pytest.raises(CostModelError, match="minimise must be one of gpus, cost, energy"):
        _recommend(minimise="joy")
    with pytest.raises(CostModelError, match="needs a price per GPU-hour for l40s"):
        _recommend(minimise="cost", price_per_gpu_hour={"h100_sxm": 2.0})
    with pytest.raises(CostModelError, match="a price for b200, which is not searched"):
        _recommend(price_per_gpu_hour={"b200": 2.0})


def test_capacity_prices_each_variants_joules_and_mqa_spends_the_fewest():
    # Shazeer's argument in joules: at the most clients under a TPOT target, multi-query reads the least KV cache a
    # token, so each output token costs less energy than grouped-query's, and that less than multi-head's
    from costmodel.deploy.capacity import load_capacity

    m = costmodel.load_model("llama-3-8b")
    report = load_capacity(m, [H100], Load(2048, 512), tpot_s=0.05)
    joules = {pt.attention.split()[0]: pt.at.energy_j_per_output_token for pt in report.points}
    assert joules["MQA"] < joules["GQA"] < joules["MHA"]
    for pt in report.points:  # each the deployment's power over its output tokens at that point
        assert pt.at.energy_j_per_output_token == pytest.approx(pt.at.power_w / pt.at.output_tokens_per_s_per_device)
    assert "J/token" in str(report)

"""Energy where a deployment is more than one engine: disaggregated pools (costmodel.deploy.disagg_energy), checked
by conservation (every device's power sums to the deployment's; a pool idle for the rest of its busy share) and by
hand (the KV transfer's link energy, dollars per million tokens)."""

from __future__ import annotations

import pytest

import costmodel
from costmodel import Load
from costmodel.deploy.disagg import serve_disaggregated
from costmodel.deploy.pools import Pool
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


"""A disaggregated deployment's power and energy: each pool's devices priced as they spend a second of the run
(:func:`costmodel.engine.energy.pool_energy`: busy with their own kind of iteration for the pool's busy share, idle
the rest), and the KV cache crossing between the pools at the link's energy per byte. Every device's power summed
over the output tokens each second gives the joules per output token:

    W = prefill devices x P_prefill + decode devices x P_decode + requests/s x KV bytes x J per link byte
    J per output token = W / output tokens per second
"""

from __future__ import annotations

from costmodel.engine.energy import RunEnergy, dollars, energy_line, per_output, pool_energy
from costmodel.hardware.power import PowerModel


def disagg_energy(pre, dec, prefill, decode, got: dict, input_len: float, output_len: float, transfer, price):
    """(each pool's :class:`RunEnergy` per device, the report's top-level energy and dollar figures) of the pools
    ``prefill`` and ``decode`` (their setups ``pre`` and ``dec``) as the evaluation ``got`` ran them; (None, None,
    {}) where a pool's device has no power model."""
    budget = pre.eng.max_num_batched_tokens
    chunk = min(max(got["prefill"]["mean_batch"], 1.0) * input_len, budget)
    energies = (
        pool_energy(pre, "prefill", got["prefill"]["busy_share"], seqs=chunk, context=0.0, prompt=input_len),
        pool_energy(
            dec,
            "decode",
            got["decode"]["busy_share"],
            seqs=got["decode"]["mean_batch"],
            context=input_len + output_len / 2,
            prompt=input_len,
        ),
    )
    if None in energies:
        return None, None, {}
    e_pre, e_dec = energies
    link_w = got["requests_per_s"] * transfer.bytes_per_request * PowerModel.of(dec.pr.hw).link_j
    devices = prefill.devices() + decode.devices()

    def power(p: float, d: float) -> float:
        return (prefill.devices() * p + decode.devices() * d + link_w) / devices

    lows, highs = zip(e_pre.power_w_range, e_dec.power_w_range)
    tokens = got["requests_per_s"] * output_len / devices
    figures = per_output(
        power(e_pre.power_w, e_dec.power_w),
        (power(*lows), power(*highs)),
        tokens,
        got["requests_per_s"] / devices,
    )
    figures |= dollars(price, tokens, got["requests_per_s"] * (input_len + output_len) / devices)
    return e_pre, e_dec, figures | {"kv_transfer_w": link_w, "price_per_gpu_hour": price}


def pools_line(e_pre: RunEnergy | None, e_dec: RunEnergy | None, hw) -> str:
    """The energy's assumption line for both pools: how they were priced and where their limit binds."""
    if e_pre is None or e_dec is None:
        return energy_line(None, hw)
    capped = tuple(f"{role} workers' {c}" for role, e in (("prefill", e_pre), ("decode", e_dec)) for c in e.capped)
    return energy_line(
        e_dec.model_copy(update={"capped": capped}),
        hw,
        "each pool priced per op at its mean batch (a prefill worker's tokens an iteration) and context, busy for "
        "its busy share and idle the rest, the KV cache between them at the link's energy per byte",
    )


def with_energy(report, pre, dec, prefill, decode, got: dict, transfer, price):
    """A disaggregated deployment's ``report`` with each pool's energy, the deployment's, and its assumption line."""
    e_pre, e_dec, figures = disagg_energy(
        pre, dec, prefill, decode, got, report.input_len, report.output_len, transfer, price
    )
    return report.model_copy(
        update={
            "prefill": report.prefill.model_copy(update={"energy": e_pre}),
            "decode": report.decode.model_copy(update={"energy": e_dec}),
            "assumptions": [*report.assumptions, pools_line(e_pre, e_dec, dec.pr.hw)],
            **figures,
        }
    )

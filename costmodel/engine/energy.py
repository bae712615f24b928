"""A served run's power and energy: the power each device draws in each phase of the run, integrated over the time
the run spends in it (:mod:`costmodel.hardware.power` gives the physics).

A run's devices spend their time four ways: running prefill work, running decode work (both with the iteration's
communication apart), running the engine's host work between kernels, and waiting with nothing to run. While work
runs a device draws its running power (idle and active) and the work's energy over its time, capped at the board's
limit, priced per op at the run's operating point (its mean batch and context, its prefill chunks and prompts:
:meth:`costmodel.engine.iteration.IterationTable.operating_work`); between kernels, idle and the host share of the
active power; waiting, idle. Energy is the sum of power x time over the four, per device and over every device:

    E = sum over phases of P_phase x t_phase,   mean power = E / run time,   J per output token = E / output tokens

The range prices the same run at both ends of every technology constant (``energy.yaml``).
"""

from __future__ import annotations

import numpy as np

from costmodel.core.reports import Report
from costmodel.hardware.power import CORNERS, PowerModel, unavailable


class RunEnergy(Report):
    """One device's power over a served run (every device of the deployment draws the same), its energy by phase and
    the range from the constants' ends. ``limit_w``: the board's power limit in force; ``capped``: the phases whose
    work ran at that limit."""

    power_w: float
    power_w_range: tuple[float, float]
    phase_power_w: dict[str, float]  # while each phase runs
    share: dict[str, float]  # of the run's energy, by phase
    energy_j: float  # one device over the run
    run_s: float
    board_w: float
    limit_w: float
    idle_w: float
    capped: tuple[str, ...] = ()


def run_energy(hw, work: dict | None, split: dict[str, float], run_s: float) -> RunEnergy | None:
    """The energy of a run of ``run_s`` seconds whose devices spent ``split`` (prefill_s, decode_s, comm_s, host_s)
    running the ``work`` of its operating point (:meth:`IterationTable.operating_work`); None where the device has
    no power model."""
    if work is None:
        return None
    models = {c: PowerModel.of(hw, c) for c in CORNERS}
    base = models["value"]
    # each phase: its work joules (SMs, bytes, capped), one iteration's seconds, the run's seconds in it
    phases = [
        (phase, *work[key][0], work[key][1], split[f"{key}_s"], key == "comm")
        for phase, key in (("prefill", "prefill"), ("decode", "decode"), ("communication", "comm"))
    ]
    host = split["host_s"]
    busy = sum(p[5] for p in phases)
    run_s = max(run_s, busy + host, 1e-12)
    by_corner, phase_w, capped = {}, {}, []
    for corner, pm in models.items():
        energy = {}
        sm_scale = pm.vector_j / base.vector_j  # the other ends of the constants, from the central values
        link_scale, byte_scale = pm.link_j / base.link_j, pm.byte_j / base.byte_j
        running = pm.running_w
        headroom = max(pm.limit_w - running, 0.0)
        for phase, sm, moved, at_value, t, spent, link in phases:
            if corner == "value":
                j = at_value
                if t > 0 and sm + moved > headroom * t * (1 + 1e-9):
                    capped.append(phase)
            else:
                j = min(sm * sm_scale + moved * (link_scale if link else byte_scale), headroom * t)
            watts = running + (j / t if t > 0 else 0.0)
            if corner == "value":
                phase_w[phase] = watts
            energy[phase] = watts * spent
        energy["host"] = (pm.idle_w + pm.gap_w) * host
        energy["idle"] = pm.idle_w * max(run_s - busy - host, 0.0)
        by_corner[corner] = energy
    total = {c: sum(e.values()) for c, e in by_corner.items()}
    value = by_corner["value"]
    powers = [total[c] / run_s for c in CORNERS]
    return RunEnergy.model_construct(  # every field computed here, of its type: no validation to repeat
        power_w=total["value"] / run_s,
        power_w_range=(min(powers), max(powers)),
        phase_power_w=phase_w,
        share={k: v / max(total["value"], 1e-30) for k, v in value.items()},
        energy_j=total["value"],
        run_s=run_s,
        board_w=base.board_w,
        limit_w=base.limit_w,
        idle_w=base.idle_w,
        capped=tuple(capped),
    )


def per_output(power_w: float, power_w_range, tokens_per_s_per_device: float, requests_per_s_per_device: float):
    """A report's top-level energy figures from one device's mean power (and its range) and its share of the
    throughput: joules per output token and per request (every device's energy over the run over its tokens or
    requests), and their ranges (empty without a power)."""
    if power_w is None or tokens_per_s_per_device <= 0:
        return {}
    lo, hi = power_w_range
    return {
        "power_w": power_w,
        "energy_j_per_output_token": power_w / tokens_per_s_per_device,
        "energy_j_per_output_token_range": (lo / tokens_per_s_per_device, hi / tokens_per_s_per_device),
        "energy_j_per_request": power_w / max(requests_per_s_per_device, 1e-30),
        "output_tokens_per_j": tokens_per_s_per_device / power_w,
    }


def dollars(price_per_gpu_hour: float | None, tokens_per_s_per_device: float, all_tokens_per_s_per_device: float):
    """$ per million output tokens and per million tokens (prompt and output) at ``price_per_gpu_hour`` per device:
    price x devices x time / tokens (empty without a price)."""
    if price_per_gpu_hour is None or tokens_per_s_per_device <= 0:
        return {}
    per_s = price_per_gpu_hour / 3600.0
    return {
        "usd_per_million_output_tokens": per_s / tokens_per_s_per_device * 1e6,
        "usd_per_million_tokens": per_s / all_tokens_per_s_per_device * 1e6,
    }


def energy_line(e: RunEnergy | None, hw, how: str = "priced per op at the run's mean batch and context") -> str:
    """The energy's assumption line: how it was priced, its limit and what binds."""
    if e is None:
        return "energy: " + unavailable(hw)
    limit = (
        f"the board's limit {e.board_w:g} W"
        if e.limit_w >= e.board_w
        else f"a power limit of {e.limit_w:g} W (the board's {e.board_w:g} W): kernels that would draw more run at a "
        "lower clock, longer (the SMs' power as the cube of the clock)"
    )
    binds = f"; the limit binds in {', '.join(e.capped)}" if e.capped else ""
    return (
        f"energy: each device draws {e.idle_w:.0f} W idle, more while work runs: per FLOP and per byte at the "
        f"sourced energies of costmodel/hardware/energy.yaml, {how}, "
        f"capped at {limit}{binds}; between kernels idle and part of the active power; a range from both ends of "
        "every constant (docs/energy.md)"
    )


def steady_energy(setup, *, batch: float, requests_per_s: float, input_len: float, output_len: float):
    """The closed form's energy: one second of one engine at its steady state, ``requests_per_s`` requests of
    ``input_len`` prompt and ``output_len`` output tokens through ``batch`` running sequences (its decode iterations,
    their communication and the engine's fixed cost each, the prompts in chunks of the token budget), the rest of the
    second idle (all of it busy, scaled to the second, where the work fills it)."""
    chunk = max(min(input_len, setup.eng.max_num_batched_tokens), 1.0)
    point = {"seqs": batch, "context": input_len + output_len / 2, "chunk": chunk, "prompt": input_len}
    work = setup.table.operating_work(**point)
    if work is None:
        return None
    iterations = requests_per_s * output_len / max(batch, 1.0)
    split = {
        "prefill_s": requests_per_s * input_len / chunk * work["prefill"][1],
        "decode_s": iterations * work["decode"][1],
        "comm_s": iterations * work["comm"][1],
        "host_s": iterations * setup.iteration_s,
    }
    busy = sum(split.values())
    if busy > 1.0:
        split = {k: v / busy for k, v in split.items()}
    return run_energy(setup.pr.hw, work, split, 1.0)


def simulated_energy(setup, res, prompts, outputs) -> RunEnergy | None:
    """A simulated run's energy (``res``: :class:`costmodel.engine.simulate.SimResult`): its time split as the
    iterations spent it, over the engine's whole run, at its mean batch, mean decode context (the mean prompt and half
    the mean output), mean prefill chunk and mean prompt."""
    work = setup.table.operating_work(
        seqs=res.seq_iterations / max(res.iterations, 1),
        context=float(np.mean(prompts)) + float(np.mean(outputs)) / 2,
        chunk=res.prefill_tokens / max(res.prefill_iterations, 1),
        prompt=float(np.mean(prompts)),
    )
    split = {"prefill_s": res.prefill_s, "decode_s": res.decode_s, "comm_s": res.comm_s, "host_s": res.overhead_s}
    return run_energy(setup.pr.hw, work, split, float(res.finish.max()))


def pool_energy(setup, role: str, busy_share: float, *, seqs: float, context: float, prompt: float) -> RunEnergy | None:
    """One device of a disaggregated pool over one second of its run, busy ``busy_share`` of it with iterations of
    its ``role``, the rest idle. A prefill worker's iterations run ``seqs`` tokens of ``prompt``-token prompts and
    their communication; a decode worker's ``seqs`` sequences at ``context`` cached positions and theirs; each
    iteration also the engine's fixed cost and the host's time (:meth:`costmodel.engine.served.Setup.wall`)."""
    chunk = seqs if role == "prefill" else 1.0
    work = setup.table.operating_work(seqs=seqs, context=context, chunk=chunk, prompt=prompt)
    if work is None:
        return None
    gpu_s = work[role][1] + work["comm"][1]
    wall = float(setup.wall(gpu_s, seqs))
    iterations = busy_share / max(wall, 1e-12)
    split = {"prefill_s": 0.0, "decode_s": 0.0, "comm_s": iterations * work["comm"][1]}
    split[f"{role}_s"] = iterations * work[role][1]
    split["host_s"] = iterations * (wall - gpu_s)
    return run_energy(setup.pr.hw, work, split, 1.0)

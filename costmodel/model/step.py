"""Whole models priced: a decode step and a prefill op by op (the ops of :mod:`costmodel.model.ops`, each
priced by :func:`costmodel.price.op.price`), parameters and KV cache (:mod:`costmodel.model.memory`), on one or
more devices, as a :class:`ModelPrediction`.

Tensor parallelism over ``t`` devices shards query heads, key/value heads (replicating them when
``g < t``, as Pope et al. 2022 and Ainslie et al. 2023 describe), the feed-forward width and the
vocabulary, and adds two all-reduces per layer priced from the profile's interconnect.
"""

from __future__ import annotations

import numpy as np

from costmodel.core import checks
from costmodel.core.fits import largest_fitting
from costmodel.core.vocab import (
    DEFAULTS,
)
from costmodel.hardware.power import PowerModel
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.assumptions import step_assumptions
from costmodel.model.engine_ops import COLLECTIVES, engine_ops, prompt_cache_writes, tensor_parallel
from costmodel.model.memory import (
    active_params,
    kv_bytes,
    largest_batch_in_memory,
    param_count,
    weight_bytes,
)
from costmodel.model.ops import StepOp, step_ops
from costmodel.model.presets import ModelPreset
from costmodel.model.pricing import Pricing, pricing
from costmodel.model.reports import (
    ModelMemory,
    ModelPrediction,
    ModelShape,
    ModelTotals,
    ModelWorkload,
    OpTime,
    PhaseTime,
    model_hardware,
)
from costmodel.price.bands import assumption as band_assumption
from costmodel.price.bands import band
from costmodel.price.bands import total as band_total
from costmodel.price.op import Conventions, KernelOp, price

# --- the prediction ------------------------------------------------------------------------------------


def op_time(s: StepOp, pr: Pricing):
    """The time of one kernel of a step's op under the pricing conventions (arrays where its counts are)."""
    return price(s.op, s.shape, pr.hw, Conventions(pr.model, pr.overlap))


def _price(ops: list[StepOp], pr: Pricing) -> list[OpTime]:
    pm = PowerModel.of(pr.hw)  # None: the device states no power facts
    out = []
    for s in ops:
        t = op_time(s, pr)
        ranged = band(t.time * s.count, pr.hw, pr.model, s.op.cls) if s.section != COLLECTIVES else None
        energy = float(pm.kernel(s.op, t.time).energy_j) * s.count if pm is not None else None
        out.append(
            OpTime(
                section=s.section,
                name=s.name,
                einsum=s.einsum,
                flops=s.op.flops * s.count,
                bytes=s.op.bytes * s.count,
                count=s.count,
                time_s=t.time * s.count,
                bound=t.bound,
                band=ranged,
                energy_j=energy,
            )
        )
    return out


def phase_ops(m: ModelPreset, pr: Pricing, phase: str, batch: int, context, source: int) -> list[StepOp]:
    """A phase's program on one device: the sliced model's ops, as engines run them, with the collectives of
    tensor parallelism inserted."""
    dev = pr.slice(m)
    ops = step_ops(
        dev,
        phase,
        batch,
        context,
        source,
        pr.precision,
        pr.execution,
        mla_form=pr.mla_form,
        dp=pr.dp,
        moe_spans_all=pr.moe_kernel == "fused",
    )
    tokens = batch if phase == "decode" else batch * context
    ops = engine_ops(ops, dev, tokens, pr.precision) if pr.engine else ops
    if phase == "prefill" and pr.engine and not _attention_writes_cache(pr):
        ops = prompt_cache_writes(ops, dev, tokens, pr.precision)
    encoder = batch * source if phase == "prefill" and m.architecture == "encoder-decoder" else 0
    return pipeline_sends(
        tensor_parallel(ops, m, pr.tp, tokens, encoder, pr.precision.act, pr.dp, pr.all_reduce), m, pr, tokens
    )


def _attention_writes_cache(pr: Pricing) -> bool:
    """Whether the device's prefill attention call writes the prompt's keys and values (its fit says so: the tables
    it was fitted on time the write inside the call), or the model prices no cache write at all (a datasheet
    roofline of the attention alone)."""
    eff = pr.model.resolved.get("prefill_attention") if pr.model.active else None
    return eff is None or eff.cache_write_ceiling is not None


def pipeline_sends(ops: list[StepOp], m: ModelPreset, pr: Pricing, tokens) -> list[StepOp]:
    """Under pipeline parallel, the hidden states of ``tokens`` sent from each stage to the next: pp - 1 sends,
    of which those between scale-up domains (stages laid out in order, tp devices each) cross the network."""
    if pr.pp == 1:
        return ops
    domain = pr.hw.domain
    crossing = 0 if domain is None else max(0, -(-pr.tp * pr.pp // domain) - 1)
    crossing = min(crossing, pr.pp - 1)
    nbytes = tokens * m.d_model * pr.precision.act
    out = list(ops)
    for name, count, span in (("pp_send", pr.pp - 1 - crossing, 2), ("pp_send_network", crossing, (domain or 0) + 1)):
        if count:
            out.append(StepOp(COLLECTIVES, count, KernelOp("send", name, "bf16", 0.0, nbytes, devices=2, span=span)))
    return out


def phase_time(m: ModelPreset, pr: Pricing, phase: str, batch: int, context: int, source: int) -> PhaseTime:
    """One decode step after ``context`` cached positions, or the prefill of a ``context``-token prompt."""
    priced = _price(phase_ops(m, pr, phase, batch, context, source), pr)
    ops = [o for o in priced if o.section != COLLECTIVES]
    collectives = [o for o in priced if o.section == COLLECTIVES]
    reduce_s = sum(o.time_s for o in collectives)
    time_s = sum(o.time_s for o in ops) + reduce_s
    energy = sum(o.energy_j for o in priced) if priced and priced[0].energy_j is not None else None
    return PhaseTime(
        time_s=time_s,
        energy_j=energy,
        power_w=energy / time_s if energy is not None and time_s > 0 else None,
        flops=sum(o.flops for o in ops),
        bytes=sum(o.bytes for o in ops),
        all_reduce_s=reduce_s,
        all_reduces=next((o.count for o in collectives if o.name == "all_reduce"), 0),
        ops=ops,
        band=band_total([(o.time_s, o.band) for o in ops] + [(reduce_s, None)]),
    )


def decode_times(m: ModelPreset, pr: Pricing, batch: int, contexts, source: int | None = None):
    """Decode-step times (seconds) after each of ``contexts`` cached positions, all at once: the step's
    ops evaluated on an array of contexts (the same expressions and mechanisms as :func:`phase_time`)."""
    contexts = np.asarray(contexts, dtype=np.int64)
    ops = phase_ops(m, pr, "decode", batch, contexts, source or 1)
    total = np.zeros(contexts.shape)
    for s in ops:
        if s.section != COLLECTIVES:
            total = total + np.asarray(op_time(s, pr).time, float) * s.count
    return total + sum(op_time(s, pr).time * s.count for s in ops if s.section == COLLECTIVES)


def predict_model(
    m: ModelPreset,
    hw: HardwareProfile,
    *,
    batch: int = DEFAULTS["batch"],
    context: int = DEFAULTS["context"],
    source: int | None = None,
    dtype: str = DEFAULTS["dtype"],
    execution: str = DEFAULTS["model_execution"],
    tp: int = DEFAULTS["tp"],
    overlap: str = DEFAULTS["overlap"],
    timing: str = DEFAULTS["timing"],
    without=(),
    engine: bool = True,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    mla_form: str | None = None,
    expert_parallel: bool = False,
    attention_dp: int = 1,
) -> ModelPrediction:
    """Decode step after ``context`` cached positions (TPOT), prefill of a ``context``-token prompt
    (TTFT), KV cache and weights per device, and the largest batch and context that fit. ``engine``:
    the step as serving engines run it (:func:`engine_ops`); False: every op of the programs alone.

    ``dtype`` is the activations' (and the math's) dtype; ``weight_dtype`` the projection weights' storage
    (default: the model's quantization, else ``dtype``); ``kv_dtype`` the cache's (default ``dtype``).
    ``mla_form`` fixes an MLA model's form (default: absorbed for decode, naive for prefill);
    ``expert_parallel`` spreads a mixture of experts' routed experts over the ``tp`` devices; ``attention_dp``
    groups of ``tp`` devices each run ``batch`` sequences of their own through attention, the experts over all
    the groups' devices (the step of one group, every group alike)."""
    checks.count("batch", batch)
    checks.count("context", context)
    checks.count("source", source, optional=True)
    pr = pricing(
        m,
        hw,
        dtype=dtype,
        execution=execution,
        tp=tp,
        overlap=overlap,
        timing=timing,
        without=without,
        engine=engine,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        mla_form=mla_form,
        expert_parallel=expert_parallel,
        attention_dp=attention_dp,
    )
    fixed_source, source = source, source or context
    dev = pr.slice(m)
    phases = {phase: phase_time(m, pr, phase, batch, context, source) for phase in ("decode", "prefill")}
    tpot = phases["decode"].time_s
    return ModelPrediction(
        hardware=model_hardware(pr),
        model=_shape(m, dev),
        workload=ModelWorkload(
            batch=batch,
            context=context,
            source=source if m.architecture == "encoder-decoder" else None,
            dtype=pr.dtype,
            weight_dtype=pr.weight_dtype,
            weight_group_size=pr.group,
            kv_dtype=pr.kv_dtype,
            execution=pr.execution,
            tp=tp,
            overlap=pr.overlap,
            attention_dp=pr.dp,
            weight_scope="experts" if pr.precision.experts_only else "all",
        ),
        decode=phases["decode"],
        prefill=phases["prefill"],
        total=ModelTotals(tpot_s=tpot, ttft_s=phases["prefill"].time_s, tokens_per_s=batch / tpot),
        memory=_memory(m, dev, pr, hw, batch, context, source, fixed_source),
        assumptions=step_assumptions(m, pr) + band_assumption((o.band for ph in phases.values() for o in ph.ops), hw),
    )


def _shape(m: ModelPreset, dev: ModelPreset) -> ModelShape:
    """The model as the report states it (``dev``: what one device holds)."""
    return ModelShape(
        id=m.id,
        name=m.name,
        params=param_count(m),
        active_params=active_params(m),
        published_params=m.published_params,
        layers=m.layers,
        heads=m.heads,
        kv_heads=m.kv_heads,
        head_dim=m.head_dim,
        kv_heads_per_device=dev.kv_heads,
        attention=m.attention_label,
        moe=m.moe.model_dump() if m.moe else None,
        mla=m.mla.model_dump() if m.mla else None,
        sliding_window=m.sliding_window,
        local_layers=m.local_layers,
    )


def _memory(
    m: ModelPreset, dev: ModelPreset, pr, hw: HardwareProfile, batch, context, source, fixed_source
) -> ModelMemory:
    """Weights and KV cache per device, and the largest batch and context that fit (``fixed_source``: an
    encoder-decoder's source length where given, else it follows the context)."""
    weights = weight_bytes(dev, pr)
    kv = kv_bytes(dev, pr, batch, context, source)
    free = hw.capacity - weights
    unlimited = m.local_layers == m.layers and m.architecture == "decoder"
    max_context = (
        None
        if unlimited and free > kv_bytes(dev, pr, batch, m.sliding_window, 1)
        else largest_fitting(lambda c: weights + kv_bytes(dev, pr, batch, c, fixed_source or max(c, 1)) <= hw.capacity)
    )
    per_token = kv_bytes(m, pr, 1, 1, source) - kv_bytes(m, pr, 1, 0, source)
    return ModelMemory(
        kv_cache_bytes_per_token=per_token,
        kv_cache_bytes=kv,
        kv_cache_bytes_per_device=kv,
        weight_bytes_per_device=weights,
        capacity_bytes=hw.capacity,
        fits=kv + weights <= hw.capacity,
        max_batch=largest_batch_in_memory(dev, pr, context, source),
        max_context=max_context,
    )

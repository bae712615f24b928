"""The questions users bring: a request's latency, the largest batch under a latency target, and the cost.

A request of ``input_len`` prompt tokens and ``output_len`` generated tokens, in a batch of ``batch``
such requests run together (static batching): the prefill of the batch's prompts is the time to first
token (TTFT); then ``output_len`` decode steps after ``input_len .. input_len + output_len - 1`` cached
positions, each one time per output token (TPOT). Every step's time is evaluated, all at once on an array
of contexts (:func:`costmodel.model.step.decode_times`), so the mean TPOT is exact, not sampled.
End-to-end latency = TTFT + the sum of the step times.

Capacity: the largest batch whose mean TPOT (and TTFT) stay under their targets and whose weights and KV
cache at the longest context fit in device memory; which of the three binds; the throughput there; and,
given a price per device-hour, the cost per million output tokens.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.core.reports import DeviceSummary, Report
from costmodel.core.vocab import DEFAULTS, MAX_DIM, SIDE_BY_SIDE
from costmodel.hardware.profile import HardwareProfile
from costmodel.model.memory import kv_bytes, largest_batch_in_memory, weight_bytes
from costmodel.model.ops import device_slice
from costmodel.model.presets import ModelPreset
from costmodel.model.pricing import Pricing, pricing
from costmodel.model.reports import model_hardware
from costmodel.model.step import decode_times, phase_time
from costmodel.price.bands import Band
from costmodel.price.bands import total as band_total

#: The most decode steps one request may ask for (a million steps evaluate in well under a second).
MAX_OUTPUT = 1 << 24


class RequestPrediction(Report):
    """One batch of requests on one device (or ``tp`` devices): latency, throughput, memory."""

    hardware: DeviceSummary
    model: str
    model_name: str
    attention: str
    batch: int
    input_len: int
    output_len: int
    tp: int
    ttft_s: float
    tpot_first_s: float
    tpot_last_s: float
    tpot_mean_s: float
    e2e_s: float
    ttft_band: Band | None = None  # where the measured time is expected to fall (costmodel.price.bands)
    tpot_band: Band | None = None  # of the mean TPOT: the decode step's range at the mean context, as a ratio
    e2e_band: Band | None = None
    tokens_per_s_per_sequence: float  # output tokens / e2e
    tokens_per_s_per_device: float  # the batch's output tokens / e2e / devices
    kv_cache_bytes_per_device: int  # at the longest context
    weight_bytes_per_device: int
    capacity_bytes: float
    fits: bool
    assumptions: list[str]

    def __str__(self) -> str:
        from costmodel.render.models import request_table

        return request_table([self])


def _check(batch: int, input_len: int, output_len: int, m: ModelPreset | None = None) -> None:
    if m is not None:
        checks.instance("model", m, ModelPreset, "a ModelPreset (load_model(...))")
    if m is not None and m.architecture != "decoder":
        raise CostModelError(
            f"requests are modelled for decoder-only models; {m.id} is {m.architecture} "
            "(its decode step and prefill are priced without a request: a context and a source "
            "length)"
        )
    checks.count("batch", batch)
    checks.count("input_len", input_len)
    checks.count("output_len", output_len)
    if output_len > MAX_OUTPUT:
        raise CostModelError(f"output_len must be at most {MAX_OUTPUT}, got {output_len}")


def step_times(m: ModelPreset, pr: Pricing, batch: int, input_len: int, output_len: int) -> np.ndarray:
    """The time of each of the request's decode steps: after input_len + i cached positions, i < output_len."""
    return decode_times(m, pr, batch, np.arange(input_len, input_len + output_len, dtype=np.int64))


def request(
    m: ModelPreset, hw: HardwareProfile, *, batch: int = 1, input_len: int, output_len: int, **conventions
) -> RequestPrediction:
    """TTFT, per-step and mean TPOT, end-to-end latency, throughput and memory of a batch of requests.
    ``conventions`` are those of :func:`costmodel.model.step.pricing` (dtype, tp, timing, weight_dtype, ...)."""
    _check(batch, input_len, output_len, m)
    pr = pricing(m, hw, **conventions)
    return _request(m, pr, batch, input_len, output_len)


def _request(m: ModelPreset, pr: Pricing, batch: int, input_len: int, output_len: int) -> RequestPrediction:
    hw = pr.hw
    prefill = phase_time(m, pr, "prefill", batch, input_len, input_len)
    ttft = prefill.time_s
    steps = step_times(m, pr, batch, input_len, output_len)
    e2e = ttft + float(steps.sum())
    ttft_band, tpot_band, e2e_band = _bands(m, pr, batch, input_len, output_len, prefill, steps)
    dev = device_slice(m, pr.tp)
    weights = weight_bytes(dev, pr)
    kv = kv_bytes(dev, pr, batch, input_len + output_len - 1, input_len)
    return RequestPrediction(
        hardware=model_hardware(pr),
        model=m.id,
        model_name=m.name,
        attention=m.attention_label,
        batch=batch,
        input_len=input_len,
        output_len=output_len,
        tp=pr.tp,
        ttft_s=ttft,
        tpot_first_s=float(steps[0]),
        tpot_last_s=float(steps[-1]),
        tpot_mean_s=float(steps.mean()),
        e2e_s=e2e,
        ttft_band=ttft_band,
        tpot_band=tpot_band,
        e2e_band=e2e_band,
        tokens_per_s_per_sequence=output_len / e2e,
        tokens_per_s_per_device=batch * output_len / e2e / pr.tp,
        kv_cache_bytes_per_device=kv,
        weight_bytes_per_device=weights,
        capacity_bytes=hw.capacity,
        fits=weights + kv <= hw.capacity,
        assumptions=request_assumptions(),
    )


def _bands(m: ModelPreset, pr: Pricing, batch: int, input_len: int, output_len: int, prefill, steps):
    """The ranges of TTFT (the prefill's), of the mean TPOT (the decode step's at the mean context, as ratios of its
    time: the ops' mix barely moves over a request) and of the end-to-end time (their sum); Nones where the step
    carries none."""
    middle = phase_time(m, pr, "decode", batch, input_len + output_len // 2, input_len)
    if prefill.band is None or middle.band is None:
        return None, None, None
    tpot = middle.band.scaled(float(steps.mean()) / middle.time_s)
    decoding = float(steps.sum())
    e2e = band_total([(prefill.time_s, prefill.band), (decoding, middle.band.scaled(decoding / middle.time_s))])
    return prefill.band, tpot, e2e


def request_assumptions() -> list[str]:
    return [
        "static batching: the batch's prompts are prefilled together (TTFT), then every sequence decodes "
        "output_len steps after input_len .. input_len + output_len - 1 cached positions",
        "every step's time evaluated (no sampling); mean TPOT = their sum / output_len; end-to-end = TTFT + their sum",
        "memory: weights and the KV cache at the longest context, per device",
        "ranges: TTFT's is the prefill's ops' ranges added (costmodel.price.bands); the mean TPOT's is the decode "
        "step's at the mean context, as a ratio of its time; end-to-end adds them",
    ]


Binding = Literal["tpot", "ttft", "memory", "batch limit"]


class CapacityPoint(Report):
    """The largest batch under the targets for one model layout on one device."""

    device: str
    model: str
    attention: str
    batch: int  # 0: not even one sequence meets the targets
    binds: Binding | None  # what stops batch + 1
    memory_batch: int  # the largest batch that fits in memory
    request: RequestPrediction | None  # at ``batch``
    cost_per_million_tokens: float | None  # output tokens, at the price per device-hour


class CapacityReport(Report):
    input_len: int
    output_len: int
    tpot_target_s: float | None
    ttft_target_s: float | None
    price_per_hour: float | None
    points: list[CapacityPoint]
    assumptions: list[str]

    def __str__(self) -> str:
        from costmodel.render.models import capacity_table

        return capacity_table(self)


def memory_batch(m: ModelPreset, pr: Pricing, input_len: int, output_len: int) -> int:
    """The largest batch whose weights and KV cache at the longest context fit."""
    return largest_batch_in_memory(device_slice(m, pr.tp), pr, input_len + output_len - 1, input_len)


def largest_batch(
    m: ModelPreset,
    hw: HardwareProfile,
    *,
    input_len: int,
    output_len: int,
    tpot_s: float | None = None,
    ttft_s: float | None = None,
    price_per_hour: float | None = None,
    max_batch: int = MAX_DIM,
    **conventions,
) -> CapacityPoint:
    """The largest batch meeting the mean-TPOT and TTFT targets within memory (bisection: both times grow
    with the batch), what binds at batch + 1, and the throughput and cost there."""
    _check(1, input_len, output_len, m)
    # a latency target of more than a day, or a device-hour of more than a million, is a unit mistake
    for name, value, most in (
        ("tpot_s", tpot_s, 86400),
        ("ttft_s", ttft_s, 86400),
        ("price_per_hour", price_per_hour, 1e6),
    ):
        checks.number(name, value, most=most, optional=True)
    checks.count("max_batch", max_batch)
    pr = pricing(m, hw, **conventions)
    limit = min(memory_batch(m, pr, input_len, output_len), max_batch)

    def meets(b: int) -> Binding | None:
        """What fails at batch b (None: every target holds)."""
        if tpot_s is not None and float(step_times(m, pr, b, input_len, output_len).mean()) > tpot_s:
            return "tpot"
        if ttft_s is not None and phase_time(m, pr, "prefill", b, input_len, input_len).time_s > ttft_s:
            return "ttft"
        return None

    first = meets(1) if limit >= 1 else "memory"
    last = first if first is not None or limit == 1 else meets(limit)
    if first is not None:
        best, binds = 0, first
    elif last is None:
        best = limit
        binds = "memory" if limit < max_batch else "batch limit"
    else:
        lo, hi, binds = 1, limit, last  # meets(lo) holds, meets(hi) fails because of ``binds``
        while hi - lo > 1:
            mid = (lo + hi) // 2
            why = meets(mid)
            lo, hi, binds = (mid, hi, binds) if why is None else (lo, mid, why)
        best = lo
    at = _request(m, pr, best, input_len, output_len) if best else None
    cost = None
    if at is not None and price_per_hour is not None:
        cost = price_per_hour / 3600 / at.tokens_per_s_per_device * 1e6
    return CapacityPoint(
        device=hw.id,
        model=m.id,
        attention=m.attention_label,
        batch=best,
        binds=binds,
        memory_batch=limit,
        request=at,
        cost_per_million_tokens=cost,
    )


def with_variants(m: ModelPreset, latent: bool = False) -> list[ModelPreset]:
    """The model as given, then its MHA, GQA and MQA versions that differ from it (``latent``: and its MLA
    version, DeepSeek-V2's latent of 4 x head dim)."""
    layouts = [m]
    for v in SIDE_BY_SIDE + (("mla",) if latent else ()):
        other = m.with_variant(v)
        if all(o.attention_label != other.attention_label for o in layouts):
            layouts.append(other)
    return layouts


def capacity(
    m: ModelPreset,
    devices: list[HardwareProfile],
    *,
    input_len: int,
    output_len: int,
    tpot_s: float | None = None,
    ttft_s: float | None = None,
    price_per_hour: float | None = None,
    variants: bool = True,
    **conventions,
) -> CapacityReport:
    """:func:`largest_batch` on every device, for the model as published and (``variants``) its MHA, GQA
    and MQA versions (GQA with gcd(h, 8) key/value heads)."""
    checks.instance("model", m, ModelPreset, "a ModelPreset (load_model(...))")
    if not isinstance(devices, (list, tuple)) or not devices:
        raise CostModelError(f"devices must be a non-empty list of HardwareProfile, got {devices!r}"[:200])
    for hw in devices:
        checks.instance("devices", hw, HardwareProfile, "a HardwareProfile (load_profile(...))")
    checks.flag("variants", variants)
    layouts = with_variants(m) if variants else [m]
    points = [
        largest_batch(
            layout,
            hw,
            input_len=input_len,
            output_len=output_len,
            tpot_s=tpot_s,
            ttft_s=ttft_s,
            price_per_hour=price_per_hour,
            **conventions,
        )
        for hw in devices
        for layout in layouts
    ]
    assumptions = request_assumptions() + [
        "the largest batch: mean TPOT and TTFT at most their targets, weights and KV cache at the longest context "
        "within device memory; 'binds' is what fails at batch + 1",
        "throughput per device: the batch's output tokens / end-to-end latency / devices"
        + (
            "; cost per million output tokens = price per device-hour x 1e6 / 3600 / throughput per device"
            if price_per_hour is not None
            else ""
        ),
    ]
    if variants:
        assumptions.append(
            "variants: the same model with every attention layout (key/value heads changed; "
            "parameters and cache follow)"
        )
    return CapacityReport(
        input_len=input_len,
        output_len=output_len,
        tpot_target_s=tpot_s,
        ttft_target_s=ttft_s,
        price_per_hour=price_per_hour,
        points=points,
        assumptions=assumptions,
    )


def _span(b: Band | None) -> dict:
    return {"tpot_low_s": b.low_s if b is not None else None, "tpot_high_s": b.high_s if b is not None else None}


def model_sweep(
    layouts: list[ModelPreset],
    devices: list[HardwareProfile],
    dim: str,
    values: list[int],
    *,
    batch: int | None = None,
    context: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    **conventions,
) -> list[dict]:
    """Whole-model predictions over ``values`` of ``dim`` (batch, context, input_len or output_len), one
    record per (device, layout, value): a decode step and prefill at ``context``, or with ``input_len`` and
    ``output_len`` a request. Each record says whether weights and KV cache fit in memory."""
    from costmodel.model.step import predict_model

    records = []
    for hw in devices:
        for m in layouts:
            pr = pricing(m, hw, **conventions)
            for value in values:
                point = {
                    "batch": batch or (1 if input_len else DEFAULTS["batch"]),
                    "context": context or DEFAULTS["context"],
                    "input_len": input_len,
                    "output_len": output_len,
                }
                point[dim] = value
                base = {"device": hw.id, "model": m.id, "attention": m.attention_label, dim: value}
                if input_len is not None:
                    _check(point["batch"], point["input_len"], point["output_len"], m)
                    r = _request(m, pr, point["batch"], point["input_len"], point["output_len"])
                    records.append(
                        {
                            **base,
                            "batch": r.batch,
                            "input_len": r.input_len,
                            "output_len": r.output_len,
                            "ttft_s": r.ttft_s,
                            "tpot_s": r.tpot_mean_s,
                            "e2e_s": r.e2e_s,
                            **_span(r.tpot_band),
                            "tokens_per_s_per_device": r.tokens_per_s_per_device,
                            "memory_bytes": r.kv_cache_bytes_per_device + r.weight_bytes_per_device,
                            "fits": r.fits,
                        }
                    )
                else:
                    p = predict_model(m, hw, batch=point["batch"], context=point["context"], **conventions)
                    records.append(
                        {
                            **base,
                            "batch": point["batch"],
                            "context": point["context"],
                            "ttft_s": p.total.ttft_s,
                            "tpot_s": p.total.tpot_s,
                            **_span(p.decode.band),
                            "tokens_per_s_per_device": p.total.tokens_per_s / pr.tp,
                            "memory_bytes": p.memory.kv_cache_bytes_per_device + p.memory.weight_bytes_per_device,
                            "fits": p.memory.fits,
                        }
                    )
    return records

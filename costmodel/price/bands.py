"""The expected error of a prediction: each op's time carries the range of measured / predicted that published
timings show for its kernel class priced the way this device prices it (its *route*), and a total carries the sum
of its ops' ranges. Each route's range spans the narrowest percentiles whose ranges, derived without a GPU, hold
80% of that GPU's rows (``tails`` in the file; :func:`label`); across generations, where the sign of a transfer's
bias turns with its direction, the range is 1 / x to x, x a percentile of the error either way.

Routes: ``fitted`` (the device's own fit), ``within`` (parameters carried from a fitted GPU of the same
generation), ``across`` (from a GPU of another generation), ``datasheet`` (no fitted parameters: the datasheet
roofline). The ranges are measured, not assumed: ``costmodel/error_bands.yaml``, written by
``scripts/error_bands.py`` from the A100, H100 and B200 tables (:mod:`costmodel.validation.bands`). No two
measured GPUs share a generation there, so ``within`` takes the ``across`` range (wider than it needs to be);
a class no table measures takes its route's range over every class.

A served prediction's mean TTFT and TPOT carry the range of measured deployments (``costmodel/served_bands.yaml``,
``scripts/serving_bands.py``) at the narrowest percentiles whose ranges, derived without a model, hold 80% of
that model's rows.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from costmodel.core.reports import Report
from costmodel.hardware.mechanisms import FALLBACK, MECHANISMS

#: How each route is said.
ROUTES = {
    "fitted": "fitted on the device",
    "within": "transferred within a GPU generation",
    "across": "transferred across GPU generations",
    "datasheet": "datasheet roofline",
}
#: The measured route whose ranges a route takes.
MEASURED_AS = {"fitted": "fitted", "within": "across", "across": "across", "datasheet": "datasheet"}


class Band(Report):
    """Where the measured time is expected to fall: ``low_s`` and ``high_s`` (the measured range's ends of measured
    / predicted times the prediction, at calibrated percentiles), how the op was priced (``route``, several for a
    total) and the measured range used (``basis``: route and kernel class, ``all`` for every class of the route)."""

    low_s: float
    high_s: float
    route: str
    basis: str

    def scaled(self, factor: float) -> "Band":
        """The same range for a time ``factor`` times as long (the ratios to the time stay)."""
        return self.model_copy(update={"low_s": factor * self.low_s, "high_s": factor * self.high_s})


@lru_cache(maxsize=1)
def table() -> dict:
    """The shipped ranges: ``bands[route][class] = {n, low, p50, high}``, each route's ``tails`` and how they were
    measured."""
    from costmodel.core.files import safe_yaml

    return safe_yaml(resources.files("costmodel").joinpath("error_bands.yaml").read_text(encoding="utf-8"))


@lru_cache(maxsize=64)
def _generation(device: str) -> str | None:
    from costmodel.hardware.catalog import load_profile

    arch = load_profile(device).architecture
    return arch.generation if arch is not None else None


def route(hw, model, cls: str | None) -> str | None:
    """How ``hw`` prices kernel class ``cls`` under time model ``model``; None where no measured range applies
    (some mechanisms switched off: a prediction taken apart, not a forecast)."""
    mechanisms = set(MECHANISMS) & (set(hw.efficiency.mechanisms) if hw.efficiency is not None else set(MECHANISMS))
    if not model.on or model.resolved is None:  # the bare roofline, or a device without fitted parameters
        return "datasheet" if not model.on or set(model.on) >= mechanisms else None
    if set(model.on) != mechanisms:
        return None
    origin = model.resolved.origin.get(cls) if cls is not None else None
    if origin is None:
        return "datasheet"
    if origin.kind == "fitted":
        return "fitted"
    mine, theirs = (hw.architecture.generation if hw.architecture else None), _generation(origin.device)
    return "within" if mine is not None and mine == theirs else "across"


def ratio_band(way: str, cls: str | None) -> tuple[dict, str]:
    """The measured range of a route and class (else its parent class's, else the route's over every class)."""
    measured = table()["bands"][MEASURED_AS[way]]
    c = cls
    while c is not None and c not in measured:
        c = FALLBACK.get(c)
    key = c if c is not None else "all"
    return measured[key], f"{MEASURED_AS[way]} {key}"


def band(time_s: float, hw, model, cls: str | None) -> Band | None:
    """The expected range of an op priced at ``time_s`` (None: no measured range applies)."""
    way = route(hw, model, cls)
    if way is None:
        return None
    q, basis = ratio_band(way, cls)
    return Band(low_s=time_s * q["low"], high_s=time_s * q["high"], route=way, basis=basis)


def percentile_span(tails) -> str:
    """Percentiles (below, above) left out, as the range they span: ``(9, 9)`` is ``p9-p91``; one number, the
    percent of the error either way left out (a range 1 / x to x): ``(20,)`` is ``p80 either way``."""
    if len(tails) == 1:
        return f"p{100 - tails[0]:g} either way"
    below, above = tails
    return f"p{below:g}-p{100 - above:g}"


def label(way: str) -> str:
    """The percentiles a route's ranges span: ``p9-p91``."""
    return percentile_span(table()["tails"][MEASURED_AS[way]])


def total(parts) -> Band | None:
    """The range of a sum: ``parts`` are (time_s, band or None) pairs; an unbanded part (a collective, an
    engine's fixed cost) counts at its time in both bounds. Errors are taken as moving together (the ranges
    add), which is what a kernel class's errors do within one step. None when no part has a range."""
    parts = list(parts)
    banded = [b for _, b in parts if b is not None]
    if not banded:
        return None
    low = sum(b.low_s if b is not None else t for t, b in parts)
    high = sum(b.high_s if b is not None else t for t, b in parts)
    ways = ", ".join(w for w in ROUTES if any(b.route == w for b in banded))
    bases = sorted({b.basis for b in banded})
    return Band(low_s=low, high_s=high, route=ways, basis="; ".join(bases))


def assumption(bands, hw=None) -> list[str]:
    """The assumption line of a report whose ops carry ``bands`` on ``hw`` (none where no op does)."""
    found = [b for b in bands if b is not None]
    if not found:
        return []
    ways = [w for w in ROUTES if any(w in b.route.split(", ") for b in found)]
    cover = table()["held_out_coverage"]
    held = "; ".join(
        f"{w} {min(cover[m].values()):.0%}-{max(cover[m].values()):.0%}" for w, m in ((w, MEASURED_AS[w]) for w in ways)
    )
    within = (
        " (no two measured GPUs share a generation: within a generation takes the range measured across generations)"
        if "within" in ways
        else ""
    )
    return [
        "range: where 80% of measured times fall, from published kernel timings of the op's class priced as this "
        "device prices it (" + "; ".join(f"{w}: {label(w)}" for w in ways) + f"){within}; a total adds its ops' "
        f"ranges; held out, they held {held} of a GPU's rows (costmodel explain ranges)"
        + (
            ""
            if hw is None or hw.vendor == "NVIDIA"
            else f"; no {hw.vendor} device is measured there: its range is NVIDIA GPUs' under the same route"
        )
    ]


#: How a kernel prediction's range is derived (costmodel explain ranges).
RANGES_TEXT = (
    "range: measured / predicted of published kernel timings of the op's class, priced the way the device prices "
    "it: fitted on the device, transferred within or across GPU generations, or the datasheet roofline (a route "
    "each); between the route's percentiles, the narrowest whose ranges derived without a GPU hold 80% of its "
    "rows, on the A100, H100 and B200 tables (costmodel/error_bands.yaml, derived by scripts/error_bands.py); a "
    "total adds its ops' ranges; a device of another vendor takes NVIDIA GPUs' range under the same route"
)


@lru_cache(maxsize=1)
def served_table() -> dict:
    """The shipped ranges of served predictions (``costmodel/served_bands.yaml``)."""
    from costmodel.core.files import safe_yaml

    return safe_yaml(resources.files("costmodel").joinpath("served_bands.yaml").read_text(encoding="utf-8"))


def served_keys(engine: str, kind: str, mode: str) -> list[tuple[str, str, str]]:
    """The groups a served range is looked up by, narrowest first (engine, model kind "dense" or "moe", mode "agg"
    or "disagg"; "all" for any): the engine's own deployments of any model before other engines' of the same kind,
    since what an engine does beside the kernels (its scheduler, its front end, the benchmark client it is measured
    with) moves a served prediction more than the model's kind does (held out, a model's rows fall inside ranges
    derived this way 86% of the time for TTFT, against 78% with the kind first: scripts/serving_bands.py)."""
    return [
        (engine, kind, mode),
        (engine, "all", mode),
        ("all", kind, mode),
        ("all", "all", mode),
        ("all", "all", "all"),
    ]


def served(engine: str, moe: bool, mode: str, ttft_s: float, tpot_s: float) -> tuple[Band, Band]:
    """The expected ranges of a served prediction's mean TTFT and TPOT: measured / predicted over the measured
    deployments of the same engine, model kind and mode (else the nearest wider group), at the calibrated tails
    (:func:`served_label`)."""
    found = {(b["engine"], b["kind"], b["mode"]): b for b in served_table()["bands"]}
    for key in served_keys(engine, "moe" if moe else "dense", mode):
        if key in found:
            b = found[key]
            basis = _served_basis(key, b["ttft"]["n"])
            return (
                Band(low_s=ttft_s * b["ttft"]["low"], high_s=ttft_s * b["ttft"]["high"], route="served", basis=basis),
                Band(low_s=tpot_s * b["tpot"]["low"], high_s=tpot_s * b["tpot"]["high"], route="served", basis=basis),
            )
    raise KeyError("served_bands.yaml has no 'all' range")  # the shipped file always has one


def served_label() -> str:
    """The percentiles served ranges span, as a reader sees them: ``p3-p97`` where TTFT's and TPOT's are the same,
    ``TTFT p3-p97, TPOT p3-p91`` where not."""
    tails = served_table()["tails"]
    span = {m: percentile_span(tails[m]) for m in ("ttft", "tpot")}
    return span["ttft"] if span["ttft"] == span["tpot"] else f"TTFT {span['ttft']}, TPOT {span['tpot']}"


def _served_basis(key: tuple[str, str, str], n: int) -> str:
    from costmodel.core.vocab import ENGINE_TITLES

    engine, kind, mode = key
    who = ENGINE_TITLES.get(engine, engine) if engine != "all" else "any engine"
    what = {"dense": "dense models", "moe": "mixture-of-experts models"}.get(kind, "any model")
    how = {"agg": ", aggregated", "disagg": ", disaggregated"}.get(mode, "")
    return f"{n} measured H100 deployments of {who} serving {what}{how}"


def served_assumption(ttft: Band, device: str) -> str:
    """The assumption line of a served prediction's ranges."""
    held = served_table()["held_out_coverage"]["all"]
    where = (
        ""
        if device == "h100_sxm"
        else (f"; measured on H100s: on {device} the kernels' own error (fitted or transferred) comes on top")
    )
    return (
        f"TTFT and TPOT ranges ({served_label()}): where 80% of measured means fall, from the {ttft.basis} in "
        f"NVIDIA's silicon sample; held out by model, they held {held['ttft']:.0%} of its TTFTs and "
        f"{held['tpot']:.0%} of its TPOTs{where} (costmodel explain served-ranges)"
    )


#: How a served prediction's ranges are derived (costmodel explain served-ranges).
SERVED_RANGES_TEXT = (
    "TTFT and TPOT ranges: measured / predicted over the measured deployments of the same engine and kind (dense "
    "or mixture of experts, aggregated or disaggregated) in NVIDIA's silicon sample, each predicted as the "
    "prediction is, between the percentiles the narrowest whose ranges derived without a model hold 80% of its "
    "rows (costmodel/served_bands.yaml, derived by scripts/serving_bands.py); on another device than the H100 the "
    "kernels' own error (fitted or transferred) comes on top"
)

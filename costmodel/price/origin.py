"""Where a device's time-model parameters come from, as a typed :class:`Origin`: fitted on the device itself,
or transferred from a fitted device of the nearest generation by :data:`TRANSFER_RULE`; per timing convention
(:func:`resolve`), with the mechanisms switched on (:func:`time_model`). A device with neither is priced by its
datasheet roofline.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.hardware.mechanisms import (
    CLASSES,
    FALLBACK,
    LOW_PRECISION_GEMM,
    MECHANISMS,
    MOE_GEMM,
    TIMINGS,
    WEIGHT_MATH,
)
from costmodel.price.transfer import NEAREST_TIMING, Origin, attention_kind, own_kernel, transfer

#: NVIDIA generations in order: a device without fitted data takes a fitted device's parameters from the
#: same generation, else the nearest older one, else the nearest newer one.
GENERATIONS: tuple[str, ...] = ("volta", "turing", "ampere", "ada", "hopper", "blackwell")
#: Another vendor's generations, each placed in :data:`GENERATIONS` at the NVIDIA generation whose matrix units take the
#: same narrowest formats, which is also the one it shipped against: CDNA2 (MI200, 2021) multiplies fp16 and bf16 but
#: no fp8, as Ampere; CDNA3 (MI300X 2023, MI325X 2024) adds fp8, as Hopper; CDNA4 (MI355X, 2025) adds fp6 and fp4, as
#: Blackwell (ROCm documentation, "Data types and precision support", per GPU). A device of another vendor takes a
#: fitted NVIDIA device's parameters by the same :data:`TRANSFER_RULE` as an NVIDIA device of that generation: fractions
#: of its own datasheet peaks and bandwidth, SM time at its own compute units and clock; nothing is fitted per vendor.
PEER_GENERATIONS = {"cdna2": "ampere", "cdna3": "hopper", "cdna4": "blackwell"}


def generation_rank(generation: str | None) -> int | None:
    """Where a generation sits in :data:`GENERATIONS` (another vendor's at its peer's,
    :data:`PEER_GENERATIONS`); None for one without a place (TPUs, CPUs)."""
    generation = PEER_GENERATIONS.get(generation, generation)
    return GENERATIONS.index(generation) if generation in GENERATIONS else None


#: Classes priced by the device's attention kernel: these come from a fitted device whose attention kernel is of the
#: same kind (:data:`costmodel.hardware.profile.ATTENTION_KERNEL_KINDS`) where there is one, by the generation order among
#: those; the other classes by the generation order alone.
ATTENTION_CLASSES: tuple[str, ...] = ("decode_attention", "prefill_attention")


def reference_for(hw, exclude=(), cls: str | None = None):
    """The fitted shipped profile whose parameters ``hw`` borrows (same generation first), or None; for one of
    :data:`ATTENTION_CLASSES`, among the fitted devices whose attention kernel is of ``hw``'s kind where any is."""
    gen = generation_rank(hw.architecture.generation) if hw.architecture is not None else None
    if gen is None:
        return None
    from costmodel.hardware.catalog import fitted_profiles

    fitted = [
        p
        for p in fitted_profiles()
        if p.architecture.generation in GENERATIONS and p.id != hw.id and p.id not in exclude
    ]
    if not fitted:
        return None
    kind = attention_kind(hw) if cls in ATTENTION_CLASSES else None
    if kind is not None:
        fitted = [p for p in fitted if attention_kind(p) == kind] or fitted
    return _nearest(gen, fitted)


def _nearest(gen: int, profiles: list):
    """The profile of the nearest generation to ``gen``: the same first, else the nearest older, else newer."""

    def rank(p):
        other = GENERATIONS.index(p.architecture.generation)
        return (other != gen, other > gen, abs(other - gen), p.id)

    return min(profiles, key=rank)


def engine_source(hw, engine: str):
    """The shipped profile whose ``engine``'s own kernel classes ``hw`` runs
    (:attr:`costmodel.hardware.profile.HardwareProfile.engine_kernels`): its own where that engine's kernels were
    timed on it, else the nearest by :data:`TRANSFER_RULE`'s generation order that has them; None where none has."""
    if engine in hw.engine_kernels:
        return hw
    gen = generation_rank(hw.architecture.generation) if hw.architecture is not None else None
    if gen is None:
        return None
    from costmodel.hardware.catalog import fitted_profiles

    have = [p for p in fitted_profiles() if engine in p.engine_kernels and p.architecture.generation in GENERATIONS]
    return _nearest(gen, have) if have else None


def with_engine(
    resolved: Resolved | None, hw, timing: str, engine: str | None, served: bool = False
) -> Resolved | None:
    """``resolved`` with ``engine``'s own kernel classes where they were fitted (on ``hw``, or carried to it from
    :func:`engine_source` by the same transfer rule as the rest where ``hw`` borrows that class: a class fitted on
    the device itself keeps its own), under CUDA-graph timing (the engines' own); with
    ``served``, only those its served predictions run (:attr:`costmodel.hardware.profile.EngineKernels.served`);
    the other classes as they are (vLLM's)."""
    src = engine_source(hw, engine) if resolved is not None and engine is not None and timing == "graph" else None
    if src is None:
        return resolved
    classes, origin = dict(resolved.classes), dict(resolved.origin)
    own = src.engine_kernels[engine]
    for cls, eff in own.classes.items():
        mine = origin[cls].kind == "fitted" and origin[cls].device == hw.id if cls in classes else False
        if cls not in classes or (served and cls not in own.served) or (src is not hw and mine):
            continue  # a class the device does not run (no fp8 math), or one fitted on the device itself
        where = Origin("fitted" if src is hw else "transferred", src.id)
        if src is not hw:
            eff, where = own_kernel(transfer(eff, src, hw, cls), where, hw, src, cls, timing)
        classes[cls], origin[cls] = eff, where.noted(f" ({engine}'s own kernel)")
    return Resolved(classes, origin)


def attention_reference(p, ref=None):
    """The fitted profile ``p``'s attention classes come from, where it is not ``ref`` (the one its other classes
    come from, :func:`reference_for`); else None."""
    attention = reference_for(p, cls=ATTENTION_CLASSES[0])
    return attention if attention is not None and (ref is None or attention.id != ref.id) else None


def efficiency_status(p) -> str:
    """Where a profile's efficiency parameters come from: fitted (with their count), transferred, both (a device
    fitted on some classes only, the rest transferred), or none."""
    ref = reference_for(p)
    if p.efficiency is not None:
        own = f"fitted ({p.efficiency.parameters})"
        partial = ref is not None and not {"gemm", "decode_attention", "prefill_attention"} <= set(p.efficiency.classes)
        return f"{own} + from {ref.id}" if partial else own
    if ref is None:
        return "datasheet only"
    attention = attention_reference(p, ref)
    return f"from {ref.id}" + (f", attention {attention.id}" if attention is not None else "")


@dataclass(frozen=True)
class Resolved:
    """The parameters a device's predictions use, per class, and where each came from."""

    classes: dict
    origin: dict  # class -> Origin

    def get(self, cls: str):
        return self.classes.get(cls)


#: Classes of low-precision GEMM kernels and the math they need: only a device with that peak has them.
LOW_PRECISION_CLASSES = {cls: WEIGHT_MATH[weights] for weights, cls in LOW_PRECISION_GEMM.items()}
LOW_PRECISION_CLASSES |= {MOE_GEMM[cls]: math for cls, math in LOW_PRECISION_CLASSES.items()}


def resolve(hw, timing: str, reference="auto", _seen: frozenset = frozenset()) -> Resolved | None:
    """Per class: the device's own fitted parameters where it has them for ``timing``; the rest transferred
    from :func:`reference_for`'s device (or ``reference``, a profile, or None for no transfer). None when
    neither exists (a datasheet-only device)."""
    own = hw.efficiency.classes if hw.efficiency is not None else {}
    found: dict = {}  # per group of classes (the attention classes, the rest): (reference, what it predicts with)
    seen = _seen | {hw.id}

    def lookup(cls):  # loaded only when the device's own fit does not cover a class
        group = cls in ATTENTION_CLASSES
        if group not in found:
            r = reference_for(hw, seen, cls) if reference == "auto" else reference
            # what the reference itself predicts with: its own fit, and what it borrows (never from here)
            found[group] = (
                r,
                (resolve(r, timing, "auto" if reference == "auto" else None, seen) if r is not None else None),
            )
        return found[group]

    def ref(cls):
        return lookup(cls)[0]

    def theirs_for(cls):
        r, theirs = lookup(cls)
        return theirs.classes.get(cls) if r is not None and theirs is not None else None

    classes, origin = {}, {}
    for cls in CLASSES:
        if cls in LOW_PRECISION_CLASSES and LOW_PRECISION_CLASSES[cls] not in hw.peak_flops_per_s:
            continue  # a device without fp8 (fp4) math runs no fp8 (fp4) GEMM
        mine = own.get(cls)
        near = NEAREST_TIMING.get(timing)
        other = FALLBACK.get(cls)
        if mine is None and other in classes and origin[other].kind == "fitted" and origin[other].device == hw.id:
            # this device's own fit of the parent class (or of the parent's parent)
            classes[cls], origin[cls] = classes[other], origin[other].noted(f" (its {other} class)")
            continue
        covered = mine is not None and (timing in mine.fixed_s or near in mine.fixed_s)
        theirs = None if covered else theirs_for(cls)
        if mine is None and theirs is None:
            if other in classes:
                classes[cls], origin[cls] = classes[other], origin[other].noted(f" (its {other} class)")
            continue
        eff = mine if mine is not None else transfer(theirs, ref(cls), hw, cls)
        where = (
            Origin("fitted", hw.id)
            if mine is not None
            else Origin("transferred", ref(cls).id, via=lookup(cls)[1].origin[cls])
        )
        if mine is None:
            eff, where = own_kernel(eff, where, hw, ref(cls), cls, timing)
        if timing not in eff.fixed_s:
            if near in eff.fixed_s:
                # a graph replay runs the same kernels back to back: its fixed cost is the kernels' (and back)
                eff = eff.model_copy(update={"fixed_s": {**eff.fixed_s, timing: eff.fixed_s[near]}})
                where = where.noted(f" ({near} fixed cost for {timing})")
            elif mine is not None and theirs is not None and timing in theirs.fixed_s:
                eff = eff.model_copy(update={"fixed_s": {**eff.fixed_s, timing: theirs.fixed_s[timing]}})
                where = where.noted(f"; {timing} fixed cost from {ref(cls).id}")
            elif other in classes and timing in classes[other].fixed_s:
                # a class fitted under another convention only: the launch of its parent class's kernels
                eff = eff.model_copy(update={"fixed_s": {**eff.fixed_s, timing: classes[other].fixed_s[timing]}})
                where = where.noted(f" ({timing} fixed cost of its {other} class)")
            elif child := next(
                (c for c, parent in FALLBACK.items() if parent == cls and c in own and timing in own[c].fixed_s), None
            ):
                # or of its first child class fitted under that convention (an RMSNorm launched like a LayerNorm)
                eff = eff.model_copy(update={"fixed_s": {**eff.fixed_s, timing: own[child].fixed_s[timing]}})
                where = where.noted(f" ({timing} fixed cost of its {child} class)")
            else:
                where = where.noted(f" (no {timing} fixed cost)")
        classes[cls], origin[cls] = eff, where
    return Resolved(classes, origin) if classes else None


@dataclass(frozen=True)
class TimeModel:
    """What a prediction uses: the resolved parameters (None: datasheet roofline only), the timing
    convention and the mechanisms switched on."""

    resolved: Resolved | None
    timing: str
    on: frozenset
    write_in_call: bool = False  # a prompt call holds its cache write where the fit prices none (vocab.PROMPT_WRITES)

    @property
    def active(self) -> bool:
        return self.resolved is not None and bool(self.on)


def time_model(
    hw,
    timing: str = "graph",
    without=(),
    prompt_write: str | None = None,
    engine: str | None = None,
    served: bool = False,
) -> TimeModel:
    """The time model of ``hw`` for a timing convention, with the named mechanisms switched off
    (``without=("all",)`` is the bare datasheet roofline), and where ``prompt_write`` says so the prompt call's
    cache write held in the call or not (:data:`costmodel.core.vocab.PROMPT_WRITES`); with ``engine``, its own kernel
    classes where they were fitted (:func:`with_engine`; ``served``: those its served predictions run)."""
    from costmodel.core.checks import names
    from costmodel.core.vocab import PROMPT_WRITES, choice

    timing = choice("timing", timing, TIMINGS)
    without = names("without", without)
    off = set()
    for name in without:
        off |= set(MECHANISMS) if name == "all" else {choice("mechanism", name, (*MECHANISMS, "all"))}
    if prompt_write is not None:
        prompt_write = choice("prompt write", prompt_write, PROMPT_WRITES)
        off |= {"cache_write"} if prompt_write == "apart" else set()
    on = frozenset(MECHANISMS) - off
    if hw.efficiency is not None:  # a device whose fit covers only some mechanisms (a CPU has no tiles)
        on &= frozenset(hw.efficiency.mechanisms)
    resolved = with_engine(resolve(hw, timing), hw, timing, engine, served)
    return TimeModel(resolved, timing, on, prompt_write == "in-call")

"""The transfer rule: a fitted device's kernel parameters carried to a device nobody measured (:data:`TRANSFER_RULE`), fractions of peak kept, fixed costs by the clock, and the device's own kernels' splits, tiles and softmax."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from costmodel.hardware.mechanisms import (
    GEMMS,
    VECTOR_CLASSES,
)

#: Classes whose fixed cost per call is carried as SM time, scaling with the inverse clock: a matrix product's and a
#: decode attention call's (the dependent instructions and cache round trips of a kernel that does little, whatever
#: its size). Leaving each GPU out, carrying them so takes the A100's decode attention from the H100 from 16.4% to
#: 11.5% median error and the H100's from the A100 from 19.3% to 15.9%, the H100's GEMMs from the A100 from 14.7% to
#: 12.3%, and moves nothing between the H100 and the B200, whose clocks are within 1%. A prompt's attention call is not
#: among them: so carried, its error grows in every direction with a clock difference (the A100's from the H100 16.4%
#: to 18.4%), its per-tile prologues and epilogues (``tile_s``) carrying the clock already. The vector classes keep
#: theirs: only the A100 times them, so no second GPU says how they carry (docs/validation.md).
CLOCKED_FIXED_COST: tuple[str, ...] = (*GEMMS, "decode_attention")


#: A class fitted without a timing convention's fixed cost takes the nearest convention's.
NEAREST_TIMING = {"graph": "kernels", "kernels": "graph"}


TRANSFER_RULE = (
    "fractions of peak (compute efficiency, bandwidth ceiling, curve exponent, small-tile exponent) are kept; the "
    "fixed cost per call of a matrix product and of a decode attention call is SM time and scales with the inverse "
    "clock, a prompt attention call's and a vector kernel's is kept; so is when the decode kernel splits a context (a "
    "device whose engine runs another decode kernel splits as that kernel does, FlashAttention-2's combine kernel and "
    "the copies packing its query in and its output out at the reference's fixed cost of a small kernel each, at this "
    "device's clock, and a context it does not split streamed by one SM at most at that SM's share of the datasheet "
    "bandwidth where the reference's kernel never left one unsplit; one whose prompt kernel runs the online softmax "
    "between its matrix products, where the reference's hides it, pays the softmax's instructions at its own FP32 and "
    "special-function units, and one whose kernel is of the reference's kind pays the reference's cost of a score in "
    "proportion to the time those instructions take on each device's units; a prompt kernel of another kind tiles its "
    "queries as that kernel does, a group's query heads in one tile or not, and pays none of the reference's per-tile "
    "fill and drain where it runs more CTAs an SM); the half-bandwidth bytes scale with the datasheet bandwidth (the "
    "same kernel on the same SMs: bytes in flight = bandwidth x latency), except a decode kernel carried to a device "
    "that runs another, whose ramp is kept in bytes and whose work unit's SM time follows the SM's share of the "
    "memory bandwidth instead of the clock (each generation's decode kernel reaches half its GPU's bandwidth in "
    "5.6-8.0 MB on the A100, H100 and B200, 2.0-8.0 TB/s, and spends on a work unit what its SM's share of the "
    "bandwidth takes to stream 61-88 kB); a vector kernel's (norms, activations, elementwise ops, copies) achieved "
    "bandwidth scales instead with SMs x clock (the bytes each SM keeps in flight), never above the datasheet "
    "bandwidth, its ramp lasting as long; the SM time of a decode work unit, of a split-KV combine's step over one "
    "split and of a prefill tile's prologue and epilogue scales with the inverse clock and one SM's streaming rate "
    "with the clock, the device time of an attention score with the inverse of SMs x clock"
)


def sm_share(p) -> float:
    """Bytes per second of the datasheet memory bandwidth per SM."""
    return p.bandwidth / p.architecture.compute_units.value


def clock_ratios(src, dst) -> tuple[float, float]:
    """(``src``'s clock over ``dst``'s, ``src``'s SMs over ``dst``'s); the clocks taken as equal where either device
    states none."""
    clock = lambda p: p.architecture.clock_hz.value if p.architecture.clock_hz else None  # noqa: E731
    per_clock = clock(src) / clock(dst) if clock(src) and clock(dst) else 1.0
    return per_clock, src.architecture.compute_units.value / dst.architecture.compute_units.value


def transfer(eff, src, dst, cls: str | None = None):
    """``eff`` (a class's parameters fitted on ``src``) carried to ``dst`` by :data:`TRANSFER_RULE` (``cls``: its
    class; a vector class's achieved bandwidth follows :func:`vector_bandwidth_scale`)."""
    per_clock, sms = clock_ratios(src, dst)
    if cls in VECTOR_CLASSES:
        ceiling = min(1.0, eff.bandwidth_ceiling * vector_bandwidth_scale(src, dst))
        half = eff.bandwidth_half_bytes * ceiling * dst.bandwidth / (eff.bandwidth_ceiling * src.bandwidth)
        return eff.model_copy(update={"bandwidth_ceiling": ceiling, "bandwidth_half_bytes": half, "fitted": ()})
    fixed = {k: v * per_clock for k, v in eff.fixed_s.items()} if cls in CLOCKED_FIXED_COST else eff.fixed_s
    return eff.model_copy(
        update={
            "bandwidth_half_bytes": eff.bandwidth_half_bytes * dst.bandwidth / src.bandwidth,
            "fixed_s": fixed,
            "unit_sm_s": eff.unit_sm_s * per_clock,
            "combine_split_s": eff.combine_split_s * per_clock,
            "unsplit_sm_bandwidth": eff.unsplit_sm_bandwidth / per_clock,
            "score_s": eff.score_s * per_clock * sms,
            "tile_s": eff.tile_s * per_clock,
            "fitted": (),
        }
    )


def vector_bandwidth_scale(src, dst) -> float:
    """The factor on a vector kernel's fraction of the datasheet bandwidth from ``src`` to ``dst``: its achieved
    bandwidth scales with SMs x clock, not with the datasheet bandwidth (a device without a stated clock takes the
    other's, as :func:`transfer` does)."""
    per_clock, sms = clock_ratios(src, dst)
    return src.bandwidth / (sms * per_clock * dst.bandwidth)


def carried(eff, src, dst, cls: str, timing: str = "graph", gemm=None):
    """``eff`` (``cls``'s parameters fitted on ``src``) as ``dst`` prices with them: :func:`transfer`, for decode
    attention the split of ``dst``'s own decode kernel, for prefill attention its own softmax where its kernel runs it
    between the matrix products (what :func:`resolve` does with a reference; ``gemm``: ``src``'s GEMM class, where
    ``src`` does not carry its fit)."""
    return own_kernel(transfer(eff, src, dst, cls), Origin("transferred", src.id), dst, src, cls, timing, gemm)[0]


def own_kernel(eff, where, hw, ref, cls: str, timing: str, gemm=None):
    """(``eff``, ``where``) of attention carried from ``ref`` to ``hw`` as ``hw``'s own kernel runs it: the decode
    kernel's split (:func:`_own_decode_kernel`), the prompt kernel's softmax (:func:`_own_softmax`); other classes
    as they are."""
    if cls == "decode_attention":
        return _own_decode_kernel(eff, where, hw, ref, timing, gemm)
    if cls == "prefill_attention":
        return _own_prefill_tiles(*_own_softmax(eff, where, hw, ref), hw, ref)
    return eff, where


def _own_decode_kernel(eff, where, hw, ref, timing: str, gemm=None):
    """Decode attention carried from a device whose engine runs another kernel, where both devices name theirs: its
    bandwidth ramp in the reference's bytes, its work unit's SM time scaled by the SMs' shares of the bandwidth
    (:data:`TRANSFER_RULE`) and the context split of this device's kernel
    (:data:`costmodel.hardware.profile.DECODE_KERNELS`). A split the reference's fit
    never saw keeps the reference's parameters and runs without their grouped-kernel costs, except that a context
    this device's kernel leaves unsplit, which the reference's kernel never did (its fit has no streaming rate of one
    SM), is streamed by its one SM at most at that SM's share of the datasheet bandwidth; a kernel that launches
    kernels of its own beside them (:data:`costmodel.hardware.profile.DECODE_LAUNCHES`: FlashAttention-2's split-KV combine
    and its query's copies in and out) has each priced at the reference's fixed cost of a small kernel under
    ``timing`` (its GEMM class's, the one fitted cost of a kernel that does little) at this device's clock
    (:data:`CLOCKED_FIXED_COST`), in place of the reference's own combine cost."""
    from costmodel.hardware.kernels import DECODE_KERNELS, DECODE_LAUNCHES

    mine, theirs = hw.architecture.kernels.decode_kernel, ref.architecture.kernels.decode_kernel
    if mine is None or theirs is None or mine == theirs:
        return eff, where
    # another kernel reaches half of this device's bandwidth in as many bytes as the reference's kernel reaches half
    # of its own, and spends on a work unit what this device's SM share of the bandwidth takes where the reference's
    # spent what its own took (TRANSFER_RULE): the half-bandwidth bytes as fitted, not scaled as the same kernel's on
    # wider memory, and the unit time by the SMs' bandwidth shares, not by the clocks
    per_clock, _ = clock_ratios(ref, hw)
    eff = eff.model_copy(
        update={
            "bandwidth_half_bytes": eff.bandwidth_half_bytes * ref.bandwidth / hw.bandwidth,
            "unit_sm_s": eff.unit_sm_s / per_clock * sm_share(ref) / sm_share(hw),
        }
    )
    where = where.noted(
        f" (its bandwidth ramp kept in bytes and its work unit's time at each SM's share of the "
        f"bandwidth: {mine.replace('_', ' ')}, not {theirs.replace('_', ' ')})"
    )
    if DECODE_KERNELS[mine] == eff.split_kv:
        return eff, where
    update = {"split_kv": DECODE_KERNELS[mine]}
    where = where.noted(f" (contexts split as {mine.replace('_', ' ')} splits them, not {theirs.replace('_', ' ')})")
    if update["split_kv"] == "grouped" and not eff.unsplit_sm_bandwidth:
        # a work unit whose context is not split is streamed by one SM, which draws no more than its share of the
        # memory; a reference whose kernel always splits has no fitted rate for it
        update["unsplit_sm_bandwidth"] = share = sm_share(hw)
        where = where.noted(
            f"; an unsplit context streamed by one SM at its share of the bandwidth ({share / 1e9:.1f} GB/s)"
        )
    if gemm is None and ref.efficiency is not None:
        gemm = ref.efficiency.classes.get("gemm")
    # a small kernel of this device: the reference's GEMM class carried here, its fixed cost at this clock
    launch = small_kernel_s(transfer(gemm, ref, hw, "gemm") if gemm is not None else None, timing)
    if mine in DECODE_LAUNCHES and launch is not None:
        n = DECODE_LAUNCHES[mine]
        update |= {"split_s": n["combine"] * launch, "group_copy_s": n["copies"] * launch}
        where = where.noted(
            f"; its combine kernel and its query's copies in and out at {ref.id}'s fixed cost of a "
            f"small kernel each at this clock ({launch * 1e6:.2f} µs, its GEMM class's)"
        )
    return eff.model_copy(update=update), where


def _softmax_cycles(p, clock: float | None = None) -> float | None:
    """SM cycles of the online softmax's instructions per attention score on ``p``
    (:data:`costmodel.hardware.profile.SOFTMAX_WORK`) at its FP32 lanes and special-function units per SM (``clock``: the
    clock its FP32 lanes are read at where ``p`` states none); None where its FP32 peak or clock is unknown."""
    from costmodel.hardware.kernels import SOFTMAX_WORK

    arch = p.architecture
    clock = arch.clock_hz.value if arch.clock_hz is not None else clock
    if clock is None or "fp32" not in p.peak_flops_per_s:
        return None
    lanes = p.peak_flops_per_s["fp32"].value / (2 * arch.compute_units.value * clock)  # FP32 FMAs per SM per clock
    lanes = 2.0 ** round(math.log2(lanes))  # 64 or 128: a datasheet's FP32 peak is not always at the boost clock
    # FlashAttention-2's count stands for the online softmax of every kernel: FlashAttention-3 and FlashInfer run the
    # same instructions a score, their output's rescale over key tiles as wide or wider (4-4.5 FP32 instructions in all,
    # which moves a ratio of two devices' cycles by 0.02)
    work = SOFTMAX_WORK["flash_attention_2"]
    return work["fp32"] / lanes + work["sfu"] / arch.sfu_rate


def _own_softmax(eff, where, hw, ref):
    """Prefill attention carried as ``hw``'s own kernel runs its online softmax. A kernel that runs it between its
    matrix products (``synchronous``: :data:`costmodel.hardware.profile.ATTENTION_KERNEL_KINDS`), carried from one whose kernel
    hides it under them, pays the softmax's own instructions (:data:`costmodel.hardware.profile.SOFTMAX_WORK`) at the
    device's FP32 lanes and special-function units per SM, not the reference's unhidden remainder. Carried between
    kernels of the same kind, the reference's cost of a score (the instructions, or the part of them its matrix
    products do not hide) scales with the time those instructions take on each device's units (64 or 128 FP32 lanes
    per SM, 16 or 32 special-function results per SM per clock), so that a device with twice the special-function
    units (Blackwell Ultra) spends less on each exponential, and one with twice the FP32 lanes on the rest."""
    arch, ref_clock = hw.architecture, ref.architecture.clock_hz
    mine, theirs = attention_kind(hw), attention_kind(ref)
    own = _softmax_cycles(hw, ref_clock.value if ref_clock is not None else None)
    if own is None or mine is None or theirs is None:  # own is None where neither device states a clock
        return eff, where
    sms, clock = arch.compute_units.value, (arch.clock_hz or ref_clock).value
    if mine == "synchronous" and theirs != mine:
        return (
            eff.model_copy(update={"score_s": own / (sms * clock)}),
            where.noted(
                f"; a score's softmax at {hw.id}'s own units ({own:.3f} SM cycles: "
                f"{arch.kernels.decode_kernel.replace('_', ' ')} runs it between its matrix products)"
            ),
        )
    theirs_cycles = _softmax_cycles(ref, clock)
    if mine != theirs or theirs_cycles is None or abs(own / theirs_cycles - 1) < 1e-9:
        return eff, where
    ratio = own / theirs_cycles
    return (
        eff.model_copy(update={"score_s": eff.score_s * ratio}),
        where.noted(
            f"; a score's softmax {ratio:.2f}x the SM cycles of {ref.id}'s ({own:.3f} against "
            f"{theirs_cycles:.3f} at each device's FP32 lanes and special-function units)"
        ),
    )


def _own_prefill_tiles(eff, where, hw, ref):
    """Prefill attention carried to a device whose prompt kernel tiles its queries otherwise than the reference's
    (both kernels named, and different): whether a tile holds a group's query heads follows this device's kernel
    (:data:`costmodel.hardware.profile.PREFILL_PACKS_GQA`, where it is stated), and a kernel that runs more CTAs on an SM than
    the reference's (:data:`costmodel.hardware.profile.PREFILL_CTAS_PER_SM`) pays none of the reference's per-tile fill and
    drain (``tile_s``): its CTAs' starts and ends run beside each other's main loops."""
    from costmodel.hardware.kernels import PREFILL_CTAS_PER_SM, PREFILL_PACKS_GQA

    mine, theirs = hw.architecture.kernels.decode_kernel, ref.architecture.kernels.decode_kernel
    if mine is None or theirs is None or mine == theirs:
        return eff, where
    update, said = {}, []
    pack = PREFILL_PACKS_GQA.get(mine)
    if pack is not None and pack != eff.pack_gqa:
        update["pack_gqa"] = pack
        said.append(
            f"a group's query heads {'in' if pack else 'not in'} one tile, as {mine.replace('_', ' ')} tiles them"
        )
    ctas, theirs_ctas = PREFILL_CTAS_PER_SM.get(mine), PREFILL_CTAS_PER_SM.get(theirs)
    if ctas is not None and theirs_ctas is not None and ctas > theirs_ctas and eff.tile_s:
        update["tile_s"] = 0.0
        said.append(f"no per-tile fill and drain ({ctas} CTAs an SM, not {theirs_ctas})")
    if not update:
        return eff, where
    return eff.model_copy(update=update), where.noted(f"; {', '.join(said)}")


@dataclass(frozen=True)
class Origin:
    """Where a class's parameters came from: ``fitted`` on ``device``, or ``transferred`` from it by
    :data:`TRANSFER_RULE` (``via``: the reference's own origin, when not plainly fitted there); ``notes`` say
    what was borrowed besides (another convention's fixed cost, a parent class). ``str()`` says it in words."""

    kind: str  # "fitted" | "transferred"
    device: str
    via: Origin | None = None
    notes: tuple[str, ...] = ()

    @property
    def plain(self) -> bool:
        """Fitted on the device itself, nothing borrowed."""
        return self.kind == "fitted" and not self.notes

    def noted(self, note: str) -> Origin:
        return Origin(self.kind, self.device, self.via, (*self.notes, note))

    def __str__(self) -> str:
        base = f"fitted on {self.device}" if self.kind == "fitted" else f"transferred from {self.device}"
        if self.via is not None and not self.via.plain:
            base += f" [{self.via}]"
        return base + "".join(self.notes)


def attention_kind(p) -> str | None:
    """The kind of attention kernel a profile's engine runs (:data:`costmodel.hardware.profile.ATTENTION_KERNEL_KINDS`), or
    None where the profile names no kernel."""
    from costmodel.hardware.kernels import ATTENTION_KERNEL_KINDS

    return ATTENTION_KERNEL_KINDS.get(p.architecture.kernels.decode_kernel) if p.architecture is not None else None


def held_write_s(eff, write_bytes, hw, gemm, timing: str, on) -> np.ndarray | float:
    """Seconds of a prompt call's cache write where the call holds it (``write_bytes`` counted) but its class's
    parameters ``eff`` price none (fitted where the engine writes outside the call: no ``cache_write_ceiling``). The
    write is a kernel of its own in the call (vLLM's ``reshape_and_cache_flash`` before the attention kernel), priced
    as the transfer rule prices a kernel a carried call launches beside its own: the fixed cost of a small kernel
    under ``timing`` (:func:`small_kernel_s` of ``gemm``, the GEMM class the call is priced beside) and its bytes at
    the datasheet bandwidth, which no fit of a write has slowed. 0 where the parameters price the write themselves,
    the ``cache_write`` mechanism is off or no write is counted."""
    if eff is None or eff.cache_write_ceiling is not None or "cache_write" not in on or write_bytes is None:
        return 0.0
    launch = (small_kernel_s(gemm, timing) or 0.0) if "fixed" in on else 0.0
    return launch + np.asarray(write_bytes, float) / hw.bandwidth


def small_kernel_s(gemm, timing: str) -> float | None:
    """The fixed cost of a small kernel under ``timing``: ``gemm``'s (a GEMM class's parameters, the one fitted cost of
    a kernel that does little), or its nearest convention's; None where it has neither."""
    fixed = gemm.fixed_s if gemm is not None else {}
    return fixed.get(timing, fixed.get(NEAREST_TIMING.get(timing, ""), None))

"""The power a device draws while it works, and the energy of that work.

A board at rest draws its idle power. While a kernel runs it draws more: an active share of its headroom (leakage
at the boost voltage, clocks, schedulers) and, per unit of work, the energy of each FLOP in the dtype's unit and of
each byte moved from device memory to the SMs (DRAM, PHY and the way across the die) or over a link. Power is that
sum, capped at the board's limit:

    P = P_idle + P_active + (e_flop x FLOPs + e_byte x bytes + e_link x link bytes) / t,   P <= P_limit

The energy per FLOP of a matrix unit comes from the datasheet: the board's headroom over the dense tensor peak of
the dtype (a vendor rates that peak at the clock its power limit sustains under dense math), so a device nobody
metered gets its numbers from its board power, its peaks and its memory technology. The technology constants, each
with a range and a source, are ``energy.yaml``; every number here is priced at its central value and at both ends
(``corner``), which gives the energy's range.

The kernels' times were fitted on boards running at their own limit, where a kernel that would draw more already
ran throttled: at that limit a kernel's power is capped and its time kept. Under a lower limit (``nvidia-smi -pl``,
:attr:`HardwareProfile.power_limit_w`) the clocks throttle until the kernel's power fits, lengthening it: dynamic
power falls as the cube of the clock (P = C V^2 f with the voltage following the clock) for the work of the SMs,
while a byte from memory costs the same energy whenever it moves.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from costmodel.core.errors import CostModelError
from costmodel.core.memo import per_object
from costmodel.hardware.units import Sourced, Strict, bounded

MemoryTech = Literal["hbm2", "hbm2e", "hbm3", "hbm3e", "gddr6", "gddr6x", "gddr7"]
#: Where each technology constant is priced: its central value and the two ends of its range.
CORNERS = ("value", "low", "high")
#: The op kinds that move bytes over a link, not through device memory.
LINK_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send")


class SourcedWatts(Sourced):
    value: bounded(1.0, 1e5)


class Power(Strict):
    """A device's power facts: its board power limit (TDP, TBP or TGP, as its vendor names it), its idle power where
    one was measured, its memory technology and its process (node and year: the constants' years say how far they reach)."""

    board_w: SourcedWatts
    idle_w: SourcedWatts | None = None  # None: energy.yaml's idle share of the board's limit
    memory: MemoryTech
    process: str  # the node and the year the device shipped on it, e.g. "TSMC 4N, 2022"


@lru_cache(maxsize=1)
def constants() -> dict:
    """``energy.yaml``: the technology constants, each {value, low, high, year, confidence, source}."""
    from importlib import resources

    from costmodel.core.files import safe_yaml

    return safe_yaml(resources.files("costmodel.hardware").joinpath("energy.yaml").read_text(encoding="utf-8"))


def constant(name: str, corner: str = "value", memory: str | None = None) -> float:
    """One technology constant at ``corner`` (``memory``: the technology of a per-memory constant)."""
    c = constants()[name]
    return float((c[memory] if memory else c)[corner])


#: (id of a profile, corner) -> (the profile, its PowerModel): :func:`costmodel.core.memo.per_object`.
_MODELS: dict = {}


@dataclass(frozen=True)
class PowerModel:
    """One device's power at one ``corner`` of the constants: watts at rest, while a kernel runs and between
    kernels, and joules per FLOP (by dtype, matrix units; ``vector_j`` for the vector units), per byte from device
    memory and per byte over a link."""

    device: str
    corner: str
    board_w: float
    limit_w: float
    idle_w: float
    active_w: float
    gap_w: float
    tensor_j: dict
    vector_j: float
    byte_j: float
    link_j: float

    @classmethod
    def of(cls, hw, corner: str = "value") -> PowerModel | None:
        """``hw``'s power model (None where its profile states no power facts), made once per profile object and
        corner (profiles are frozen: a limit or an edit makes a copy)."""
        return per_object(_MODELS, hw, corner, lambda: cls._made(hw, corner))

    @classmethod
    def _made(cls, hw, corner: str) -> PowerModel | None:
        p = hw.power
        if p is None:
            return None
        board = p.board_w.value
        idle = p.idle_w.value if p.idle_w is not None else constant("idle_share", corner) * board
        active = constant("active_share", corner) * (board - idle)
        head = board - idle - active
        share = constant("tensor_share", corner)
        tensor = {d: share * head / f.value for d, f in hw.peak_flops_per_s.items()}
        # the vector units' rate: the fp32 peak where stated, else the slowest the device states (a TPU's VPU work)
        vector = (
            share
            * head
            / (
                hw.vector_peak("fp32")
                if "fp32" in hw.peak_flops_per_s
                else min(f.value for f in hw.peak_flops_per_s.values())
            )
        )
        per_bit = constant("memory_pj_per_bit", corner, p.memory) + constant("on_chip_pj_per_bit", corner)
        return cls(
            device=hw.id,
            corner=corner,
            board_w=board,
            limit_w=min(hw.power_limit_w or board, board),
            idle_w=idle,
            active_w=active,
            gap_w=constant("host_share", corner) * active,
            tensor_j=tensor,
            vector_j=vector,
            byte_j=8e-12 * per_bit,
            link_j=8e-12 * constant("link_pj_per_bit", corner),
        )

    @property
    def running_w(self) -> float:
        """A board's draw while a kernel runs, before any work: idle and active power."""
        return self.idle_w + self.active_w

    def work_j(self, op) -> tuple[np.ndarray, np.ndarray]:
        """(the SMs' joules, the bytes' joules) of one call of ``op`` (a :class:`costmodel.price.op.KernelOp`): its
        FLOPs at the energy of their unit and dtype, its bytes from device memory, or over a link for a
        collective (the bytes a ring moves per device)."""
        nbytes = np.asarray(op.bytes, float)
        if op.kind in LINK_KINDS:
            n = max(int(op.devices), 1)
            volume = {"all_reduce": 2 * (n - 1) / n, "send": 1.0}.get(op.kind, (n - 1) / n)
            return np.zeros(nbytes.shape), nbytes * volume * self.link_j
        per_flop = self.vector_j if op.kind == "elementwise" else self.tensor_j.get(op.dtype, self.vector_j)
        return np.asarray(op.flops, float) * per_flop, nbytes * self.byte_j

    def capped_work_j(self, op, seconds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the SMs' joules, the bytes' joules, their sum capped at the limit in force) of one call of ``op``
        taking ``seconds``: at the board's own limit the kernel fits' times already ran throttled where it binds;
        under a lower one ``seconds`` are the stretched times (:meth:`stretch`)."""
        sm, mem = self.work_j(op)
        room = np.maximum(self.limit_w - self.running_w, 0.0) * np.asarray(seconds, float)
        return sm, mem, np.minimum(sm + mem, room)

    def kernel(self, op, seconds) -> KernelPower:
        """The energy and power of one call of ``op`` taking ``seconds``: running power over its time and its work,
        capped at the limit in force (:meth:`capped_work_j`)."""
        sm, mem, work = self.capped_work_j(op, seconds)
        t = np.asarray(seconds, float)
        energy = self.running_w * t + work
        power = np.divide(energy, t, out=np.full(np.shape(energy), self.idle_w, float), where=t > 0)
        return KernelPower(_plain(energy), _plain(power), _plain(sm + mem > work))

    def stretch_check(self, limit_w: float) -> float:
        """The power a kernel's work may draw under ``limit_w`` (an error where the limit leaves it none)."""
        avail = limit_w - self.running_w
        if avail <= 0:
            raise CostModelError(
                f"a power limit of {limit_w:g} W is below {self.device}'s draw with a kernel running and no "
                f"work ({self.running_w:.0f} W: idle and active power); give a limit above it, up to {self.board_w:g} W"
            )
        return avail

    def stretch(self, op, seconds) -> np.ndarray:
        """How much longer ``op`` runs under the limit in force than at the board's (1 where the limit is the board's or
        does not bind): the SMs' power falls as the cube of the clock, the memory's with the time only."""
        t = np.asarray(seconds, float)
        if self.limit_w >= self.board_w:
            return np.ones(t.shape)
        avail = self.stretch_check(self.limit_w)
        sm, mem = self.work_j(op)
        safe = np.maximum(t, 1e-30)
        total = (sm + mem) / safe
        # at the board's limit the kernel ran at most at its headroom: the SMs' and memory's powers scaled to it
        scale = np.minimum(1.0, (self.board_w - self.running_w) / np.maximum(total, 1e-30))
        p_sm, p_mem = sm / safe * scale, mem / safe * scale
        return _solve_stretch(p_sm, p_mem, avail)


@dataclass(frozen=True)
class KernelPower:
    """A kernel's energy (J), mean power (W) and whether the board's limit capped it."""

    energy_j: object
    power_w: object
    capped: object


def _solve_stretch(p_sm, p_mem, avail: float) -> np.ndarray:
    """The smallest ``s >= 1`` with ``p_sm / s^3 + p_mem / s <= avail`` (bisection: the left side falls with s)."""
    need = p_sm + p_mem
    hi = np.maximum(need / avail, 1.0)  # there p_sm/s^3 + p_mem/s <= (p_sm + p_mem)/s <= avail
    lo = np.ones(np.shape(need))
    for _ in range(48):
        mid = (lo + hi) / 2
        over = p_sm / mid**3 + p_mem / mid > avail
        lo, hi = np.where(over, mid, lo), np.where(over, hi, mid)
    return np.where(need <= avail, 1.0, hi)


def _plain(x):
    a = np.asarray(x)
    return a.item() if a.ndim == 0 else a


def limited(op, hw, seconds):
    """``seconds`` of ``op`` on ``hw`` under the power limit set on it (unchanged at the board's own)."""
    if hw.power_limit_w is None or hw.power is None:
        return seconds
    return seconds * PowerModel.of(hw).stretch(op, seconds)


def with_limit(hw, limit_w: float | None):
    """``hw`` with its board's power limit set to ``limit_w`` watts (None: ``hw`` as it is); an error naming the
    board's limit where it is above it or the profile states none."""
    if limit_w is None:
        return hw
    from costmodel.core import checks

    limit_w = checks.number("power limit", limit_w)
    if hw.power is None:
        raise CostModelError(unavailable(hw) + "; a power limit needs it")
    if limit_w > hw.power.board_w.value:
        raise CostModelError(
            f"a power limit of {limit_w:g} W is above {hw.id}'s board limit of {hw.power.board_w.value:g} W; give "
            f"at most {hw.power.board_w.value:g}"
        )
    PowerModel.of(hw).stretch_check(limit_w)
    return hw.model_copy(update={"power_limit_w": limit_w})


def unavailable(hw) -> str:
    """Why ``hw`` has no energy figures."""
    return (
        f"{hw.id} states no board power (power.board_w with a source) in its profile, so no energy is priced; "
        "add its datasheet's TDP, TBP or TGP and its memory technology"
    )

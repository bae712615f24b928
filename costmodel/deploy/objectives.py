"""What a recommendation minimises under its latency targets (:data:`OBJECTIVES`), each candidate's rank by it, and
the prices per GPU-hour it is costed at: one for every device kind, or one per kind."""

from __future__ import annotations

from costmodel.core import checks
from costmodel.core.errors import CostModelError
from costmodel.core.vocab import OBJECTIVES
from costmodel.deploy.recommend_reports import Candidate
from costmodel.hardware.profile import HardwareProfile


def checked_prices(price, hws: list[HardwareProfile], minimise: str) -> float | dict[str, float] | None:
    """The price per GPU-hour as given (one for every device kind, or profile id -> price for each), checked: a
    price for every device kind where the cost is minimised."""
    if minimise not in OBJECTIVES:
        raise CostModelError(f"minimise must be one of {', '.join(OBJECTIVES)}, got {minimise!r}")
    if isinstance(price, dict):
        unknown = sorted(set(price) - {h.id for h in hws})
        if unknown:
            raise CostModelError(
                f"a price for {', '.join(unknown)}, which is not searched; give prices for {', '.join(h.id for h in hws)}"
            )
        for gpu, value in price.items():
            checks.number(f"price per hour of {gpu}", value, most=1e6)
    else:
        checks.number("price_per_gpu_hour", price, most=1e6, optional=True)
    if minimise == "cost":
        missing = [h.id for h in hws if price is None or (isinstance(price, dict) and h.id not in price)]
        if missing:
            raise CostModelError(f"minimising the cost needs a price per GPU-hour for {', '.join(missing)}")
    return price


def price_of(price: float | dict[str, float] | None, gpu: str) -> float | None:
    """One device kind's price per GPU-hour (None: none given for it)."""
    return price.get(gpu) if isinstance(price, dict) else price


def rank(c: Candidate, load: float, minimise: str = "gpus") -> tuple:
    """By the objective (:data:`OBJECTIVES`: the fewest GPUs, the cheaper per hour or the fewest joules per output
    token), then the fewest GPUs, the cheaper, then the one with more room above the load (what its units complete
    at most, the closed form's saturation, where known)."""
    room = -((c.saturation or c.per_unit) * (c.replicas or 1) - load)
    return (c.objective(minimise), c.gpus, c.cost_per_hour or 0.0, room)


def fewest(c: Candidate) -> tuple:
    """The fewest GPUs, then the cheaper: the order disaggregated candidates are simulated whole in."""
    return (c.gpus, c.cost_per_hour or 0.0)


def priced(c: Candidate, at, price) -> Candidate:
    """``c`` with the GPUs, cost per hour and joules per output token of its whole prediction ``at``."""
    gpus = at.devices if c.mode == "disagg" else c.unit_gpus * c.replicas
    each = price_of(price, c.gpu)
    return c.model_copy(
        update={
            "gpus": gpus,
            "cost_per_hour": gpus * each if each is not None else None,
            "energy_j_per_output_token": at.energy_j_per_output_token,
        }
    )

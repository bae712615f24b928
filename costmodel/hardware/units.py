"""The units a profile's numbers carry: each a bounded, sourced value with a confidence (pydantic types)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Confidence = Literal["high", "medium", "low", "measured"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def bounded(low: float, high: float, *, low_open: bool = False, high_open: bool = False):
    """A finite number (not a boolean, not a string) in a range; each range below says what it means."""
    bounds = {"gt" if low_open else "ge": low, "lt" if high_open else "le": high}
    return Annotated[float, Field(strict=True, allow_inf_nan=False, **bounds)]


#: The ranges a profile's numbers must lie in: what is physically meaningful for one device, far wider than
#: any device shipped (a megaflop to an exaflop per second, a megabyte to ten petabytes per second, a
#: kilobyte to a petabyte), so that every accepted profile prices to finite, positive times.
FlopRate = bounded(1e6, 1e18)


ByteRate = bounded(1e6, 1e16)


Bytes = bounded(1e3, 1e15)


Hertz = bounded(1e6, 1e11)


#: A cost per call or a latency: at least zero and below a second.
Seconds = bounded(0.0, 1.0, high_open=True)


#: A fraction of a peak.
Fraction = bounded(0.0, 1.0, low_open=True)


#: A count of units (SMs, cores, tile rows).
Count = Annotated[int, Field(strict=True, ge=1, le=1 << 20)]


class Sourced(Strict):
    """A positive number with the key of its source and a confidence label; the subclasses say its range."""

    value: float = Field(gt=0, allow_inf_nan=False, strict=True)
    source: str
    confidence: Confidence


class SourcedFlops(Sourced):
    value: FlopRate


class SourcedBandwidth(Sourced):
    value: ByteRate


class SourcedBytes(Sourced):
    value: Bytes


class SourcedClock(Sourced):
    value: Hertz


class SourcedCount(Sourced):
    value: Count


class SourcedCost(Sourced):
    """A sourced time in seconds, which may be zero (a device or timing with no per-call overhead)."""

    value: Seconds

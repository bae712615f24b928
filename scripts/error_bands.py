"""The error band of every prediction, from the published kernel tables: per route (fitted on the device,
transferred across a GPU generation, datasheet roofline) and kernel class, the range of measured / predicted
(costmodel.validation.bands) at the route's calibrated percentiles (the narrowest whose bands, derived without a
GPU, hold 80% of its rows; across generations 1 / x to x, x a percentile of the error either way), and how well
bands whose percentiles and ends were both derived without one GPU cover that GPU's rows (beside p10-p90 bands').

    python scripts/error_bands.py [MEASUREMENTS_DIR] [--write]

MEASUREMENTS_DIR defaults to ../shared/measurements (the aiconfigurator, Vidur and LLMCompass tables of the A100,
H100 and B200; host-timed eager rows are left out). --write writes costmodel/error_bands.yaml, the bands
predictions carry. Deterministic: the same tables give the same file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from costmodel.hardware.catalog import load_profile
from costmodel.price.bands import percentile_span
from costmodel.validation.bands import (
    GPUS,
    SYMMETRIC_GRID,
    TAIL_GRID,
    TARGET,
    kernel_held_out,
    kernel_nested,
    kernel_tails,
    pooled,
    quantiles,
    ratios,
    rounded,
)
from costmodel.validation.published import read_folder

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "costmodel" / "error_bands.yaml"
ROUTES = ("fitted", "across", "datasheet")
COMMITS = {"aiconfigurator": "ai-dynamo/aiconfigurator@095f58a", "vidur": "microsoft/vidur@7d47513"}


def calibrated(found) -> dict:
    """Per route, the (below, above) tails its bands leave out, or the error either way (costmodel.validation.bands.
    kernel_tails)."""
    return {route: kernel_tails(found, route) for route in ROUTES}


def bands(found, tails: dict) -> dict:
    """Per route: each class's band over every GPU at the route's tails, and ``all`` (every class pooled)."""
    out = {}
    for route in ROUTES:
        classes = sorted({r.cls for r in found if r.route == route})
        out[route] = {cls: quantiles(pooled(found, route, cls), tails[route]) for cls in classes}
        out[route]["all"] = quantiles(pooled(found, route), tails[route])
    return out


def held_out(found, nested: bool = True) -> dict:
    """Per route and GPU left out: the share of its rows inside the bands derived without it, their tails also
    chosen without it (``nested``), else p10-p90 bands."""
    return {route: kernel_nested(found, route) if nested else kernel_held_out(found, route) for route in ROUTES}


def leave_one_out(found) -> list[str]:
    """Each GPU's rows priced as if it had no fit: from the GPU the tool's own rule picks among the others, per
    class (costmodel.price.origin.reference_for: an attention class from a GPU whose attention kernel is of the same
    kind where one is; then same generation first, else the nearest older, else the nearest newer), beside the
    GPU's own fit."""
    from costmodel.hardware.catalog import fitted_profiles
    from costmodel.price.origin import reference_for

    unmeasured = [p.id for p in fitted_profiles() if p.id not in GPUS]  # fitted on tables not read here
    lines = []
    for gpu in GPUS:
        hw = load_profile(gpu)
        for r in (r for r in found if r.route == "across" and r.device == gpu):
            ref = reference_for(hw, exclude=[gpu, *unmeasured], cls=r.cls)
            if ref is None or r.source != ref.id:
                continue
            err = np.abs(1 / r.values - 1) * 100
            own = next(
                (
                    np.abs(1 / f.values - 1) * 100
                    for f in found
                    if f.route == "fitted" and f.device == gpu and f.cls == r.cls and f.values.size == r.values.size
                ),
                None,
            )
            mine = f"; its own fit {np.median(own):4.1f}% ({np.percentile(own, 90):4.1f}%)" if own is not None else ""
            lines.append(
                f"{gpu:14s} from {ref.id:14s} {r.cls:18s} median {np.median(err):5.1f}%  p90 "
                f"{np.percentile(err, 90):5.1f}%  n {r.values.size:6d}{mine}"
            )
    return lines


def _coverage(cover: dict) -> dict:
    return {
        route: {g: (round(v, 3) if v is not None else None) for g, v in per.items()} for route, per in cover.items()
    }


def to_yaml(b: dict, tails: dict, cover: dict, plain: dict, data: list[str]) -> str:
    import yaml

    doc = {
        "data": data,
        "method": (
            "measured / predicted of every row per route and kernel class over the GPUs' rows (each GPU's set "
            "of a class resampled to equal size, so a GPU with more rows does not outweigh another), each band "
            f"leaving its route's `tails` percent out (below, above): of {list(TAIL_GRID)}, the pair that "
            f"leaves the most out while bands derived without a GPU hold at least {TARGET:.0%} of its rows "
            "(each GPU weighing equally); across, whose bias turns its sign with the direction of the "
            "transfer, 1 / x to x leaving `tails` percent of the error either way (|log ratio|) out: of "
            f"{list(SYMMETRIC_GRID)}, the most that so holds {TARGET:.0%}; fitted: the device's own fit, "
            "on the rows it was fitted on; across: each GPU priced from the fit of each GPU of another "
            "generation by the transfer rule "
            "(costmodel.price.origin.TRANSFER_RULE); datasheet: the datasheet roofline and the profile's launch "
            "cost per kernel; all: every class of the route pooled, for classes no table measures; "
            "scripts/error_bands.py"
        ),
        "tails": {route: list(t) for route, t in tails.items()},
        "held_out_coverage": _coverage(cover),
        "held_out_coverage_p10_p90": _coverage(plain),
        "bands": {route: {cls: rounded(q) for cls, q in per.items()} for route, per in b.items()},
    }
    return (
        "# Measured, not assumed: how far predictions of each route and kernel class fall from published\n"
        "# timings (measured / predicted). `held_out_coverage`: the share of a GPU's rows inside the bands whose\n"
        "# tails were chosen and whose ends were derived without that GPU (calibrated: 80%);\n"
        "# `held_out_coverage_p10_p90`: the same for p10-p90 bands.\n" + yaml.safe_dump(doc, sort_keys=False, width=110)
    )


def main(argv):
    folder = next((a for a in argv if not a.startswith("--")), str(ROOT.parent / "shared" / "measurements"))
    tables, _ = read_folder(folder, engines=("vllm",))  # the kernels these fits are of
    tables = [t for t in tables if t.timing != "eager" and t.profile in GPUS]
    found = ratios(tables, {p: load_profile(p) for p in GPUS if any(t.profile == p for t in tables)})
    tails = calibrated(found)
    b, cover, plain = bands(found, tails), held_out(found), held_out(found, nested=False)
    print(
        "measured / predicted, low / median / high (n), per route and kernel class, each route's band the "
        f"narrowest whose bands derived without a GPU hold {TARGET:.0%} of its rows:"
    )
    for route, per in b.items():
        print(f"  {route}: {percentile_span(tails[route])}")
        for cls, q in per.items():
            print(f"  {route:10s} {cls:18s} {q['low']:5.2f} {q['p50']:5.2f} {q['high']:5.2f}  (n {q['n']})")
    print(
        "\nheld out: share of a GPU's rows inside the bands whose tails and ends were derived from the other GPUs "
        "(nested; calibrated: 80%), and inside p10-p90 bands:"
    )
    for route, per in cover.items():
        cells = "  ".join(
            f"{g} {v:6.1%} ({plain[route][g]:6.1%})" if v is not None else f"{g}   none" for g, v in per.items()
        )
        print(f"  {route:10s} {cells}")
    print(
        "\nleave one GPU out: each GPU priced from the GPU the tool's rule picks among the other two "
        "(median and p90 |error|; targets 15% and 40%):"
    )
    for line in leave_one_out(found):
        print("  " + line)
    print("\nper GPU and source, median |error| of each route (the bands' spread, for reference):")
    for r in found:
        e = np.median(np.abs(1 / r.values - 1)) * 100
        print(
            f"  {r.route:10s} {r.cls:18s} {r.device:14s} from {str(r.source):14s} median |error| {e:5.1f}%  "
            f"n {r.values.size}"
        )
    if "--write" in argv:
        data = sorted({f"{t.source} ({COMMITS.get(t.source, '')}) {t.gpu} {t.file} [{t.timing}]" for t in tables})
        OUT.write_text(to_yaml(b, tails, cover, plain, data), encoding="utf-8")
        print(f"\nwrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])

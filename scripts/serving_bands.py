"""The error band of a served prediction, from measured deployments: the range of measured / predicted TTFT and
TPOT per engine, model kind (dense or mixture of experts) and mode (aggregated or disaggregated), at the narrowest
percentiles below and above (of TAIL_GRID) whose ranges, each derived without a model, hold 80% of that model's
rows (costmodel.validation.bands.calibrated_tails); and how well
ranges calibrated and derived without a model cover its rows (nested: the model saw neither the choice of
percentiles nor the ranges), beside the p10-p90 ranges' coverage.

    python scripts/serving_bands.py ../shared/measurements/serving/silicon_sample_h100_sxm.csv [--write]

The rows are predicted as `costmodel validate --serving FILE` predicts them (about 40 s), or read from its
--json output (a path ending in .json). --write writes costmodel/served_bands.yaml, the ranges served
predictions carry. A key with fewer than 20 rows takes the next wider one (costmodel.price.bands.served_keys: the engine's
deployments of any model, then every engine's of the model's kind, then the mode).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from costmodel.price.bands import percentile_span
from costmodel.validation.bands import (
    MIN_ROWS,
    TAIL_GRID,
    TARGET,
    calibrated_tails,
    rounded,
    served,
    served_held_out,
    served_nested,
    served_sets,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "costmodel" / "served_bands.yaml"


def _coverage(held: dict) -> dict:
    return {g: {"n": v["n"], "ttft": round(v["ttft"], 3), "tpot": round(v["tpot"], 3)} for g, v in held.items()}


def to_yaml(sets: dict, tails: dict, nested: dict, plain: dict, source: str) -> str:
    import yaml

    doc = {
        "data": source,
        "method": (
            f"measured / predicted TTFT and TPOT of every deployment `costmodel validate --serving` predicts, "
            f"per engine, model kind and mode ('all': any), keys of at least {MIN_ROWS} rows (a prediction "
            "takes its engine's deployments of any model before every engine's of its kind); each range leaves "
            f"`tails` percent out (below, above), of {list(TAIL_GRID)} the pair that leaves the most out (then "
            f"gives the narrowest range over every row) while ranges derived without a model hold at least "
            f"{TARGET:.0%} of that model's rows; the engines' fixed costs were fitted on "
            "the dense aggregated rows (scripts/fit_serving.py); scripts/serving_bands.py"
        ),
        "tails": {m: list(t) for m, t in tails.items()},
        "held_out_coverage": _coverage(nested),
        "held_out_coverage_p10_p90": _coverage(plain),
        "bands": [
            {"engine": k[0], "kind": k[1], "mode": k[2], "ttft": rounded(v["ttft"]), "tpot": rounded(v["tpot"])}
            for k, v in sorted(sets.items())
        ],
    }
    return (
        "# Measured, not assumed: how far served predictions fall from measured deployments (measured /\n"
        "# predicted). `held_out_coverage`: the share of a model's rows inside the ranges whose tails were chosen\n"
        "# and whose ends were derived without that model (calibrated: 80%); `held_out_coverage_p10_p90`: the\n"
        "# same for p10-p90 ranges.\n" + yaml.safe_dump(doc, sort_keys=False, width=110)
    )


def main(argv):
    path = next(a for a in argv if not a.startswith("--"))
    if path.endswith(".json"):
        rows = json.loads(Path(path).read_text(encoding="utf-8"))["rows"]
    else:
        from costmodel.validation.serving import validate_serving

        rows = validate_serving(path)["rows"]
    found = served(rows)
    tails = calibrated_tails(found)
    sets, nested, plain = served_sets(found, tails=tails), served_nested(found), served_held_out(found)
    label = {m: percentile_span(t) for m, t in tails.items()}
    print(
        f"measured / predicted, TTFT {label['ttft']} and TPOT {label['tpot']} (the narrowest whose ranges "
        f"derived without a model hold {TARGET:.0%} of its rows), low / median / high (n):"
    )
    for (engine, kind, mode), v in sorted(sets.items()):
        t, p = v["ttft"], v["tpot"]
        print(
            f"  {engine:7s} {kind:6s} {mode:7s} TTFT {t['low']:5.2f} {t['p50']:5.2f} {t['high']:5.2f}   "
            f"TPOT {p['low']:5.2f} {p['p50']:5.2f} {p['high']:5.2f}   (n {t['n']})"
        )
    print(
        "\nheld out: share of a model's rows inside the ranges derived without that model, the tails also chosen "
        "without it (nested); beside it, p10-p90 ranges:"
    )
    for group, v in sorted(nested.items()):
        q = plain[group]
        print(
            f"  {group:7s} n {v['n']:4d}  TTFT {v['ttft']:6.1%}  TPOT {v['tpot']:6.1%}   p10-p90: TTFT "
            f"{q['ttft']:6.1%}  TPOT {q['tpot']:6.1%}"
        )
    if "--write" in argv:
        source = Path(path).name
        OUT.write_text(
            to_yaml(sets, tails, nested, plain, f"{source}: {len(rows)} deployments predicted"), encoding="utf-8"
        )
        print(f"\nwrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])

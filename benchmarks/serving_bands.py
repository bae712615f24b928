"""The error band of a served prediction, from measured deployments: the p10, median and p90 of measured /
predicted TTFT and TPOT per engine, model kind (dense or mixture of experts) and mode (aggregated or
disaggregated), and how well the range derived without a model covers that model's rows.

    python benchmarks/serving_bands.py ../shared/measurements/serving/silicon_sample_h100_sxm.csv [--write]

The rows are predicted as `costmodel validate --serving FILE` predicts them (about 40 s), or read from its
--json output (a path ending in .json). --write writes costmodel/served_bands.yaml, the ranges served
predictions carry. A key with fewer than 20 rows takes the next wider one (the engine's kind, then the mode).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from costmodel.validation.bands import HIGH, LOW, MIN_ROWS, rounded, served, served_held_out, served_sets

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "costmodel" / "served_bands.yaml"


def to_yaml(sets: dict, held: dict, source: str) -> str:
    import yaml

    doc = {
        "data": source,
        "method": (f"measured / predicted TTFT and TPOT of every deployment `costmodel validate --serving` predicts, "
                   f"p{LOW}, median and p{HIGH} per engine, model kind and mode ('all': any), keys of at least "
                   f"{MIN_ROWS} rows; the engines' fixed costs were fitted on the dense aggregated rows "
                   "(benchmarks/fit_serving.py); benchmarks/serving_bands.py"),
        "held_out_coverage": {g: {"n": v["n"], "ttft": round(v["ttft"], 3), "tpot": round(v["tpot"], 3)}
                              for g, v in held.items()},
        "bands": [{"engine": k[0], "kind": k[1], "mode": k[2], "ttft": rounded(v["ttft"]), "tpot": rounded(v["tpot"])}
                  for k, v in sorted(sets.items())],
    }
    return ("# Measured, not assumed: how far served predictions fall from measured deployments (measured /\n"
            "# predicted). `held_out_coverage`: the share of a model's rows inside the range derived without\n"
            "# that model's rows (a calibrated p10-p90 range holds 80%).\n"
            + yaml.safe_dump(doc, sort_keys=False, width=110))


def main(argv):
    path = next(a for a in argv if not a.startswith("--"))
    if path.endswith(".json"):
        rows = json.loads(Path(path).read_text(encoding="utf-8"))["rows"]
    else:
        from costmodel.validation.serving import validate_serving

        rows = validate_serving(path)["rows"]
    found = served(rows)
    sets, held = served_sets(found), served_held_out(found)
    print(f"measured / predicted, p{LOW} / median / p{HIGH} (n):")
    for (engine, kind, mode), v in sorted(sets.items()):
        t, p = v["ttft"], v["tpot"]
        print(f"  {engine:7s} {kind:6s} {mode:7s} TTFT {t['p10']:5.2f} {t['p50']:5.2f} {t['p90']:5.2f}   "
              f"TPOT {p['p10']:5.2f} {p['p50']:5.2f} {p['p90']:5.2f}   (n {t['n']})")
    print("\nheld out: share of a model's rows inside the range derived without that model (calibrated: 80%):")
    for group, v in sorted(held.items()):
        print(f"  {group:7s} n {v['n']:4d}  TTFT {v['ttft']:6.1%}  TPOT {v['tpot']:6.1%}")
    if "--write" in argv:
        source = Path(path).name
        OUT.write_text(to_yaml(sets, held, f"{source}: {len(rows)} deployments predicted"), encoding="utf-8")
        print(f"\nwrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])

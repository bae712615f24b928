"""The shipped error ranges (costmodel/error_bands.yaml, costmodel/served_bands.yaml) are re-derived from the
published data beside the checkout with today's model: a change to the mechanisms, a refit or a serving change
that moved them without the benchmarks being re-run fails here."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

SHARED = Path(__file__).resolve().parents[2] / "shared" / "measurements"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))


def _shipped(name: str) -> dict:
    return yaml.safe_load(resources.files("costmodel").joinpath(name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def kernel_ratios():
    if not SHARED.is_dir():
        pytest.skip(f"the published tables are not beside this checkout ({SHARED})")
    from costmodel.hardware.catalog import load_profile
    from costmodel.validation.bands import GPUS, ratios
    from costmodel.validation.published import read_folder

    tables = [t for t in read_folder(SHARED, engines=("vllm",))[0] if t.timing != "eager" and t.profile in GPUS]
    return ratios(tables, {p: load_profile(p) for p in GPUS})


def test_kernel_ranges_are_rederived(kernel_ratios):
    import error_bands

    shipped = _shipped("error_bands.yaml")
    tails = error_bands.calibrated(kernel_ratios)
    got = yaml.safe_load(
        error_bands.to_yaml(
            error_bands.bands(kernel_ratios, tails),
            tails,
            error_bands.held_out(kernel_ratios),
            error_bands.held_out(kernel_ratios, nested=False),
            shipped["data"],
        )
    )
    for key in ("tails", "bands", "held_out_coverage", "held_out_coverage_p10_p90"):
        assert got[key] == shipped[key], key


def test_one_engines_served_range_is_rederived():
    """SGLang's 84 dense rows (predicting all 813 rows takes the benchmark 40 s)."""
    path = SHARED / "serving" / "silicon_sample_h100_sxm.csv"
    if not path.is_file():
        pytest.skip(f"the measured deployments are not beside this checkout ({path})")
    from costmodel.validation.bands import quantiles, served
    from costmodel.validation.deployments import read
    from costmodel.validation.serving import predict

    deployments, _ = read(path)
    rows = []
    for d in (d for d in deployments if d.backend == "sglang" and d.mode == "agg"):
        p = predict(d)
        rows.append(
            {
                "backend": d.backend,
                "model_path": d.model_path,
                "mode": d.mode,
                "measured_ttft_s": d.ttft_s,
                "predicted_ttft_s": p.ttft_s,
                "measured_tpot_s": d.tpot_s,
                "predicted_tpot_s": p.tpot_s,
            }
        )
    found = [s for s in served(rows) if s.kind == "dense"]
    shipped = next(
        b
        for b in _shipped("served_bands.yaml")["bands"]
        if (b["engine"], b["kind"], b["mode"]) == ("sglang", "dense", "agg")
    )
    tails = _shipped("served_bands.yaml")["tails"]
    for metric in ("ttft", "tpot"):
        q = quantiles([getattr(s, metric) for s in found], tails[metric])
        assert q["n"] == shipped[metric]["n"]
        for k in ("low", "p50", "high"):
            assert round(q[k], 3) == shipped[metric][k]

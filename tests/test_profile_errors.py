"""The fit errors a fitted profile states (``efficiency.error``: n, median and p90 |error| per class and timing)
are re-derived from the published tables they were fitted on, with the profile's own parameters: a refit that
forgot to rewrite them, or a change to the mechanisms that moved them, fails here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import costmodel
from costmodel.hardware.catalog import load_all
from costmodel.validation.fit import errors, predict_table

SHARED = Path(__file__).resolve().parents[2] / "shared" / "measurements"
FITTED = [p for p in load_all() if p.efficiency is not None and p.efficiency.error and p.kind == "gpu"]
CASES = [(p.id, key) for p in FITTED for key in p.efficiency.error]


@pytest.fixture(scope="module")
def tables():
    if not SHARED.is_dir():
        pytest.skip(f"the published tables are not beside this checkout ({SHARED})")
    from costmodel.validation.published import read_folder

    return read_folder(SHARED, engines=("vllm",))[0]  # the kernels the profiles were fitted on


def test_every_fitted_gpu_states_its_errors():
    assert {p.id for p in FITTED} >= {"a100_80gb_sxm", "h100_sxm"} and len(CASES) >= 15


@pytest.mark.parametrize("pid,key", CASES, ids=[f"{p}:{k}" for p, k in CASES])
def test_stated_fit_error_is_rederived(tables, pid, key):
    hw = costmodel.load_profile(pid)
    cls, timing = key.split("/")
    stated = hw.efficiency.error[key]
    if cls.startswith("moe"):  # fitted on whole measured MoE layers (costmodel.validation.moe_layers)
        from costmodel.validation.moe_layers import TABLES, moe_class, read_tables
        from costmodel.validation.moe_layers import errors as moe_errors

        layers = [t for t in read_tables(SHARED / TABLES[pid], distributions=("balanced",)) if moe_class(t) == cls]
        got = moe_errors(layers, hw)
        assert (got["n"], got["median_abs_error_pct"], got["p90_abs_error_pct"]) == pytest.approx(
            (stated.n, stated.median_abs_error_pct, stated.p90_abs_error_pct), abs=0.011
        )
        return
    chosen = [t for t in tables if t.profile == pid and t.priced_class == cls and t.timing == timing]
    assert chosen, (pid, key)
    eff = hw.efficiency.classes[cls]
    predicted = np.concatenate([predict_table(t, hw, eff) for t in chosen])
    got = errors(predicted, np.concatenate([t.measured_s for t in chosen]))
    assert got["n"] == stated.n
    assert got["median_abs_error_pct"] == pytest.approx(stated.median_abs_error_pct, abs=0.011)
    assert got["p90_abs_error_pct"] == pytest.approx(stated.p90_abs_error_pct, abs=0.011)


def _at_bound(eff) -> list[str]:
    """The fitted continuous values of a class that sit at a bound of the fit's search."""
    from costmodel.validation.fit import BOUNDS

    out = []
    for name in eff.fitted:
        if name not in BOUNDS:
            continue  # a discrete choice (split_kv, pack_gqa, overlap)
        lo, hi, _ = BOUNDS[name]
        values = list(eff.fixed_s.values()) if name == "fixed" else [getattr(eff, name)]

        def pinned(v):
            at_low = v <= 1e-15 if lo == 0 else abs(v / lo - 1) <= 1e-6
            return at_low or abs(v / hi - 1) <= 1e-6

        if any(v is not None and pinned(v) for v in values):
            out.append(name)
    return out


@pytest.mark.parametrize("pid", [p.id for p in FITTED])
def test_every_fitted_value_at_a_bound_is_explained(pid):
    """A parameter pinned at a bound of its search is doing another's job or none: each is removed, or its
    profile says why it sits there."""
    hw = costmodel.load_profile(pid)
    unexplained = {
        cls: [n for n in _at_bound(eff) if not eff.at_bound.get(n, "").strip()]
        for cls, eff in hw.efficiency.classes.items()
    }
    assert {cls: names for cls, names in unexplained.items() if names} == {}


def test_the_bound_check_finds_a_pinned_value():
    from costmodel.hardware.profile import ClassEfficiency

    pinned = ClassEfficiency(bandwidth_exponent=1.0, fitted=("bandwidth_exponent",))
    assert _at_bound(pinned) == ["bandwidth_exponent"]
    assert _at_bound(pinned.model_copy(update={"bandwidth_exponent": 0.7})) == []

"""Every number of a hardware profile is checked by what it means: a mutation table of every kind of numeric field of
a fitted profile (each field of its collective curves once, since every curve holds the same fields under the same
schema) x (negative, zero, NaN, inf, 1e308, 1e-300, a boolean, a string). A refused value is one error
that names the field's path; an accepted one prices an attention step and a whole model to finite, positive
times."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

import costmodel
from costmodel import CostModelError
from costmodel.core.files import load_yaml
from costmodel.hardware.catalog import _parse, _validated

SHIPPED = "a100_80gb_sxm"
BASE = json.loads(costmodel.load_profile(SHIPPED).model_dump_json(exclude_none=True))
MUTATIONS = {
    "negative": -1.0,
    "zero": 0.0,
    "NaN": math.nan,
    "inf": math.inf,
    "1e308": 1e308,
    "1e-300": 1e-300,
    "bool": True,
    "string": "12",
}


def numeric_fields(data, path=()):
    """The path of every number in a profile (booleans are flags, not numbers)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from numeric_fields(value, (*path, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from numeric_fields(value, (*path, i))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        yield path


def kind(path) -> tuple:
    """A field's kind: its path with the collective and GPU count of a fitted collective curve (or its error) left
    out, for every curve holds the same fields and is checked by the same schema."""
    if path[:1] == ("collectives",) and len(path) > 2 and path[1] in ("curves", "ops"):
        return (*path[:2], "*", "*", *path[4:])
    if path[:2] == ("collectives", "error"):
        return (*path[:2], "*", *path[3:])
    return path


ALL_FIELDS = list(numeric_fields(BASE))
#: One field of each kind: every number outside the collective curves, and each field of a curve once.
FIELDS = list({kind(p): p for p in reversed(ALL_FIELDS)}.values())[::-1]


def _dump(data) -> str:
    """``yaml.safe_dump``'s text, by libyaml where PyYAML has it (the same text, several times faster)."""
    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))


def _mutated(path, value):
    data = json.loads(json.dumps(BASE))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def test_the_table_reaches_every_kind_of_number():
    joined = {".".join(map(str, p)) for p in FIELDS}
    for field in (
        "peak_flops_per_s.bf16.value",
        "memory_bandwidth_bytes_per_s.value",
        "memory_capacity_bytes.value",
        "architecture.compute_units.value",
        "architecture.clock_hz.value",
        "launch_overhead_s.value",
        "efficiency.classes.gemm.fixed_s.graph",
        "efficiency.classes.gemm.compute_efficiency",
        "efficiency.classes.decode_attention.unsplit_sm_bandwidth",
        "matrix_tile.shape.0",
        "efficiency.error.gemm/graph.n",
    ):
        assert field in joined
    kinds = {".".join(map(str, kind(p))) for p in FIELDS}
    for field in (
        "collectives.curves.*.*.latency_s",
        "collectives.curves.*.*.large_bus_bytes_per_s",
        "collectives.ops.*.*.large_latency_s",
        "collectives.error.*.median_abs_error_pct",
    ):
        assert field in kinds  # each field of a collective curve, once
    assert len(FIELDS) > 60


def _times_are_finite_and_positive(hw) -> None:
    for w in costmodel.workloads(batch=4, context=256, execution="fused") + [
        costmodel.Workload.create("gqa", "batched", batch=2, seq=512, execution="fused")
    ]:
        p = costmodel.predict(w, hw)
        times = [p.total.time_s, *(o.time_s for o in p.ops)]
        assert all(math.isfinite(t) and t > 0 for t in times), times
    m = costmodel.predict_model(costmodel.load_model("llama-3-8b"), hw, batch=2, context=128)
    assert all(math.isfinite(t) and t > 0 for t in (m.total.tpot_s, m.total.ttft_s))


#: Never a profile's number, whatever the field: NaN, infinity, 1e308, a boolean, a string and a negative number.
WORST = ("NaN", "inf", "1e308", "bool", "string", "negative")


@pytest.mark.parametrize("path", FIELDS, ids=[".".join(map(str, p)) for p in FIELDS])
def test_a_mutated_number_is_refused_by_name_or_prices_finitely(path):
    """Each mutation of the field (:data:`MUTATIONS`) is refused by one error that names it, or prices finitely;
    the :data:`WORST` values are refused. The fields are checked as a YAML file's text reads back (each mutation
    reads back as itself: :func:`test_a_mutation_reads_back_from_yaml_as_itself`)."""
    where = ".".join(map(str, path))
    for label, value in MUTATIONS.items():
        try:
            hw = _validated(_mutated(path, value), "mutated.yaml")
        except CostModelError as err:
            assert f"field {where}" in str(err) or f"field {where.rsplit('.', 1)[0]}" in str(err), (label, str(err))
            continue
        assert label not in WORST, f"{where} = {label} is accepted"
        _times_are_finite_and_positive(hw)


def test_a_mutation_reads_back_from_yaml_as_itself():
    """A profile's text with any of :data:`MUTATIONS` in a field is read as the mutated fields themselves, so
    the table checks the fields without writing and reading every case."""
    path = ("memory_bandwidth_bytes_per_s", "value")
    for label, value in MUTATIONS.items():
        read = load_yaml(_dump(_mutated(path, value)), "mutated.yaml")["memory_bandwidth_bytes_per_s"]["value"]
        assert type(read) is type(value) and (read == value or (math.isnan(read) and math.isnan(value))), label
    assert load_yaml(_dump(BASE), "base.yaml") == BASE


def test_a_duplicate_key_is_refused():
    text = _dump(BASE).replace("id: a100_80gb_sxm\n", "id: a100_80gb_sxm\nid: other\n")
    with pytest.raises(CostModelError, match="key 'id' is given twice"):
        _parse(text, "twice.yaml")


def test_exponents_without_a_point_are_numbers():
    """YAML 1.1 reads 1e12 as text; a profile means a number (as YAML 1.2 and JSON do)."""
    text = _dump(BASE)
    assert "value: 4.0e-06" in text
    assert _parse(text.replace("value: 4.0e-06", "value: 4e-06"), "e.yaml").launch_overhead == 4e-06


@pytest.mark.parametrize("edge", ["low", "high"])
def test_figures_survive_the_edges_of_every_accepted_range(tmp_path, edge):
    """A profile at the ends of the accepted ranges still prices and draws its roofline."""
    from costmodel.attention.figures import roofline_points
    from costmodel.hardware.units import ByteRate, Bytes, FlopRate
    from costmodel.render.plots import draw_roofline, save

    def bound(kind, i):
        meta = kind.__metadata__[0].metadata
        return [getattr(m, a) for m in meta for a in ("ge", "le") if getattr(m, a, None) is not None][i]

    i = 0 if edge == "low" else 1
    data = json.loads(json.dumps(BASE))
    data.pop("efficiency")  # the datasheet roofline: the rates alone set the times
    for dtype in data["peak_flops_per_s"]:
        data["peak_flops_per_s"][dtype]["value"] = bound(FlopRate, i)
    data["memory_bandwidth_bytes_per_s"]["value"] = bound(ByteRate, i)
    data["memory_capacity_bytes"]["value"] = bound(Bytes, i)
    hw = _parse(_dump(data), f"{edge}.yaml")
    _times_are_finite_and_positive(hw)
    workloads = costmodel.workloads(batch=4, context=256)
    save(draw_roofline([hw], workloads, edge, roofline_points(hw, workloads)), str(tmp_path / "r.png"))
    assert (tmp_path / "r.png").stat().st_size > 0
    assert np.isfinite(hw.ridge_point("bf16"))

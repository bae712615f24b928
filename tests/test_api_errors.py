"""Every public function answers a bad argument with CostModelError naming the argument: a table of each
function's arguments x None, a wrong type, a negative number, NaN, infinity and a huge number."""

from __future__ import annotations

import dataclasses
import math

import pytest

import costmodel
from costmodel import CostModelError

H100 = costmodel.load_profile("h100")
LLAMA = costmodel.load_model("llama-3-8b")
W = costmodel.Workload.create("gqa", batch=2, context=64)
REPORT = costmodel.derive("gqa", "incremental")

#: function -> (valid keyword arguments, the arguments for which None is a valid value)
CALLS = {
    "derive": (
        costmodel.derive,
        dict(
            variant="gqa",
            mode="incremental",
            groups=8,
            dtype="bf16",
            dims={"b": 1},
            cache_append="inplace",
            execution="unfused",
            simplify=True,
            form="absorbed",
            q_lora=False,
        ),
        {"groups", "dims"},
    ),
    "analyze": (costmodel.analyze, dict(report=REPORT), set()),
    "Workload.create": (
        costmodel.Workload.create,
        dict(
            variant="gqa",
            mode="incremental",
            batch=2,
            seq=1,
            context=64,
            d_model=256,
            heads=4,
            groups=2,
            head_dim=64,
            value_dim=64,
            dtype="bf16",
            layers=1,
            execution="fused",
            cache_append="inplace",
        ),
        {"seq", "context", "groups", "head_dim", "value_dim"},
    ),
    "Workload": (costmodel.Workload, W.model_dump(), set()),
    "workloads": (
        costmodel.workloads,
        dict(variant="gqa", groups=2, mode="incremental", batch=2, heads=4),
        {"variant", "groups"},
    ),
    "predict": (costmodel.predict, dict(workload=W, hw=H100, overlap="max", timing="graph", without=()), set()),
    "compare": (costmodel.compare, dict(workloads=[W], hw=H100, overlap="max", timing="graph", without=()), set()),
    "sweep": (
        costmodel.sweep,
        dict(
            workloads=[W],
            hw=H100,
            parameter="context",
            values=[64, 128],
            overlap="max",
            max_points=10,
            timing="graph",
            without=(),
        ),
        set(),
    ),
    "load_profile": (costmodel.load_profile, dict(name="h100"), set()),
    "profile_for_device": (costmodel.profile_for_device, dict(name="NVIDIA H100 80GB HBM3"), set()),
    "load_model": (costmodel.load_model, dict(name="llama-3-8b"), set()),
    "predict_model": (
        costmodel.predict_model,
        dict(
            m=LLAMA,
            hw=H100,
            batch=2,
            context=64,
            source=None,
            dtype="bf16",
            execution="fused",
            tp=1,
            overlap="max",
            timing="graph",
            without=(),
            engine=True,
            weight_dtype=None,
            kv_dtype=None,
            mla_form=None,
        ),
        {"source", "weight_dtype", "kv_dtype", "mla_form"},
    ),
    "build_program": (
        costmodel.build_program,
        dict(variant="gqa", mode="incremental", groups=2, cache_append="inplace", execution="unfused"),
        {"groups"},
    ),
    "build_mla_program": (
        costmodel.build_mla_program,
        dict(mode="incremental", form="absorbed", q_lora=False, execution="unfused"),
        set(),
    ),
    "request": (
        costmodel.request,
        dict(m=LLAMA, hw=H100, batch=1, input_len=16, output_len=4, dtype="bf16", tp=1),
        set(),
    ),
    "largest_batch": (
        costmodel.largest_batch,
        dict(m=LLAMA, hw=H100, input_len=16, output_len=4, tpot_s=0.05, ttft_s=1.0, price_per_hour=2.0, max_batch=64),
        {"tpot_s", "ttft_s", "price_per_hour"},
    ),
    "serve": (
        costmodel.serve,
        dict(
            m=LLAMA,
            hw=H100,
            load=costmodel.Load(16, 4, concurrency=2, num_requests=4, burstiness=1.0),
            layout=costmodel.Layout(tp=1),
            engine_name="vllm",
        ),
        {"load.num_requests"},
    ),
    "serve_disaggregated": (
        costmodel.serve_disaggregated,
        dict(
            m=LLAMA,
            hw=H100,
            load=costmodel.Load(16, 4, concurrency=2, num_requests=4),
            prefill=costmodel.Pool(),
            decode=costmodel.Pool(tp=2),
            engine_name="sglang",
            weight_dtype=None,
            kv_dtype=None,
            kv_link_bytes_per_s=None,
            evaluator="simulation",
        ),
        {"load.num_requests", "weight_dtype", "kv_dtype", "kv_link_bytes_per_s"},
    ),
    "plan": (
        costmodel.plan,
        dict(
            m=LLAMA,
            hws=[H100],
            devices=2,
            input_len=16,
            output_len=4,
            engine_name="vllm",
            weight_dtype=None,
            kv_dtype=None,
            ttft_s=None,
            tpot_s=0.05,
            max_concurrency=2,
        ),
        {"weight_dtype", "kv_dtype", "ttft_s", "tpot_s"},
    ),
    "capacity": (
        costmodel.capacity,
        dict(
            m=LLAMA,
            devices=[H100],
            input_len=16,
            output_len=4,
            tpot_s=0.05,
            ttft_s=None,
            price_per_hour=None,
            variants=False,
        ),
        {"tpot_s", "ttft_s", "price_per_hour"},
    ),
    "load_capacity": (
        costmodel.load_capacity,
        dict(
            m=LLAMA,
            devices=[H100],
            requests=costmodel.Load(16, 4),
            engine_name="vllm",
            tpot_s=0.05,
            ttft_s=None,
            statistic="mean",
            price_per_hour=None,
            variants=False,
            load="request-rate",
        ),
        {"ttft_s", "price_per_hour"},
    ),
}
#: Where a message names an argument in other words than its Python name.
SAID = {
    "dims": "dimension",
    "m": "model",
    "name": "name",
    "cache_append": "cache append",
    "form": "form",
    "weight_dtype": "weight dtype",
    "kv_dtype": "kv dtype",
    "mla_form": "mla form",
    "hw": "hw",
    "workload": "workload",
    "mode": "mode",
    "engine_name": "engine",
    "kv_link_bytes_per_s": "KV link bandwidth",
    "hws": "hws",
    "devices": "devices",
}
BAD = {"None": None, "wrong type": object(), "negative": -1, "NaN": math.nan, "inf": math.inf, "huge": 2**80}


#: The typed objects' fields each call is tried with, as "argument.field" (Load, Layout: checked where used).
NESTED = {
    "serve": {"load": ("input_len", "output_len", "concurrency", "num_requests", "burstiness"), "layout": ("tp",)},
    "serve_disaggregated": {"load": ("input_len", "output_len", "concurrency", "num_requests")},
    "load_capacity": {"requests": ("input_len", "output_len")},
}


def _args(fname: str, kwargs: dict):
    yield from kwargs
    for arg, names in NESTED.get(fname, {}).items():
        yield from (f"{arg}.{name}" for name in names)


def _with(kwargs: dict, arg: str, value) -> dict:
    """``kwargs`` with ``arg`` (or a typed object's field, "argument.field") set to ``value``."""
    if "." not in arg:
        return {**kwargs, arg: value}
    outer, name = arg.split(".")
    return {**kwargs, outer: dataclasses.replace(kwargs[outer], **{name: value})}


def _cases():
    for fname, (_, kwargs, optional) in CALLS.items():
        for arg in _args(fname, kwargs):
            for label, value in BAD.items():
                if value is None and arg in optional:
                    continue
                yield fname, arg, label


CASES = list(_cases())


def test_every_valid_base_call_runs():
    """The table's base calls are valid, so each failure below is the one bad argument's."""
    for fname, (function, kwargs, _) in CALLS.items():
        assert function(**kwargs) is not None, fname


def test_the_table_covers_the_public_api():
    functions = {
        name
        for name in costmodel.__all__
        if callable(getattr(costmodel, name)) and not isinstance(getattr(costmodel, name), type)
    }
    assert functions <= {f.split(".")[0] for f in CALLS}


@pytest.mark.parametrize("fname,arg,label", CASES, ids=[f"{f}-{a}-{v}" for f, a, v in CASES])
def test_bad_argument_raises_costmodel_error_naming_it(fname, arg, label):
    function, kwargs, _ = CALLS[fname]
    value = BAD[label]
    if arg == "dims":
        value = {"b": value}
    with pytest.raises(CostModelError) as err:
        function(**_with(kwargs, arg, value))
    arg = arg.split(".")[-1]
    said = SAID.get(arg, arg)
    assert any(s in str(err.value) for s in (said, arg, arg.replace("_", " "))), str(err.value)


@pytest.mark.parametrize("values", [[1.7], [True], [-1], [math.nan], [10, "20"]])
def test_sweep_refuses_values_that_are_not_counts(values):
    """No silent rounding of 1.7 to 1 or True to 1, no context -1."""
    with pytest.raises(CostModelError, match="values"):
        costmodel.sweep([W], H100, "context", values)

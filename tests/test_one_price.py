"""One path: every time is :func:`costmodel.price.op.price`. For each kernel class, the time ``price`` gives for a
shape built here by hand equals the op row of ``predict``, the op row of a model step, the fit's prediction of a
published-table row and the sweep, for the same shape."""

from __future__ import annotations

import numpy as np
import pytest

import costmodel
from costmodel.attention.sweeps import sweep_arrays
from costmodel.hardware.shapes import DecodeShape, GemmShape, PrefillShape
from costmodel.price.op import Conventions, KernelOp, price
from costmodel.price.origin import time_model
from costmodel.validation.fit import predict_table
from costmodel.validation.tables import Table

H100 = costmodel.load_profile("h100")
CONV = Conventions.of(H100)
B, CTX, D, H, G, K = 8, 1024, 4096, 32, 8, 128


def _table(cls: str, flops: float, nbytes: float, shape: dict, kind: str = "gemm") -> Table:
    """A published-table row of one op, as the readers of validation.published build them."""
    arr = lambda x: np.asarray([float(x)])  # noqa: E731
    return Table(
        source="hand",
        gpu="h100_sxm",
        profile=H100.id,
        op_class=kind,
        timing="graph",
        dtype="bf16",
        file="hand.csv",
        fields={},
        measured_s=arr(1.0),
        flops=arr(flops),
        nbytes=arr(nbytes),
        shape={k: arr(v) for k, v in shape.items()},
        kernel=cls if cls != kind else None,
    )


def _fit_time(cls: str, flops: float, nbytes: float, shape: dict, kind: str) -> float:
    return float(predict_table(_table(cls, flops, nbytes, shape, kind), H100, time_model(H100).resolved.get(cls))[0])


def test_gemm_one_path():
    """A decode step's q projection: M = b tokens, K = d, N = h k."""
    w = costmodel.Workload.create("gqa", batch=B, context=CTX, groups=G, execution="fused")
    flops, nbytes = 2.0 * B * D * H * K, 2.0 * (B * D + D * H * K + B * H * K)
    shape = GemmShape(1, B, D, H * K, width=2)
    by_hand = price(KernelOp("projection", "q_proj", "bf16", flops, nbytes), shape, H100, CONV)
    row = {r.name: r for r in costmodel.predict(w, H100).ops}["q_proj"]
    assert (row.flops, row.bytes) == (flops, nbytes)
    assert row.time_s == by_hand.time and row.efficiency_class == by_hand.cls == "gemm"
    assert _fit_time("gemm", flops, nbytes, shape.fields(), "gemm") == pytest.approx(by_hand.time, rel=1e-12)


def test_decode_attention_one_path():
    w = costmodel.Workload.create("gqa", batch=B, context=CTX, groups=G, execution="fused")
    row = {r.name: r for r in costmodel.predict(w, H100).ops}["attention"]
    shape = DecodeShape(B, G, H, CTX + 1)
    by_hand = price(KernelOp("fused_decode", "attention", "bf16", row.flops, row.bytes), shape, H100, CONV)
    assert row.time_s == by_hand.time and by_hand.cls == "decode_attention"
    assert _fit_time("decode_attention", row.flops, row.bytes, shape.fields(), "decode_attention") == pytest.approx(
        by_hand.time, rel=1e-12
    )
    # the model step's decode attention of Llama 3 8B (g 8, h 32, k 128) at the same batch and context
    m = costmodel.predict_model(costmodel.load_model("llama-3-8b"), H100, batch=B, context=CTX)
    op = {o.name: o for o in m.decode.ops}["attention"]
    step = price(
        KernelOp("fused_decode", "attention", "bf16", op.flops / op.count, op.bytes / op.count), shape, H100, CONV
    )
    assert op.time_s == pytest.approx(step.time * op.count, rel=1e-12)


def test_prefill_attention_one_path():
    n = 512
    w = costmodel.Workload.create("gqa", "batched", batch=2, seq=n, groups=G, execution="fused")
    row = {r.name: r for r in costmodel.predict(w, H100).ops}["attention"]
    write = 2 * 2 * n * G * (K + K) * 2
    shape = PrefillShape(2, H, G, n, n, write_bytes=write)
    by_hand = price(KernelOp("fused_prefill", "attention", "bf16", row.flops, row.bytes), shape, H100, CONV)
    assert row.time_s == by_hand.time and by_hand.cls == "prefill_attention"
    assert _fit_time("prefill_attention", row.flops, row.bytes, shape.fields(), "prefill_attention") == pytest.approx(
        by_hand.time, rel=1e-12
    )
    # a one-query prefill is priced on the decode kernel, as engines dispatch it
    one = PrefillShape(2, H, G, 1, 1, write_bytes=0)
    alone = price(KernelOp("fused_prefill", "attention", "bf16", 1e6, 1e6), one, H100, CONV)
    decode = price(KernelOp("fused_decode", "attention", "bf16", 1e6, 1e6), DecodeShape(2, G, H, 1), H100, CONV)
    assert alone.time == decode.time


@pytest.mark.parametrize(
    "name,cls", [("norm_0", "norm"), ("residuals", "elementwise"), ("ffn_act", "activation"), ("rope", "rotary")]
)
def test_model_step_vector_kernels_one_path(name, cls):
    """Norms, residual adds, the gated activation and rotary embeddings of a model step, each by its class."""
    m = costmodel.predict_model(costmodel.load_model("llama-3-8b"), H100, batch=B, context=CTX)
    op = {o.name: o for o in m.decode.ops}[name]
    by_hand = price(KernelOp("elementwise", name, "bf16", op.flops / op.count, op.bytes / op.count), None, H100, CONV)
    assert by_hand.cls == cls
    assert op.time_s == pytest.approx(by_hand.time * op.count, rel=1e-12)
    assert _fit_time(cls, op.flops / op.count, op.bytes / op.count, {}, "elementwise") == pytest.approx(
        by_hand.time, rel=1e-12
    )


@pytest.mark.parametrize("variant,mode", [("mha", "incremental"), ("gqa", "batched"), ("mqa", "generate")])
def test_sweep_total_is_the_sum_of_priced_rows(variant, mode):
    """The unfused program's every class (GEMMs, attention einsums, scale, mask, softmax, cache appends): a
    sweep at one value totals what predict's rows total, each of them one call of price."""
    kw = {"context": 256} if mode != "generate" else {}
    w = costmodel.Workload.create(variant, mode, batch=4, seq=256 if mode != "incremental" else None, **kw)
    p = costmodel.predict(w, H100)
    assert {r.efficiency_class for r in p.ops} >= {"gemm", "attention_einsum", "elementwise"}
    swept = sweep_arrays(w, H100, "b", [4])
    assert float(swept["time_s"][0]) == pytest.approx(p.total.time_s, rel=1e-12)


def test_a_tensor_parallel_all_reduce_is_priced_by_the_same_path():
    """Ring all-reduce over 4 H100s (900 GB/s both ways, 2 us a step): 2(t-1)/t of the bytes each way and 2(t-1)
    latencies, by hand; zero bytes cost the latencies alone; one device costs nothing."""

    def reduce(nbytes, t):
        return price(
            KernelOp("all_reduce", "all_reduce", "bf16", 0.0, nbytes, devices=t), None, H100, Conventions.datasheet()
        )

    assert reduce(8e6, 4).time == pytest.approx(2 * 3 / 4 * 8e6 / 450e9 + 6 * 2e-6)
    assert reduce(0.0, 4).time == pytest.approx(6 * 2e-6)
    assert reduce(8e6, 1).time == 0.0
    p = costmodel.predict_model(costmodel.load_model("llama-3-8b"), H100, batch=B, context=CTX, tp=4)
    fitted = price(
        KernelOp("all_reduce", "all_reduce", "bf16", 0.0, B * D * 2, devices=4),
        None,
        H100,
        Conventions.of(H100, "graph"),
    ).time
    assert p.decode.all_reduce_s == pytest.approx(2 * 32 * fitted)


def test_tensor_parallelism_is_a_transformation_of_the_program():
    """A TP-4 step is the one-device program of the sliced model with the all-reduces inserted: one row of 2 x 32
    all-reduces of b x d activations, priced like any op; a TP-1 step has none."""
    from costmodel.model.engine_ops import COLLECTIVES
    from costmodel.model.pricing import pricing
    from costmodel.model.step import phase_ops

    m = costmodel.load_model("llama-3-8b")
    rows = phase_ops(m, pricing(m, H100, tp=4), "decode", B, CTX, 1)
    inserted = [r for r in rows if r.section == COLLECTIVES]
    assert [(r.name, r.op.kind, r.count, r.op.bytes, r.op.devices) for r in inserted] == [
        ("all_reduce", "all_reduce", 64, B * D * 2, 4)
    ]
    assert not [r for r in phase_ops(m, pricing(m, H100), "decode", B, CTX, 1) if r.section == COLLECTIVES]

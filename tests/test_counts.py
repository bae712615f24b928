"""Symbolic counts against independent oracles: torch's FlopCounterMode, brute-force loops, hand counts."""

from __future__ import annotations

import itertools

import pytest
import sympy

from costmodel import derive
from costmodel.counts import symbols as S
from costmodel.counts.program import STEP, build_program
from tests.conftest import small_dims

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

CASES = [
    (var, mode) for var in ("mha", "mqa", "gqa") for mode in ("batched", "incremental", "single-query", "dot-product")
]


def _shape(tensor, vals):
    return tuple(int(s.subs(vals)) for s in tensor.shape)


def _torch_flops(op, vals) -> int:
    tensors = [torch.randn(_shape(t, vals)) for t in op.inputs]
    with FlopCounterMode(display=False) as counter:
        out = torch.einsum(op.einsum, *tensors)
    assert tuple(out.shape) == _shape(op.output, vals)
    return counter.get_total_flops()


@pytest.mark.parametrize("variant,mode", CASES)
def test_einsum_flops_equal_torch_flop_counter(variant, mode, rng):
    for _ in range(3):
        vals = small_dims(rng, variant, low=2)
        report = derive(variant, mode, groups=int(vals[S.g]) if variant == "gqa" else None)
        program = build_program(variant, mode, groups=int(vals[S.g]) if variant == "gqa" else None)
        einsums = [op for op in program.ops if op.kind == "einsum"]
        assert einsums
        costs = {c.name: c for c in report.ops}
        for op in einsums:
            assert costs[op.name].flops.subs(vals) == _torch_flops(op, vals), (op.name, vals)


def _oracle_flops(op, vals) -> int:
    """torch's count, except for a contraction over a size-1 index (the first decode step attends to
    one position), which torch runs as a broadcast multiply without counting: there the loop count."""
    sizes = op.index_sizes()
    contracted = set(sizes) - set(op.output.indices)
    if any(int(sizes[x].subs(vals)) == 1 for x in contracted):
        return _brute_force(op, vals)[0]
    return _torch_flops(op, vals)


@pytest.mark.parametrize("variant", ["mha", "mqa", "gqa"])
def test_generate_flops_equal_torch_counted_steps(variant, rng):
    vals = small_dims(rng, variant, low=2)
    groups = int(vals[S.g]) if variant == "gqa" else None
    generate = {c.name: c.flops.subs(vals) for c in derive(variant, "generate", groups=groups).ops}
    einsums = [op for op in build_program(variant, "incremental", groups=groups).ops if op.kind == "einsum"]
    measured = {op.name: 0 for op in einsums}
    for i in range(int(vals[S.n])):  # step i: i cached positions
        for op in einsums:
            measured[op.name] += _oracle_flops(op, {**vals, S.m: i})
    assert len(measured) == 6
    for name, flops in measured.items():
        assert generate[name] == flops, name


# --- brute force: explicit loops over tiny dims ---------------------------------------------------------


def _brute_force(op, vals) -> tuple[int, int]:
    """FLOPs and memory elements of one op by walking every index combination."""
    sizes = {}
    for t in (*op.inputs, op.output):
        sizes.update(zip(t.indices, _shape(t, vals)))
    flops = 0
    read = [set() for _ in op.inputs]
    written = set()
    if op.kind == "copy":
        # every element written is read from exactly one source element
        for pos in itertools.product(*(range(s) for s in _shape(op.output, vals))):
            written.add(pos)
        return 0, 2 * len(written)
    letters = sorted(sizes) if op.kind == "einsum" else list(op.output.indices)
    for pos in itertools.product(*(range(sizes[x]) for x in letters)):
        at = dict(zip(letters, pos))
        for seen, t in zip(read, op.inputs):
            seen.add(tuple(at[x] for x in t.indices))
        written.add(tuple(at[x] for x in op.output.indices))
        flops += 2 if op.kind == "einsum" else op.flops_per_element
    return flops, sum(map(len, read)) + len(written)


@pytest.mark.parametrize("variant,mode", CASES)
@pytest.mark.parametrize("cache_append", ["inplace", "concat"])
def test_counts_equal_brute_force(variant, mode, cache_append, rng):
    vals = small_dims(rng, variant)
    groups = int(vals[S.g]) if variant == "gqa" else None
    program = build_program(variant, mode, groups=groups, cache_append=cache_append)
    for op in program.ops:
        flops, memory = _brute_force(op, vals)
        assert (op.flops.subs(vals), op.memory_elements.subs(vals)) == (flops, memory), op.name


def test_hand_counted_mqa_decode_step():
    # MQA, one step: b=2, d=8, h=4, k=v=2, m=5 cached positions -> attends to 6.
    r = derive("mqa", "incremental", dims={"b": 2, "d": 8, "h": 4, "k": 2, "v": 2, "m": 5})
    ops = {op.name: op for op in r.ops}
    # logits: q (2*4*2=16) + K with ONE head (2*1*6*2=24) + logits (2*4*6=48); FLOPs 2*2*4*6*2 = 192
    assert ops["logits"].memory_elements == 16 + 24 + 48
    assert ops["logits"].flops == 192
    # k_proj: x (2*8) + P_k (8*2) + k_new (2*2); FLOPs 2*2*8*2
    assert (ops["k_proj"].memory_elements, ops["k_proj"].flops) == (16 + 16 + 4, 64)
    # softmax: read and write 2*4*6 = 48 each, 5 FLOPs per element
    assert (ops["softmax"].memory_elements, ops["softmax"].flops) == (96, 240)
    # in-place append writes the new key only: read 2*2, write 2*2
    assert ops["k_append"].memory_elements == 8
    assert ops["out_proj"].bytes == 2 * (2 * 8 + 8 * 8 + 2 * 8)  # o, P_o, y in bf16


def test_hand_counted_batched_mha():
    # b=1, n=m=2, d=4, h=2, k=v=2: logits reads Q (1*2*2*2=8), K (8), writes 1*2*2*2 = 8 logits
    r = derive("mha", "batched", dims={"b": 1, "n": 2, "m": 2, "d": 4, "h": 2})
    ops = {op.name: op for op in r.ops}
    assert ops["logits"].memory_elements == 24
    assert ops["mask"].memory_elements == 3 * 8  # logits + mask [b,h,n,m] read, output written
    assert ops["q_proj"].flops == 2 * 1 * 2 * 4 * 2 * 2


@pytest.mark.parametrize("mode", ["batched", "incremental", "generate", "single-query"])
def test_mha_and_mqa_are_gqa_special_cases(mode):
    gqa = derive("gqa", mode)
    for variant, g in (("mha", S.h), ("mqa", 1)):
        other = derive(variant, mode)
        for a, b in zip(gqa.ops, other.ops, strict=True):
            assert a.name == b.name
            assert sympy.simplify(a.flops.subs(S.g, g) - b.flops) == 0
            assert sympy.simplify(a.memory_elements.subs(S.g, g) - b.memory_elements) == 0
        assert sympy.simplify(gqa.ratio.subs(S.g, g) - other.ratio) == 0


@pytest.mark.parametrize("variant", ["mha", "mqa", "gqa"])
@pytest.mark.parametrize("cache_append", ["inplace", "concat"])
def test_generate_equals_sum_of_steps(variant, cache_append, rng):
    gen = derive(variant, "generate", cache_append=cache_append)
    step = derive(variant, "incremental", cache_append=cache_append)
    for _ in range(3):
        vals = small_dims(rng, variant)
        steps = [{S.m: i, **{s: x for s, x in vals.items() if s != S.m}} for i in range(int(vals[S.n]))]
        assert gen.flops.subs(vals) == sum(step.flops.subs(p) for p in steps)
        assert gen.memory_elements.subs(vals) == sum(step.memory_elements.subs(p) for p in steps)
    assert STEP not in gen.flops.free_symbols


def test_concat_append_copies_the_cache():
    inplace = {o.name: o for o in derive("mha", "incremental").ops}["k_append"]
    concat = {o.name: o for o in derive("mha", "incremental", cache_append="concat").ops}["k_append"]
    assert inplace.memory_elements == 2 * S.b * S.h * S.k
    assert sympy.expand(concat.memory_elements - 2 * S.b * S.h * (S.m + 1) * S.k) == 0


def test_numeric_dims_default_head_dims_to_d_over_h():
    r = derive("gqa", "incremental", groups=8, dims={"d": 4096, "h": 32, "b": 1, "m": 10})
    k_proj = {o.name: o for o in r.ops}["k_proj"]
    assert k_proj.flops == 2 * 4096 * 8 * 128

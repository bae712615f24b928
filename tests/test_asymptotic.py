"""The paper's asymptotic ratios, derived and checked for Θ-equivalence with the exact ratios."""

from __future__ import annotations

import random

import pytest
import sympy

from costmodel import derive
from costmodel.counts import symbols as S
from costmodel.counts.asymptotic import (
    BASE_ASSUMPTIONS,
    EXTRA_ASSUMPTIONS,
    PAPER_SUBS,
    _constraints,
    analyze,
    dominated,
)

b, n, d, h, g = S.b, S.n, S.d, S.h, S.g


def _same(a, e):
    return sympy.simplify(a - e) == 0


def test_batched_mha_reproduces_the_paper_bound():
    a = analyze(derive("mha", "batched"))
    # Section 2.3.1: arithmetic Θ(bnd^2), memory O(bnd + bhn^2 + d^2)
    assert _same(a.flops, b * n * d**2)
    assert _same(a.memory, b * n * d + b * h * n**2 + d**2)
    # tight form: memory/arithmetic = 1/d + hn/d^2 + 1/(bn); hn/d^2 <= h/d = 1/k since n <= d
    assert _same(a.ratio, 1 / d + h * n / d**2 + 1 / (b * n))
    assert a.claim.kind == "O" and _same(a.claim.ratio, 1 / S.k + 1 / (b * n))
    assert a.claim_holds is True


def test_generate_mha_is_n_over_d_plus_1_over_b():
    a = analyze(derive("mha", "generate"))
    assert _same(a.flops, b * n * d**2)
    assert _same(a.memory, b * n**2 * d + n * d**2)  # Section 2.4.1: Θ(bn^2 d + nd^2)
    assert _same(a.ratio, n / d + 1 / b)
    assert a.claim_holds is True and not a.extra_assumptions


@pytest.mark.parametrize(
    "variant,paper",
    [
        ("mqa", 1 / d + n / (d * h) + 1 / b),
        ("gqa", 1 / d + g * n / (d * h) + 1 / b),
    ],
)
def test_generate_mqa_gqa_need_the_logits_traffic_assumption(variant, paper):
    a = analyze(derive(variant, "generate"))
    # Without it the logits/weights traffic b*h*n^2 over arithmetic b*n*d^2 = hn/d^2 survives.
    assert _same(a.ratio, paper + h * n / d**2)
    assert a.claim_holds is False
    assert a.extra_assumptions == (EXTRA_ASSUMPTIONS[0].text,)
    assert _same(a.ratio_with_extra, paper)


def test_dominance_rule_on_hand_cases():
    base = _constraints(BASE_ASSUMPTIONS, g)
    assert dominated(n / d**2, 1 / d, base)  # n <= d
    assert not dominated(1 / d, 1 / b, base)  # unrelated dims
    assert not dominated(1 / b, 1 / d, base)
    assert dominated(g / (h * d), 1 / d, base)  # g <= h
    assert not dominated(h * n / d**2, g * n / (d * h), base)
    extra = base + _constraints(EXTRA_ASSUMPTIONS, g)
    assert dominated(h * n / d**2, g * n / (d * h), extra)  # h^2 <= g d


def _sample(rng, extra: bool, kv_heads=g):
    """A point with m = n, k = v = d/h, n <= d, 1 <= g <= h <= d, optionally h^2 <= g d; g is the
    variant's key/value head count (h for MHA, 1 for MQA)."""
    while True:
        d_ = 2 ** rng.uniform(0, 16)
        vals = {
            b: 2 ** rng.uniform(0, 12),
            d: d_,
            n: 2 ** rng.uniform(0, 1) * d_ ** rng.random() / 2,
            h: d_ ** rng.random(),
        }
        vals[g] = float(kv_heads.subs(vals)) if kv_heads != g else vals[h] ** rng.random()
        if vals[n] >= 1 and (not extra or vals[h] ** 2 <= vals[g] * d_):
            return vals


def _quotient_range(exact, form, extra, kv_heads=g, samples=3000):
    rng = random.Random(7)
    f = sympy.lambdify([b, n, d, h, g], exact / form)
    points = (_sample(rng, extra, kv_heads) for _ in range(samples))
    qs = [f(*(p[s] for s in (b, n, d, h, g))) for p in points]
    return min(qs), max(qs)


@pytest.mark.parametrize(
    "variant,mode", [(v, m) for v in ("mha", "mqa", "gqa") for m in ("batched", "incremental", "generate")]
)
def test_theta_form_is_within_constants_of_the_exact_ratio(variant, mode):
    report = derive(variant, mode)
    a = analyze(report)
    exact = report.ratio.subs(PAPER_SUBS).subs(S.g, report.kv_heads)
    lo, hi = _quotient_range(exact, a.ratio, extra=False, kv_heads=report.kv_heads)
    assert 0.01 < lo <= hi < 100, (lo, hi)
    if a.ratio_with_extra is not None:
        lo, hi = _quotient_range(exact, a.ratio_with_extra, extra=True, kv_heads=report.kv_heads)
        assert 0.01 < lo <= hi < 100, (lo, hi)


def test_quotient_check_detects_a_missing_term():
    # The paper's MQA form without its extra assumption is not Θ of the exact ratio: h^2 > d breaks it.
    report = derive("mqa", "generate")
    exact = report.ratio.subs(PAPER_SUBS)
    lo, hi = _quotient_range(exact, 1 / d + n / (d * h) + 1 / b, extra=False, kv_heads=sympy.Integer(1))
    assert hi > 100

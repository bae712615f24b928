"""Leading-order (Θ) forms of the counts under the paper's assumptions, and the paper's claims checked.

The dominance rule
------------------
Under the paper's simplifying assumptions (Shazeer 2019, Section 2.3.1): ``m = n``, ``k = v = d/h``,
``n <= d``, every dimension ``>= 1``, and for grouped-query attention ``1 <= g <= h``, a count is a sum of
monomials in b, n, d, h, g. A monomial ``t`` is *dominated* by a monomial ``s`` when ``t <= s`` at every
point the assumptions allow (a constant factor aside). With ``x = log(dims)`` the assumptions are the cone
``{x >= 0, A x <= 0}`` and ``t/s`` is ``exp(e . x)``, so ``t = O(s)`` exactly when ``e . r <= 0`` for every
extreme ray ``r`` of that cone. The rays are enumerated exactly (rational arithmetic) by this module.

A term is dropped when another term of the same sum dominates it; the Θ form is the sum of the remaining
monomials with unit coefficients. A ratio memory/arithmetic is reduced as Θ(memory) / Θ(arithmetic).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import sympy

from costmodel.counts import symbols as S
from costmodel.counts.exact import CostReport, derive

#: The paper's substitutions (Section 2.3.1).
PAPER_SUBS: dict[sympy.Symbol, sympy.Expr] = {S.m: S.n, S.k: S.d / S.h, S.v: S.d / S.h}


@dataclass(frozen=True)
class Assumption:
    """``lhs <= rhs`` between monomials, stated in words."""

    lhs: sympy.Expr
    rhs: sympy.Expr
    text: str

    @property
    def monomial(self) -> sympy.Expr:
        """``lhs / rhs`` under the paper's substitutions: the assumption is ``monomial <= 1``."""
        return sympy.simplify((self.lhs / self.rhs).subs(PAPER_SUBS))


BASE_ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption(S.m, S.n, "m = n (memory positions = query positions)"),
    Assumption(S.k, S.d / S.h, "k = v = d/h"),
    Assumption(S.n, S.d, "n <= d"),
    Assumption(sympy.Integer(1), S.k, "every dimension >= 1 (so h <= d, and 1 <= g <= h)"),
    Assumption(S.g, S.h, "g <= h"),
)

#: What multi-head latent attention adds (DeepSeek-V2's shapes: c = 4k = 512, p = k/2 = 64, l = 1536 <= d).
MLA_ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption(S.p, S.k, "p <= k (the rotary key is at most a head's key dimension)"),
    Assumption(S.k, S.c, "k <= c (the latent rank is at least a head's dimension)"),
    Assumption(S.c, S.d, "c <= d and l <= d (the latents are no wider than the model)"),
    Assumption(S.l, S.d, ""),
)

#: Extra assumptions tried, in order, when a paper's form does not follow from the base ones.
EXTRA_ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption(
        S.h / S.g,
        S.k,
        "h/g <= k: query heads per key/value head at most the head dimension, so the logits and "
        "weights traffic (b*h*n^2 across n steps) is dominated by the K/V traffic (b*g*n^2*k); "
        "the paper leaves that traffic out of its incremental analysis",
    ),
)


@dataclass(frozen=True)
class PaperClaim:
    """An asymptotic ratio as the paper states it (in its own symbols, k included)."""

    source: str
    kind: str  # "Θ" or "O"
    ratio: sympy.Expr

    @property
    def ratio_in_d(self) -> sympy.Expr:
        return self.ratio.subs(PAPER_SUBS)


_GEN = "across n calls; a single step with m = n has the same ratio"
PAPER_CLAIMS: dict[tuple[str, str], PaperClaim] = {
    ("batched", "mha"): PaperClaim("Shazeer 2019, Section 2.3.1", "O", 1 / S.k + 1 / (S.b * S.n)),
    **{
        (mode, "mha"): PaperClaim(f"Shazeer 2019, Section 2.4.1 ({_GEN})", "Θ", S.n / S.d + 1 / S.b)
        for mode in ("generate", "incremental")
    },
    **{
        (mode, "mqa"): PaperClaim(f"Shazeer 2019, Section 3.1 ({_GEN})", "Θ", 1 / S.d + S.n / (S.d * S.h) + 1 / S.b)
        for mode in ("generate", "incremental")
    },
    **{
        (mode, "gqa"): PaperClaim(
            "the paper's Section 3.1 argument with g key/value heads (Ainslie et al. 2023)",
            "Θ",
            1 / S.d + S.g * S.n / (S.d * S.h) + 1 / S.b,
        )
        for mode in ("generate", "incremental")
    },
}


@dataclass(frozen=True)
class Asymptotics:
    """Θ forms of one report under the paper's assumptions, and the paper's claim checked against them."""

    flops: sympy.Expr
    memory: sympy.Expr
    ratio: sympy.Expr
    assumptions: tuple[str, ...]
    claim: PaperClaim | None
    claim_holds: bool | None
    extra_assumptions: tuple[str, ...]
    ratio_with_extra: sympy.Expr | None

    def model_dump(self) -> dict:
        out = {
            "flops": str(self.flops),
            "memory_elements": str(self.memory),
            "ratio": str(self.ratio),
            "assumptions": list(self.assumptions),
        }
        if self.claim is not None:
            out["paper"] = {
                "source": self.claim.source,
                "kind": self.claim.kind,
                "ratio": str(self.claim.ratio),
                "ratio_with_k_eq_d_over_h": str(self.claim.ratio_in_d),
                "holds": self.claim_holds,
                "extra_assumptions": list(self.extra_assumptions),
                "ratio_under_extra_assumptions": None if self.ratio_with_extra is None else str(self.ratio_with_extra),
            }
        return out


def analyze(report: CostReport) -> Asymptotics:
    """Reduce a report's totals to Θ forms and check the paper's claim for its variant and mode."""
    from costmodel.core.checks import instance

    instance("report", report, CostReport, "a CostReport (derive(...))")
    if report.substitutions or report.mode not in ("batched", "incremental", "generate"):
        from costmodel.core.errors import CostModelError

        raise CostModelError(
            "report must be symbolic (no dimensions given numbers) and of mode batched, incremental "
            f"or generate; got mode {report.mode} with {dict(report.substitutions) or 'no'} numbers"
        )
    assumed = BASE_ASSUMPTIONS + (MLA_ASSUMPTIONS if report.variant == "mla" else ())
    base = _constraints(assumed, report.kv_heads)
    flops, memory = (sympy.expand(e.subs(PAPER_SUBS)) for e in (report.flops, report.memory_elements))
    flops_t, memory_t = theta(flops, base), theta(memory, base)
    ratio = theta_ratio(memory_t, flops_t, base)
    claim = PAPER_CLAIMS.get((report.mode, report.variant))
    holds, extra, ratio_extra = None, (), None
    if claim is not None:
        target = claim.ratio_in_d.subs(S.g, report.kv_heads)
        holds = _claim_holds(claim.kind, ratio, target, base)
        if not holds:
            for extra_assumption in EXTRA_ASSUMPTIONS:
                cons = base + _constraints((extra_assumption,), report.kv_heads)
                reduced = theta_ratio(theta(memory, cons), theta(flops, cons), cons)
                if _claim_holds(claim.kind, reduced, target, cons):
                    extra, ratio_extra = (extra_assumption.text,), reduced
                    break
    return Asymptotics(
        flops=flops_t,
        memory=memory_t,
        ratio=ratio,
        assumptions=tuple(a.text for a in assumed if a.text),
        claim=claim,
        claim_holds=holds,
        extra_assumptions=extra,
        ratio_with_extra=ratio_extra,
    )


def asymptotic_ratio(variant: str, mode: str, groups: int | None = None) -> sympy.Expr:
    """Θ form of memory/arithmetic of a program under the paper's base assumptions."""
    return analyze(derive(variant, mode, groups=groups)).ratio


# --- the dominance rule -------------------------------------------------------------------------------

Constraints = tuple[sympy.Expr, ...]  # monomials, each assumed <= 1


def _constraints(assumptions: tuple[Assumption, ...], kv_heads: sympy.Expr) -> Constraints:
    out = []
    for a in assumptions:
        mono = sympy.simplify(a.monomial.subs(S.g, kv_heads))
        if mono.free_symbols:
            out.append(mono)
    return tuple(out)


def _monomials(expr: sympy.Expr) -> list[tuple[sympy.Expr, sympy.Expr]]:
    """(coefficient, monomial) pairs of an expanded sum."""
    return [term.as_coeff_Mul() for term in sympy.Add.make_args(sympy.expand(expr))]


def _exponents(mono: sympy.Expr, variables: tuple[sympy.Symbol, ...]) -> tuple[sympy.Rational, ...]:
    powers = mono.as_powers_dict()
    return tuple(sympy.Rational(powers.get(x, 0)) for x in variables)


@lru_cache(maxsize=256)
def _rays(constraints: Constraints, variables: tuple[sympy.Symbol, ...]) -> tuple[tuple, ...]:
    """Extreme rays of {x >= 0, a . x <= 0 for every constraint}, in log space."""
    nvar = len(variables)
    rows = [tuple(-1 if j == i else 0 for j in range(nvar)) for i in range(nvar)]
    rows += [_exponents(c, variables) for c in constraints]
    rays = set()
    for tight in itertools.combinations(rows, nvar - 1):
        null = sympy.Matrix(tight).nullspace() if tight else [sympy.eye(nvar)[:, 0]]
        if len(null) != 1:
            continue
        for ray in (null[0], -null[0]):
            if all(sum(a * r for a, r in zip(row, ray)) <= 0 for row in rows):
                scale = max(abs(x) for x in ray)
                rays.add(tuple(x / scale for x in ray))
    return tuple(sorted(rays, key=str))


def dominated(t: sympy.Expr, s: sympy.Expr, constraints: Constraints) -> bool:
    """True when monomial ``t`` is O(monomial ``s``) wherever the constraints hold."""
    quotient = sympy.powsimp(t / s)
    variables = tuple(sorted(quotient.free_symbols | set().union(*(c.free_symbols for c in constraints)), key=str))
    if not variables:
        return True
    e = _exponents(quotient, variables)
    return all(sum(a * r for a, r in zip(e, ray)) <= 0 for ray in _rays(constraints, variables))


def theta(expr: sympy.Expr, constraints: Constraints) -> sympy.Expr:
    """Θ form of a sum of monomials: the terms no other term dominates, with unit coefficients."""
    terms = _monomials(expr)
    positive = [mono for coeff, mono in terms if coeff > 0]
    kept: list[sympy.Expr] = []
    for i, t in enumerate(positive):
        # dropped if a later term dominates it, or an earlier kept one does (ties keep the first)
        if any(
            dominated(t, s, constraints) and (j < i or not dominated(s, t, constraints))
            for j, s in enumerate(positive)
            if j != i and (j > i or s in kept)
        ):
            continue
        kept.append(t)
    for coeff, mono in terms:
        if coeff < 0 and not any(dominated(mono, s, constraints) for s in kept):
            raise ValueError(f"negative term {coeff * mono} is not dominated by a positive one")
    return sympy.Add(*kept)


def theta_ratio(numerator: sympy.Expr, denominator: sympy.Expr, constraints: Constraints) -> sympy.Expr:
    """Θ form of numerator/denominator (already Θ forms); a posynomial when the denominator is one term."""
    if len(sympy.Add.make_args(denominator)) == 1:
        return theta(sympy.expand(numerator / denominator), constraints)
    return numerator / denominator


def _bounded_by(expr: sympy.Expr, bound: sympy.Expr, constraints: Constraints) -> bool:
    """Every term of ``expr`` is dominated by some term of ``bound``."""
    bound_terms = [mono for _, mono in _monomials(bound)]
    return all(any(dominated(t, s, constraints) for s in bound_terms) for _, t in _monomials(expr))


def _claim_holds(kind: str, derived: sympy.Expr, claim: sympy.Expr, constraints: Constraints) -> bool:
    if kind == "O":
        return _bounded_by(derived, claim, constraints)
    return _bounded_by(derived, claim, constraints) and _bounded_by(claim, derived, constraints)

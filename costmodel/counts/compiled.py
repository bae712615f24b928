"""A program's exact counts compiled once into one numpy-ready function with named outputs.

:func:`compile_program` derives the per-op counts of :mod:`costmodel.counts.exact` and the resident weights and
KV cache of :meth:`costmodel.counts.program.Program.resident_elements`, and prints them as plain Python
arithmetic, so a prediction, a sweep over a million points and a whole model all evaluate the same
expressions, on Python numbers or numpy arrays. :func:`compile_block` does the same for the ops of a model
step around attention (:mod:`costmodel.counts.step_program`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

#: The arguments of every compiled grouped-query function, in order (MLA's: costmodel.counts.mla.ARGS).
ARG_NAMES = ("b", "n", "m", "d", "h", "g", "k", "v")
#: The modules whose code decides a program's counts: a compiled program cached on disk is keyed by their text.
SYMBOLIC_MODULES = ("symbols.py", "ops.py", "program.py", "mla.py", "exact.py", "compiled.py", "step_program.py")


@dataclass(frozen=True)
class Compiled:
    """A program's ops and one function of its dimensions (an attention program's: b, n, m, d, h, g, k, v)
    that returns, in order, every op's FLOPs, every op's memory elements, the weight elements, the KV-cache
    elements and the bias elements."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]  # the op class of each op (costmodel.counts.program.op_class)
    einsums: tuple[str | None, ...]
    gemms: tuple[bool, ...]  # which ops are matrix products, with a (batch, M, K, N) in gemm_counts
    grouped: tuple[bool, ...]  # which products are grouped (their batch: the groups; M: all their rows)
    counts: object
    gemm_counts: object = None  # (batch, M, K, N) of every matrix product, flattened, as one numeric function
    args: tuple[str, ...] = ARG_NAMES  # the dimensions the functions take, in order
    storage_counts: object = None  # per op: elements in the weight dtype, in the cache dtype, and parameters

    def _args(self, dims: dict) -> list:
        return [dims[name] for name in self.args]

    def evaluate(self, args) -> tuple[list, list, object, object]:
        """(flops per op, elements per op, weight elements, cache elements) at ``args``."""
        values = self.counts(*args)
        n = len(self.names)
        return values[:n], values[n : 2 * n], values[2 * n], values[2 * n + 1]

    def at(self, dims: dict[str, int]) -> tuple[list, list, object, object]:
        """:meth:`evaluate` at named dimensions (``{"b": 1, "m": 4096, ...}``)."""
        return self.evaluate(self._args(dims))

    def resident(self, dims: dict[str, int]) -> tuple[int, int]:
        """(weight elements, KV-cache elements) of one layer at ``dims``: the program's resident tensors."""
        _, _, weights, cache = self.at(dims)
        return weights, cache

    def bias_elements(self, dims: dict[str, int]) -> int:
        """Elements of the projections' biases at ``dims`` (for models with biases)."""
        return self.counts(*self._args(dims))[-1]

    def gemm_shapes(self, dims: dict) -> list[dict | None]:
        """``{"batch", "M", "K", "N"}`` of every matrix product at ``dims`` (numbers or numpy arrays; ``None``
        for the other ops), the shapes the GEMM tile mechanism needs. A grouped product over a fractional
        expected number of groups runs ``ceil(groups)`` GEMMs of ``ceil(rows / groups)`` rows."""
        values = iter(self.gemm_counts(*self._args(dims)))
        out = []
        for g, grouped in zip(self.gemms, self.grouped):
            shape = dict(zip(("batch", "M", "K", "N"), (next(values) for _ in range(4)))) if g else None
            if grouped:
                groups = shape["batch"]
                shape |= {"batch": np.ceil(groups), "M": np.ceil(shape["M"] / np.maximum(groups, 1))}
            out.append(shape)
        return out

    def storage(self, dims: dict) -> tuple[list, list]:
        """(weight elements, KV-cache elements) each op reads or writes at ``dims``: the parts of its memory
        traffic stored in the weight and the cache dtypes (the rest is in the activation dtype)."""
        values = self.storage_counts(*self._args(dims))
        n = len(self.names)
        return values[:n], values[n : 2 * n]

    def params(self, dims: dict) -> list:
        """The parameters each op reads at ``dims`` (its ``P_*`` and ``W_*`` operands)."""
        return self.storage_counts(*self._args(dims))[2 * len(self.names) :]


@lru_cache(maxsize=64)
def compile_program(
    variant: str,
    mode: str,
    execution: str = "unfused",
    cache_append: str = "inplace",
    form: str = "absorbed",
    q_lora: bool = False,
) -> Compiled:
    """The program's exact counts, compiled once into a single numpy function (``form`` and ``q_lora``
    choose the program of multi-head latent attention, :mod:`costmodel.counts.mla`).

    The generated functions are kept on disk (:func:`cache_folder`), keyed by the text of the modules that
    derive them, so a later process evaluates the same expressions without deriving them (or importing sympy)
    again; a cache that cannot be read or written is passed over."""
    key = _cache_key(variant, mode, execution, cache_append, form, q_lora)
    cached = _load(key)
    if cached is not None:
        return cached
    compiled, sources = _derive(variant, mode, execution, cache_append, form, q_lora)
    if sources is not None:
        _store(key, compiled, sources)
    return compiled


def cache_folder() -> Path | None:
    """Where compiled programs are kept: ``$COSTMODEL_CACHE``, else ``$XDG_CACHE_HOME/costmodel``, else
    ``~/.cache/costmodel``; an empty ``COSTMODEL_CACHE`` switches the cache off (None)."""
    given = os.environ.get("COSTMODEL_CACHE")
    if given is not None:
        return Path(given) if given else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "costmodel"


def _cache_key(*program) -> str:
    return hashlib.sha256(_code_digest() + repr(program).encode()).hexdigest()[:40]


@lru_cache(maxsize=1)
def _code_digest() -> bytes:
    """What decides every program's counts: the symbolic modules' text and the sympy version (read once)."""
    from importlib.metadata import version

    digest = hashlib.sha256(version("sympy").encode())
    here = Path(__file__).parent
    for name in SYMBOLIC_MODULES:
        digest.update((here / name).read_bytes())
    return digest.digest()


def _load(key: str) -> Compiled | None:
    folder = cache_folder()
    if folder is None:
        return None
    try:
        data = json.loads((folder / f"program-{key}.json").read_text(encoding="utf-8"))
        body = json.dumps(data["compiled"], sort_keys=True)
        if hashlib.sha256(body.encode()).hexdigest() != data["sha256"]:
            return None  # a damaged file: derive again
        c = data["compiled"]
        return Compiled(
            names=tuple(c["names"]),
            kinds=tuple(c["kinds"]),
            einsums=tuple(c["einsums"]),
            gemms=tuple(c["gemms"]),
            counts=_function(c["counts"]),
            gemm_counts=_function(c["gemm_counts"]),
            args=tuple(c["args"]),
            storage_counts=_function(c["storage_counts"]),
            grouped=tuple(c["grouped"]),
        )
    except (OSError, ValueError, KeyError, TypeError, SyntaxError):
        return None


def _store(key: str, compiled: Compiled, sources: dict) -> None:
    """Write the compiled program whole (a temporary file renamed over the target) or not at all."""
    import tempfile

    folder = cache_folder()
    if folder is None:
        return
    body = {
        "names": list(compiled.names),
        "kinds": list(compiled.kinds),
        "einsums": list(compiled.einsums),
        "gemms": list(compiled.gemms),
        "args": list(compiled.args),
        "grouped": list(compiled.grouped),
        **sources,
    }
    text = json.dumps(
        {"sha256": hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest(), "compiled": body}
    )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".program-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, folder / f"program-{key}.json")
    except OSError:
        pass  # a read-only or full disk: the next process derives the program again


def _function(source: str):
    """A generated function from its source (``lambda b, n, ...: [...]``), arithmetic of our own expressions."""
    if not source.startswith("lambda "):
        raise ValueError("not a generated function")
    return eval(source)  # noqa: S307 - expressions costmodel printed itself


def _derive(variant, mode, execution, cache_append, form, q_lora) -> tuple[Compiled, dict | None]:
    """The program derived with sympy and compiled; the sources of its functions where they are plain
    arithmetic (None where one needed sympy's lambdify, which is not kept on disk)."""
    from costmodel.counts import symbols as S
    from costmodel.counts.exact import program_counts, sum_steps
    from costmodel.counts.ops import gemm_dims
    from costmodel.counts.program import build_program, op_class

    if variant == "mla":
        from costmodel.counts.mla import ARGS as args
        from costmodel.counts.mla import build_mla_program

        program = build_mla_program(mode, form, q_lora=q_lora, execution=execution)
    else:
        args = tuple(S.SYMBOLS[name] for name in ARG_NAMES)
        program = build_program(variant, mode, cache_append=cache_append, execution=execution)
    report = program_counts(program, simplify=False)  # the program built once, its counts from it
    weights, cache = program.resident_elements()
    gemms = tuple(gemm_dims(o) if o.kind == "einsum" else None for o in program.ops)
    exprs = (
        [o.flops for o in report.ops]
        + [o.memory_elements for o in report.ops]
        + [weights, cache, program.bias_elements()]
    )
    # projection weights are stored in the weight dtype; norm weights (W_*) stay in the activation dtype
    stored = [_stored(o, lambda t: t.name.startswith("P_")) for o in program.ops]
    stored += [_stored(o, lambda t: _is_cache(t, program)) for o in program.ops]
    stored += [_params(o) for o in program.ops]
    if program.summed_over_steps:
        stored = [sum_steps(e) for e in stored]
    return _assemble(
        [o.name for o in report.ops],
        [op_class(o, mode) for o in program.ops],
        [o.einsum for o in report.ops],
        gemms,
        exprs,
        stored,
        args,
    )


@lru_cache(maxsize=64)
def compile_block(block: str, *params) -> Compiled:
    """A block of a model step's ops around attention (:data:`costmodel.counts.step_program.BLOCKS`, built with
    ``params``) compiled into one numpy function of the block's dimensions, kept on disk as programs are.
    Its matrix products (einsums and grouped products) are projections; the other ops keep their kind."""
    key = _cache_key("block", block, *params)
    cached = _load(key)
    if cached is not None:
        return cached
    import sympy

    from costmodel.counts.ops import bias_elements, gemm_dims, grouped_dims
    from costmodel.counts.step_program import BLOCKS

    build, args = BLOCKS[block]
    ops = build(*params)
    gemms = [gemm_dims(o) if o.kind == "einsum" else grouped_dims(o) if o.kind == "grouped" else None for o in ops]
    exprs = [o.flops for o in ops] + [o.memory_elements for o in ops]
    exprs += [sympy.Add(*(_params(o) for o in ops)), sympy.Integer(0), sympy.Add(*(bias_elements(o) for o in ops))]
    stored = (
        [_stored(o, lambda t: t.name.startswith("P_")) for o in ops]
        + [_stored(o, lambda t: t.name.startswith("cache_")) for o in ops]
        + [_params(o) for o in ops]
    )
    compiled, sources = _assemble(
        [o.name for o in ops],
        ["projection" if g else o.kind for o, g in zip(ops, gemms)],
        [o.einsum for o in ops],
        gemms,
        exprs,
        stored,
        args,
        grouped=[o.kind == "grouped" for o in ops],
    )
    if sources is not None:
        _store(key, compiled, sources)
    return compiled


def _assemble(names, kinds, einsums, gemms, exprs, stored, args, grouped=None) -> tuple[Compiled, dict | None]:
    """A :class:`Compiled` from its ops' derived expressions; the sources of its functions where they are plain
    arithmetic (None where one needed sympy's lambdify, which is not kept on disk)."""
    import sympy

    functions = {
        "counts": exprs,
        "gemm_counts": [x for g in gemms if g for x in g] or [sympy.Integer(0)],
        "storage_counts": stored,
    }
    made = {name: _numeric_function(e, args) for name, e in functions.items()}
    compiled = Compiled(
        names=tuple(names),
        kinds=tuple(kinds),
        einsums=tuple(einsums),
        gemms=tuple(g is not None for g in gemms),
        counts=made["counts"][0],
        gemm_counts=made["gemm_counts"][0],
        args=tuple(s.name for s in args),
        storage_counts=made["storage_counts"][0],
        grouped=tuple(grouped or (False,) * len(names)),
    )
    sources = {name: source for name, (_, source) in made.items()}
    return compiled, (sources if all(sources.values()) else None)


def _params(op):
    """The parameters an op reads: its ``P_*`` and ``W_*`` operands' elements."""
    import sympy

    from costmodel.counts.ops import is_weight

    return sympy.Add(*(t.elements for t in op.inputs if is_weight(t)))


def _is_cache(tensor, program) -> bool:
    """A KV-cache tensor (or a view or position of one, or the previous cache a concatenation copies)."""
    base = tensor.name.removeprefix("prev_").split(":")[0].split("[")[0]
    return base in program.cache_names


def _stored(op, kind):
    """Elements of an op's operands (a fused op's: its inputs and output) for which ``kind`` holds."""
    import sympy

    return sympy.Add(*(t.elements for t in (*op.inputs, op.output) if kind(t)))


def _numeric_function(exprs: list, args: tuple):
    """One Python function of ``args`` returning every expression, works on ints, floats and numpy arrays, and
    its source (None where sympy's lambdify was needed).

    The counts are polynomials (with rational coefficients) in the dimensions, so their printed form is
    plain Python arithmetic; this is what ``sympy.lambdify`` would generate, without its start-up cost.
    """
    import sympy

    exprs = [sympy.sympify(e) for e in exprs]  # a size product of no factors is the number 1
    for e in exprs:
        extra = e.free_symbols - set(args)
        if extra or any(
            not (a.is_Add or a.is_Mul or a.is_Pow or a.is_Symbol or a.is_Number) for a in sympy.preorder_traversal(e)
        ):
            return sympy.lambdify(args, exprs, modules="numpy"), None
    body = ", ".join(f"({sympy.sstr(e)})" for e in exprs)
    source = f"lambda {', '.join(s.name for s in args)}: [{body}]"
    return _function(source), source

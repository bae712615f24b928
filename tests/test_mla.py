"""Multi-head latent attention: both forms run in torch give the outputs of an independent implementation,
and their einsum counts equal FlopCounterMode's; the asymptotic form and the command line."""

from __future__ import annotations

import json

import pytest
import sympy
from click.testing import CliRunner

from costmodel import derive
from costmodel.cli.commands import main
from costmodel.counts import symbols as S
from costmodel.counts.mla import build_mla_program

torch = pytest.importorskip("torch")
from tests.test_counts import _torch_flops  # noqa: E402 - FlopCounterMode's count of one einsum op

#: tiny dims: b, n, m, d, h, k (nope), v, c (latent), p (rotary), l (query latent)
DIMS = {"b": 2, "n": 3, "m": 5, "d": 12, "h": 3, "k": 4, "v": 5, "c": 6, "p": 2, "l": 7}
#: the parts of a composite last axis, in storage order (costmodel.counts.mla's index letters e, f, j)
PARTS = {"e": "kp", "f": "cp", "j": "kv"}


def _vals(dims=DIMS):
    return {S.SYMBOLS[k]: v for k, v in dims.items()}


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _weights(dims, q_lora):
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64) / shape[0] ** 0.5  # noqa: E731
    D = dims
    w = {
        "P_kva": r(D["d"], D["c"] + D["p"]),
        "W_kvnorm": 1 + r(D["c"]) / 4,
        "P_kvb": r(D["c"], D["h"], D["k"] + D["v"]),
        "P_o": r(D["h"], D["v"], D["d"]),
    }
    if q_lora:
        w |= {"P_qa": r(D["d"], D["l"]), "W_qnorm": 1 + r(D["l"]) / 4, "P_qb": r(D["l"], D["h"], D["k"] + D["p"])}
    else:
        w["P_q"] = r(D["d"], D["h"], D["k"] + D["p"])
    return w


def reference(x, memory, w, dims, q_lora, decode):
    """MLA as DeepSeek-V2 writes it (Section 2.1), independently of the programs: queries, a normed latent
    and a rotary key per position, per-head keys [k_nope, k_rope] and values from the latent, softmax
    attention scaled by 1/sqrt(k + p). ``decode``: x is [b, d] and attends to memory [b, m, d] and itself."""
    D = dims
    if decode:
        memory = torch.cat([memory, x[:, None]], 1)
        x = x[:, None]
    q_in = _rms(x @ w["P_qa"], w["W_qnorm"]) if q_lora else x
    q = torch.einsum("bnx,xhe->bhne", q_in, w["P_qb"] if q_lora else w["P_q"])
    kv = memory @ w["P_kva"]
    latent, k_rope = _rms(kv[..., : D["c"]], w["W_kvnorm"]), kv[..., D["c"] :]
    up = torch.einsum("bmc,chj->bhmj", latent, w["P_kvb"])
    k_nope, v = up[..., : D["k"]], up[..., D["k"] :]
    keys = torch.cat([k_nope, k_rope[:, None].expand(-1, D["h"], -1, -1)], -1)
    scores = torch.einsum("bhne,bhme->bhnm", q, keys) / (D["k"] + D["p"]) ** 0.5
    if not decode:
        n, m = scores.shape[-2:]
        scores = scores + torch.triu(torch.full((n, m), -1e9, dtype=scores.dtype), diagonal=1 + m - n)
    o = torch.einsum("bhnm,bhmv->bhnv", scores.softmax(-1), v)
    y = torch.einsum("bhnv,hvd->bnd", o, w["P_o"])
    return y[:, 0] if decode else y


class Interpreter:
    """Runs every op of an MLA program by its own einsum equation, elementwise kind or copy. A name
    ``T:x`` is part x of T's composite last axis (``KV:c``: the latents of the cache rows)."""

    def __init__(self, dims: dict, weights: dict):
        self.dims, self.env = dims, dict(weights)
        self.layout = {"P_kva": "df", "P_kvb": "chj", "P_q": "dhe", "P_qb": "lhe", "KV": "bmf"}

    def _part(self, base: str, part: str) -> slice:
        letter = next(i for i in self.layout[base] if i in PARTS)
        order = PARTS[letter]
        start = sum(self.dims[a] for a in order[: order.index(part)])
        return slice(start, start + self.dims[part])

    def read(self, name: str):
        if name == "q_cat":  # the latent query and the rotary part of q, one buffer
            return torch.cat([self.env["q_cat:c"], self.read("q:p")], -1)
        base, _, part = name.partition(":")
        return self.env[base][..., self._part(base, part)] if part else self.env[base]

    def write(self, tensor, value) -> None:
        base, _, part = tensor.name.partition(":")
        if not part or base == "q_cat":
            self.env[tensor.name] = value
            self.layout.setdefault(tensor.name, tensor.indices)
            return
        full = self.env[base].clone()  # written in place into part of a tensor
        full[..., self._part(base, part)] = value
        self.env[base] = full

    def run(self, program, x, memory, decode: bool):
        dims, env = self.dims, self.env
        env["x" if decode else "X"], env["M"] = x, memory
        if decode:  # the cache holds the memory's rows, computed the same way
            kv = memory @ env["P_kva"]
            env["KV"] = torch.cat([_rms(kv[..., : dims["c"]], env["W_kvnorm"]), kv[..., dims["c"] :]], -1)
        for op in program.ops:
            if op.kind == "einsum":
                result = torch.einsum(op.einsum, *(self.read(t.name) for t in op.inputs))
            elif op.name in ("kv_norm", "q_norm"):
                result = _rms(self.read(op.inputs[0].name), env[op.inputs[1].name])
            elif op.name == "scale":
                result = env["logits"] / (dims["k"] + dims["p"]) ** 0.5
            elif op.name == "mask":
                n, m = env["logits"].shape[-2:]
                result = env["logits"] + torch.triu(torch.full((n, m), -1e9, dtype=torch.float64), diagonal=1 + m - n)
            elif op.name == "softmax":
                result = env["logits"].softmax(-1)
            elif op.name == "kv_append":
                env["KV"] = torch.cat([env["KV"], env["kv_new"][:, None]], 1)
                continue
            elif op.name == "k_concat":
                rope = self.read("KV:p")[:, None].expand(-1, dims["h"], -1, -1)
                result = torch.cat([self.read("KVup:k"), rope], -1)
            else:
                raise AssertionError(f"no torch form for {op.name}")
            self.write(op.output, result)
        return env["y"]


@pytest.mark.parametrize("q_lora", [False, True])
@pytest.mark.parametrize("mode", ["incremental", "batched"])
def test_absorbed_and_naive_forms_give_the_reference_outputs(mode, q_lora):
    decode = mode == "incremental"
    g = torch.Generator().manual_seed(1)
    D = DIMS
    w = _weights(D, q_lora)
    x = torch.randn((D["b"], D["d"]) if decode else (D["b"], D["m"], D["d"]), generator=g, dtype=torch.float64)
    memory = torch.randn(D["b"], D["m"], D["d"], generator=g, dtype=torch.float64)
    if not decode:
        memory = x  # self-attention over the prompt (n = m)
    dims = {**D, "n": D["m"]} if not decode else D
    expected = reference(x, memory, w, dims, q_lora, decode)
    outputs = {
        form: Interpreter(dims, w).run(build_mla_program(mode, form, q_lora=q_lora), x, memory, decode)
        for form in ("naive", "absorbed")
    }
    for form, y in outputs.items():
        torch.testing.assert_close(y, expected, rtol=1e-10, atol=1e-10, msg=form)


@pytest.mark.parametrize("form", ["naive", "absorbed"])
@pytest.mark.parametrize("mode", ["incremental", "batched"])
@pytest.mark.parametrize("q_lora", [False, True])
def test_einsum_counts_equal_flop_counter(form, mode, q_lora):
    vals = _vals()
    report = {c.name: c for c in derive("mla", mode, form=form, q_lora=q_lora).ops}
    einsums = [op for op in build_mla_program(mode, form, q_lora=q_lora).ops if op.kind == "einsum"]
    assert len(einsums) >= 5
    for op in einsums:
        assert report[op.name].flops.subs(vals) == _torch_flops(op, vals), op.name


def test_absorbed_decode_reads_the_latent_cache_once_and_naive_materialises_heads():
    vals = _vals()
    absorbed = {c.name: c for c in derive("mla", "incremental", form="absorbed", execution="fused").ops}
    naive = {c.name: c for c in derive("mla", "incremental", form="naive").ops}
    b, m, c, p, h, k, v = (DIMS[x] for x in "bmcphkv")
    # the fused kernel reads the query [b, h, c + p] and the cache rows [b, m + 1, c + p] once, writes [b, h, c]
    assert absorbed["attention"].memory_elements.subs(vals) == b * h * (c + p) + b * (m + 1) * (c + p) + b * h * c
    # the naive form's up-projection writes every head's key and value for every cached position
    assert naive["kv_up"].flops.subs(vals) == 2 * b * (m + 1) * c * h * (k + v)


def test_asymptotic_ratio_of_absorbed_decode():
    out = json.loads(CliRunner().invoke(main, ["derive", "--variant", "mla", "--asymptotic", "--json"]).output)
    memory = sympy.sympify(out["asymptotic"]["memory_elements"], locals=S.SYMBOLS)
    flops = sympy.sympify(out["asymptotic"]["flops"], locals=S.SYMBOLS)
    # the cache (b n c) is shared by the h heads: at long contexts memory/arithmetic tends to 1/h + 1/c
    limit = sympy.limit(memory / flops, S.n, sympy.oo)
    assert sympy.simplify(limit - (1 / S.h + 1 / S.c)) == 0
    assert any("p <= k" in a for a in out["assumptions"])
    # beside it, the paper's ratios of the grouped-query family (Shazeer 2019, Sections 2.4.1 and 3.1)
    beside = {v: sympy.sympify(r, locals=S.SYMBOLS) for v, r in out["asymptotic"]["beside"].items()}
    assert sympy.simplify(beside["mha"] - (S.n / S.d + 1 / S.b)) == 0
    assert set(beside) == {"mha", "gqa", "mqa"}


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--variant", "gqa", "--kv-rank", "512"], "--kv-rank applies to --variant mla only"),
        (["--variant", "mla", "--groups", "2"], "groups 2 is only valid with variant gqa"),
        (["--variant", "mla", "--cache-append", "concat"], "mla appends its latent in place"),
        (["--variant", "mla", "--mode", "single-query"], "unknown mode for mla 'single-query'"),
        (["--variant", "mla", "--q-rank", "64"], "--q-rank needs --q-lora"),
    ],
)
def test_derive_mla_errors(args, expected):
    result = CliRunner().invoke(main, ["derive", *args])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code != 0 and len(errors) == 1 and expected in errors[0], result.output

"""Named symbolic dimensions and dtype sizes.

The dimension names follow Shazeer 2019 ("Fast Transformer Decoding", arXiv:1911.02150), Section 2,
plus ``g`` for the number of key/value heads of grouped-query attention (Ainslie et al. 2023):

====  ==========================================================
b     batch size
n     query positions (tokens generated, in ``generate`` mode)
m     memory positions (cached positions before a decode step)
d     model dimension
h     query heads
g     key/value heads (``g = h`` is MHA, ``g = 1`` is MQA)
k     key (and query) dimension per head, ``d / h`` by default
v     value dimension per head, ``d / h`` by default
c     latent (compressed key/value) rank of multi-head latent attention
p     decoupled rotary key dimension of multi-head latent attention
l     query latent rank of multi-head latent attention (when queries are compressed)
====  ==========================================================

All are positive integers. Expressions that leave this package as strings parse back with
``sympy.sympify(text, locals=SYMBOLS)`` (or plain ``sympify``, which yields symbols of the same names
without the positivity assumptions).
"""

from __future__ import annotations

import sympy

b, n, m, d, h, g, k, v = sympy.symbols("b n m d h g k v", positive=True, integer=True)
c, p, l = sympy.symbols("c p l", positive=True, integer=True)  # noqa: E741 - the dimension's name

#: Symbol name -> symbol, for ``sympify(text, locals=SYMBOLS)``.
SYMBOLS: dict[str, sympy.Symbol] = {s.name: s for s in (b, n, m, d, h, g, k, v, c, p, l)}

#: The meaning of each dimension, for help texts and reports.
DIM_DOC: dict[str, str] = {
    "b": "batch size",
    "n": "query positions",
    "m": "memory (cached) positions",
    "d": "model dimension",
    "h": "query heads",
    "g": "key/value heads",
    "k": "key dimension per head",
    "v": "value dimension per head",
    "c": "latent key/value rank (MLA)",
    "p": "decoupled rotary key dimension (MLA)",
    "l": "query latent rank (MLA)",
}

"""One engine iteration priced: a mixed batch of decode tokens (one per running sequence, each after its own
cached positions) and prefill chunks (a slice of a prompt, after the prompt's earlier chunks), through the
same ops and the same pricing path as a model step (:mod:`costmodel.model.step`, :func:`costmodel.price.op.price`).

An iteration's ops split three ways:

- **per token**: every op whose cost follows the tokens in the batch (projections, feed-forward and expert
  blocks, norms, rotary embeddings, the cache write, the tensor-parallel all-reduces): the decode step's ops
  over ``T`` tokens;
- **attention over the cache**: the decode attention kernel of ``D`` sequences at their mean context, and for
  each prefill chunk ``[s, s + c)`` of a prompt the causal prefill attention ``A(s + c) - A(s)`` (``A(n)``: the
  attention of an ``n``-token prompt, so the chunks of one prompt add up to the whole prompt's attention);
- **the head**: final norm and output projection of the rows that produce a token (decode sequences and prompts
  whose last chunk ran).

Under attention data parallel the routed experts (and the all-gather and reduce-scatter around them) see the
tokens of every group: ``G`` tokens, this group's own plus what the others carry, which the caller gives
(``others``: the tokens each other group runs; by default as many as this one). They are priced on their own grid
of ``G``.

Under pipeline parallel over ``p`` stages the engine's batch moves through the stages as ``k = min(p, sequences)``
micro-batches: each sequence gets a token per round, and a round lasts one micro-batch's way through every stage,
the whole model's step over ``1/k`` of the batch (its weights read once per micro-batch, its token work and
attention split), with the sends between stages, and the head of the last stage once per micro-batch.

Each part is priced at grid points of its sizes when the table is built, and interpolated linearly in between
(:data:`GRID_POINTS` per doubling); ``exact`` prices a given iteration without the grid, for checks.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from costmodel.hardware.power import PowerModel
from costmodel.model.engine_ops import COLLECTIVES, SELF_ATTENTION
from costmodel.model.presets import ModelPreset
from costmodel.model.pricing import Pricing
from costmodel.model.step import op_time, phase_ops

#: Grid points per doubling of each size (and every size up to 16 exactly).
GRID_POINTS = 6


def _grid(top: int) -> np.ndarray:
    """1..16 then GRID_POINTS points per doubling up to ``top`` (included)."""
    top = max(int(top), 1)
    small = np.arange(1, min(top, 16) + 1)
    if top <= 16:
        return small.astype(float)
    steps = int(np.ceil(np.log2(top / 16) * GRID_POINTS))
    big = np.unique(np.round(16 * 2 ** (np.arange(1, steps + 1) / GRID_POINTS)))
    return np.unique(np.concatenate([small, big[big < top], [top]])).astype(float)


#: The ops of a mixture-of-experts layer that run over the gathered tokens of every attention-data-parallel group:
#: the routed experts' GEMMs and activation, and the collectives that gather and scatter the tokens.
GATHERED = ("experts_gate_up", "experts_gate", "experts_up", "experts_act", "experts_down")
GATHER_COLLECTIVES = ("moe_dispatch", "moe_combine")


def _kind(r) -> str:
    if r.section == COLLECTIVES:
        return "moe_comm" if r.name in GATHER_COLLECTIVES else "comm"
    if r.section == "experts" and r.name in GATHERED:
        return "moe"
    if r.section == "head" and r.name != "embed":
        return "head"
    if r.section in SELF_ATTENTION and not r.weighted:
        return "attention"
    return "token"


KINDS = ("token", "attention", "head", "comm", "moe", "moe_comm")


def _parts(m: ModelPreset, pr: Pricing, phase: str, batch: int, context, work: dict | None = None) -> dict:
    """A phase's time split by :func:`_kind` (arrays where ``context`` is); ``work``, where given and the device has
    a power model, gets each kind's work energy above the board's running power (:mod:`costmodel.hardware.power`,
    at the constants' central values), as (the SMs' joules, the bytes' joules, their sum capped at the board's
    limit)."""
    out: dict = dict.fromkeys(KINDS, 0.0)
    pm = PowerModel.of(pr.hw) if work is not None else None
    if pm is not None:
        work.update({k: (0.0, 0.0, 0.0) for k in KINDS})
    for s in phase_ops(m, pr, phase, batch, context, 1):
        t = np.asarray(op_time(s, pr).time, float)
        kind = _kind(s)
        out[kind] = out[kind] + t * s.count
        if pm is not None:
            work[kind] = tuple(a + b * s.count for a, b in zip(work[kind], pm.capped_work_j(s.op, t)))
    return out


@dataclass(frozen=True)
class IterationTime:
    """One iteration's time, split: prefill (its tokens' share of the per-token ops, and the chunks'
    attention), decode (its tokens' share, the decode attention, the head) and communication."""

    prefill_s: float
    decode_s: float
    comm_s: float

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s + self.comm_s


class IterationTable:
    """Every part of an iteration priced on grids up to ``max_tokens`` tokens, ``max_seqs`` sequences and
    ``max_context`` cached positions; :meth:`time` interpolates."""

    def __init__(self, m: ModelPreset, pr: Pricing, *, max_tokens: int, max_seqs: int, max_context: int):
        self.t_grid = _grid(max_tokens)
        self.d_grid = _grid(max_seqs)
        self.c_grid = np.concatenate([[0.0], _grid(max_context)])
        # each part over its whole grid at once: the step's compiled programs evaluate arrays of sizes
        w_tokens, w_seqs, w_prompts = {}, {}, {}  # the parts' work energies, where the device has a power model
        by_tokens = _parts(m, pr, "decode", self.t_grid.astype(np.int64), 1, w_tokens)
        self.token = np.broadcast_to(by_tokens["token"], self.t_grid.shape).astype(float)
        self.comm = np.broadcast_to(by_tokens["comm"], self.t_grid.shape).astype(float)
        # the routed experts over G = dp x T gathered tokens (dp = 1: G = T, and they join the per-token ops)
        self.dp, self.pp = pr.dp, pr.pp
        self.g_grid = self.t_grid * self.dp
        self.moe = np.broadcast_to(by_tokens["moe"], self.t_grid.shape).astype(float)
        self.moe_comm = np.broadcast_to(by_tokens["moe_comm"], self.t_grid.shape).astype(float)
        # one decode step per sequence count and context: its head and its attention
        ctx = np.maximum(self.c_grid, 1).astype(np.int64)
        by_seqs = _parts(m, pr, "decode", self.d_grid.astype(np.int64)[:, None], ctx[None, :], w_seqs)
        shape = (len(self.d_grid), len(ctx))
        self.head = np.broadcast_to(by_seqs["head"], shape)[:, 0].astype(float)
        self.decode_attention = np.broadcast_to(by_seqs["attention"], shape).astype(float)
        prompts = _parts(m, pr, "prefill", 1, self.c_grid[1:].astype(np.int64), w_prompts)["attention"]
        self.prompt_attention = np.concatenate([[0.0], np.broadcast_to(prompts, self.c_grid[1:].shape)])
        # each part's work energy (SMs, bytes, capped sum) on the part's grid, as its times are kept
        self.work = None
        if w_tokens:
            t_shape, d_shape = self.t_grid.shape, shape
            on = lambda w, kind, sh: np.stack([np.broadcast_to(x, sh).astype(float) for x in w[kind]])  # noqa: E731
            parts = {k: on(w_tokens, k, t_shape) for k in ("token", "comm", "moe", "moe_comm")}
            prompt = on(w_prompts, "attention", self.c_grid[1:].shape)
            # each part's time row and its work rows (SMs, bytes, capped) stacked, so that one search on the grid
            # prices them all at an operating point; the per-token ops' and their communication's together
            self.work = {
                "per_token": np.vstack([self.token, self.comm, parts["token"], parts["comm"]]),
                "routed": np.vstack([self.moe, self.moe_comm, parts["moe"], parts["moe_comm"]]),
                "head": np.vstack([self.head, on(w_seqs, "head", d_shape)[:, :, 0]]),
                "decode_attention": np.concatenate([self.decode_attention[None], on(w_seqs, "attention", d_shape)]),
                "prompt_attention": np.vstack(
                    [self.prompt_attention, np.concatenate([np.zeros((3, 1)), prompt], axis=1)]
                ),
            }
            self.routed = bool(np.any(self.work["routed"]))  # a dense model's routed experts do nothing
            # each grid point's values of every row, as lists; the decode attention's per sequence count, as it is
            # first asked for (few of them are)
            self._attention = self.work.pop("decode_attention")
            self.work = {k: v.T.tolist() for k, v in self.work.items()}
            self._attention_cols: dict[int, list] = {}
        self._rounds: dict = {}  # (tokens, sequences, others) -> _round's answer, asked again and again
        self._lists: dict = {}  # id of a grid -> it as a list, for one number's interpolation and search
        self.decode_rows = self.decode_attention.tolist()  # each sequence count's row, as lists

    def _listed(self, a: np.ndarray) -> list:
        """``a`` (one of the table's grids) as a list, made once; the array is kept beside it, so its id is not
        reused by another."""
        got = self._lists.get(id(a))
        if got is None or got[0] is not a:
            got = self._lists[id(a)] = (a, a.tolist())
        return got[1]

    # -- the parts, interpolated ------------------------------------------------------------------------
    def _on(self, grid: np.ndarray, values: np.ndarray, x):
        """Linear interpolation, 0 at 0, extrapolated linearly past the last point."""
        if isinstance(x, (int, float, np.number)) or not np.ndim(x):  # one number (each simulated iteration's)
            x = float(x)
            if x <= 0:
                return 0.0
            xs, ys = self._listed(grid), self._listed(values)
            if x > xs[-1] and len(xs) > 1:
                return ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (x - xs[-1])
            return interp(x, xs, ys)
        x = np.asarray(x, float)
        y = np.interp(x, grid, values)
        if len(grid) > 1:
            slope = (values[-1] - values[-2]) / (grid[-1] - grid[-2])
            y = np.where(x > grid[-1], values[-1] + slope * (x - grid[-1]), y)
        return np.where(x <= 0, 0.0, y)

    def per_token(self, tokens, others=None):
        """(compute, communication) of the ops that follow the tokens: ``tokens`` of this group, and under attention
        data parallel ``others`` per other group (default: as many as this one) through the routed experts."""
        gathered = (
            np.asarray(tokens, float) * self.dp
            if others is None
            else np.asarray(tokens, float) + (self.dp - 1) * np.asarray(others, float)
        )
        return (
            self._on(self.t_grid, self.token, tokens) + self._on(self.g_grid, self.moe, gathered),
            self._on(self.t_grid, self.comm, tokens) + self._on(self.g_grid, self.moe_comm, gathered),
        )

    def head_time(self, rows):
        return self._on(self.d_grid, self.head, rows)

    def decode_attention_time(self, seqs: float, mean_context):
        """Decode attention of ``seqs`` sequences at ``mean_context`` cached positions (an array of contexts
        gives an array of times)."""
        if seqs <= 0:
            return np.zeros(np.shape(mean_context))

        one = isinstance(mean_context, (int, float, np.number))

        def row(i):
            if one:  # one number (each simulated iteration's): no arrays around it
                return interp(float(mean_context), self._listed(self.c_grid), self.decode_rows[i])
            return np.interp(mean_context, self.c_grid, self.decode_attention[i])

        return self._by_seqs(seqs, row)

    def _by_seqs(self, seqs: float, row):
        """``row(i)`` (the i-th sequence count's value) at ``seqs`` sequences (:meth:`_seq_weights`)."""
        i, a, b = self._seq_weights(seqs)
        return row(i) * a if b is None else row(i) * a + row(i + 1) * b

    def _seq_weights(self, seqs: float) -> tuple[int, float, float | None]:
        """(i, the weight of the i-th sequence count, that of the next or None) at ``seqs`` sequences: linear between
        the two counts around it, and in proportion below the first."""
        d = self._listed(self.d_grid)
        if len(d) == 1 or seqs <= d[0]:
            return 0, seqs / d[0], None
        i = min(max(bisect.bisect_left(d, seqs) - 1, 0), len(d) - 2)
        w = (seqs - d[i]) / (d[i + 1] - d[i])
        return i, 1 - w, w

    def prompt_attention_time(self, n):
        """Attention of the first ``n`` positions of a prompt (causal): a chunk [s, s+c) costs A(s+c) - A(s)."""
        return self._on(self.c_grid, self.prompt_attention, n)

    def time(
        self,
        *,
        decode_seqs: int,
        decode_context_sum: float,
        chunks: list[tuple[int, int]],
        outputs: int,
        others: float | None = None,
        slots: int = 1,
    ) -> IterationTime:
        """An iteration of ``decode_seqs`` decode tokens after ``decode_context_sum`` cached positions in all,
        prefill ``chunks`` (start, length), and ``outputs`` rows through the head (``others``:
        :meth:`per_token`). ``slots``: positions each decode sequence scores (a speculative verify step's
        ``k + 1``: every per-token op sees them all, the attention reads each sequence's cache once for them)."""
        prefill_tokens = sum(c for _, c in chunks)
        tokens = decode_seqs * slots + prefill_tokens
        if tokens == 0:
            return IterationTime(0.0, 0.0, 0.0)
        k, tok, comm = self._round(tokens, decode_seqs + len(chunks), others)
        share = prefill_tokens / tokens
        chunk_attention = (
            sum(float(self.prompt_attention_time(s + c) - self.prompt_attention_time(s)) for s, c in chunks) / k
        )
        dec_attention = (
            float(self.decode_attention_time(decode_seqs / k, decode_context_sum / decode_seqs)) if decode_seqs else 0.0
        )
        head = float(self.head_time(outputs / k)) * (1 + (k - 1) * (outputs > 0))
        return IterationTime(
            prefill_s=tok * share + chunk_attention, decode_s=tok * (1 - share) + dec_attention + head, comm_s=comm
        )

    def _round(self, tokens, sequences: int, others) -> tuple[int, float, float]:
        """(micro-batches, compute, communication) of the per-token ops of ``tokens`` tokens of ``sequences``
        sequences: a pipeline runs them in one micro-batch per stage while there are sequences for them (one
        without pipeline parallel), each the model's step over its share."""
        key = (tokens, sequences, others)
        got = self._rounds.get(key)
        if got is None:
            k = max(1, min(self.pp, sequences))
            tok, comm = self.per_token(tokens / k, None if others is None else others / k)
            if len(self._rounds) > 100_000:
                self._rounds.clear()
            got = self._rounds[key] = (k, float(tok), float(comm))
        return got

    def others_for(self, running: float, prompt_per_output: float) -> float | None:
        """Under attention data parallel, the tokens each other group runs in an iteration, taken as a copy of
        this group in the mean: as many running sequences, each decoding a token and prefilling its share of a
        prompt (mean prompt over mean output tokens). None with one group."""
        return running * (1 + prompt_per_output) if self.dp > 1 else None

    # -- the work's power at an operating point (costmodel.engine.energy) -------------------------------------
    def _at(self, grid: np.ndarray, cols: list, x: float, clamp: bool = False) -> list:
        """Every row at one number ``x`` (``cols``: the rows' values at each point of ``grid``, as lists), with one
        search for all of them: as :meth:`_on` interpolates each (0 at 0, the first value below the first point,
        linear past the last), or with ``clamp`` as :func:`interp` does (the end values outside the grid). Plain
        floats: a handful of rows is quicker in Python than in numpy, and the arithmetic is the same."""
        xs, x = self._listed(grid), float(x)
        if x <= 0 and not clamp:
            return [0.0] * len(cols[0])
        if len(xs) == 1 or x <= xs[0]:
            return cols[0]
        if x >= xs[-1] and clamp:
            return cols[-1]
        j = min(bisect.bisect_right(xs, x) - 1, len(xs) - 2)
        w = (x - xs[j]) / (xs[j + 1] - xs[j])
        return [a + (b - a) * w for a, b in zip(cols[j], cols[j + 1])]

    def operating_work(self, *, seqs: float, context: float, chunk: float, prompt: float) -> dict | None:
        """The work joules and seconds of one decode iteration of ``seqs`` sequences at ``context`` cached positions
        (per-token ops, decode attention, head), of ``chunk`` prefilled tokens of ``prompt``-token prompts (their
        per-token ops and their share of the prompts' attention) and of the decode iteration's communication:
        ``{"decode" | "prefill" | "comm": (work (SMs, bytes, capped), seconds)}``; None without a power model."""
        if self.work is None:
            return None
        seqs, chunk, prompt = max(seqs, 1.0), max(chunk, 1.0), max(prompt, 1.0)
        w = self.work
        # rows: [time, communication's time, the ops' work (3), the communication's work (3)] per token
        by_seqs, by_chunk = self._at(self.t_grid, w["per_token"], seqs), self._at(self.t_grid, w["per_token"], chunk)
        if self.routed:
            add = lambda a, b: [x + y for x, y in zip(a, b)]  # noqa: E731
            by_seqs = add(by_seqs, self._at(self.g_grid, w["routed"], seqs * self.dp))
            by_chunk = add(by_chunk, self._at(self.g_grid, w["routed"], chunk * self.dp))
        attention = self._decode_attention_at(seqs, context)
        head = self._at(self.d_grid, w["head"], seqs)
        decode = [a + b + c for a, b, c in zip((by_seqs[k] for k in (0, 2, 3, 4)), attention, head)]
        share = chunk / prompt  # the chunk's share of its prompts' attention
        prompts = self._at(self.c_grid, w["prompt_attention"], prompt)
        prefill = [a + b * share for a, b in zip((by_chunk[k] for k in (0, 2, 3, 4)), prompts)]
        return {
            "decode": (decode[1:], decode[0]),
            "prefill": (prefill[1:], prefill[0]),
            "comm": (by_seqs[5:], by_seqs[1]),
        }

    def _decode_attention_at(self, seqs: float, context: float) -> list:
        """The decode attention's time and work at ``seqs`` sequences and ``context``, the sequence counts around it
        weighed as :meth:`_by_seqs` weighs them (and the context clamped as :meth:`decode_attention_time` clamps it)."""

        def at(i: int) -> list:
            if i not in self._attention_cols:
                self._attention_cols[i] = self._attention[:, i, :].T.tolist()
            return self._at(self.c_grid, self._attention_cols[i], context, clamp=True)

        i, a, b = self._seq_weights(seqs)
        if b is None:
            return [v * a for v in at(i)]
        return [x * a + y * b for x, y in zip(at(i), at(i + 1))]

    def decode_comm(self, tokens: int, others: float | None = None, seqs: int | None = None) -> float:
        """The communication of one decode-only iteration of ``tokens`` tokens (of ``seqs`` sequences: as many as
        tokens unless a speculative verify step scores several per sequence)."""
        return self._round(tokens, seqs or tokens, others)[2]

    def decode_run(
        self, seqs: int, context_sum: float, steps: int, others: float | None = None, per_step=1.0, slots: int = 1
    ) -> np.ndarray:
        """The times of ``steps`` decode-only iterations of ``seqs`` sequences, the first after
        ``context_sum`` cached positions in all (each step adds ``per_step`` per sequence, one unless speculative;
        ``slots``: positions each step scores per sequence, :meth:`time`; ``others``: :meth:`per_token`)."""
        k, tok, comm = self._round(seqs * slots, seqs, others)
        mean = (context_sum + seqs * per_step * np.arange(steps)) / seqs
        head = float(self.head_time(seqs * slots / k)) * k
        return tok + comm + self.decode_attention_time(seqs / k, mean) + head


def interp(x: float, xs: list, ys: list) -> float:
    """``np.interp(x, xs, ys)`` for one number, the same arithmetic (numpy's arr_interp: the end values outside
    the grid, a grid point's own value on it, else the slope from the point below) without an array around it."""
    if x < xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    j = bisect.bisect_right(xs, x) - 1
    if xs[j] == x:
        return ys[j]
    return (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]) * (x - xs[j]) + ys[j]


def exact_time(m: ModelPreset, pr: Pricing, *, decode_seqs: int, decode_context: int, prompt: int) -> float:
    """A pure decode step (``prompt`` 0) or a lone whole prompt (``decode_seqs`` 0) priced without a grid."""
    if prompt:
        return float(sum(_parts(m, pr, "prefill", 1, prompt).values()))
    p = _parts(m, pr, "decode", decode_seqs, decode_context)
    return float(sum(p.values()))

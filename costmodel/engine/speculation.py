"""Speculative decoding as the engines run it: a proposer drafts ``k`` tokens per running sequence, one verify step of
the target model scores all ``k + 1`` positions at once, and the accepted drafts plus the target's own next token
come out of it.

Per decode iteration (:class:`costmodel.engine.queue.Engine`), a sequence

- takes ``k + 1`` tokens of the token budget and the KV slots of ``k + 1`` positions (the drafts' entries are written
  and the rejected ones overwritten later: vLLM's lookahead slots);
- costs the target model's step over ``k + 1`` tokens per sequence (every per-token op, the head of every position;
  the attention reads the sequence's cache once for all ``k + 1`` queries, :meth:`IterationTable.time`) plus the
  proposer's: ``k`` passes of the MTP or EAGLE head (its decoder layers and the output head over one token per
  sequence), ``k`` decode steps of a draft model, or nothing on the GPU for n-gram lookup;
- produces on average the acceptance length ``a`` tokens (``1 <= a <= k + 1``, the bonus token included): given, or
  from per-position acceptance probabilities ``p_1..p_k`` as ``1 + sum_i prod_{j<=i} p_j`` (a draft is kept only if
  every earlier one was). A sequence's ``s``-th verify step brings it ``floor(a s) - floor(a (s - 1))`` tokens, so
  ``a`` is the mean exactly and every count stays whole.

The engines' spellings are taken: vLLM's ``--speculative-config`` JSON (``method``: ``mtp``/``deepseek_mtp``,
``eagle``, ``eagle3``, ``ngram``, ``draft_model``; ``num_speculative_tokens``; ``model``), SGLang's
(``speculative_algorithm``: NEXTN, EAGLE, EAGLE3, NGRAM, STANDALONE; ``speculative_num_draft_tokens``, which
counts the verified positions, ``k + 1``; ``speculative_num_steps``) and TensorRT-LLM's (``decoding_type``: MTP,
Eagle, NGram, DraftTarget; ``num_nextn_predict_layers`` or ``max_draft_len``). No engine documents a default
acceptance: it depends on the model, the data and the drafter, so it is always asked for.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from costmodel.core.errors import CostModelError

#: Every engine's name of a method -> ours.
METHODS = {
    "mtp": "mtp",
    "deepseek_mtp": "mtp",
    "nextn": "mtp",
    "eagle": "eagle",
    "eagle3": "eagle",
    "ngram": "ngram",
    "draft_model": "draft",
    "draft": "draft",
    "standalone": "draft",
    "drafttarget": "draft",
    "draft_target": "draft",
}
#: The keys that give the number of drafted tokens, in each engine's spelling, and what to add to get ``k``.
DRAFT_KEYS = {
    "num_speculative_tokens": 0,
    "speculative_num_steps": 0,
    "num_nextn_predict_layers": 0,
    "max_draft_len": 0,
    "speculative_num_draft_tokens": -1,  # SGLang counts the verified positions, the bonus one included
}
#: The keys that name the method.
METHOD_KEYS = ("method", "speculative_algorithm", "decoding_type")


@dataclass(frozen=True)
class Speculation:
    """``k`` drafted tokens per step by ``method`` (mtp, eagle, ngram or draft; ``draft_model`` a preset id for
    draft), ``acceptance`` the mean tokens a verify step yields (the bonus included), ``layers``: the decoder layers
    of an MTP or EAGLE head (one)."""

    method: str
    k: int
    acceptance: float
    draft_model: str | None = None
    layers: int = 1

    @property
    def slots(self) -> int:
        """Positions one verify step scores per sequence, and KV slots it writes: ``k + 1``."""
        return self.k + 1

    def tokens(self, steps):
        """Tokens ``steps`` verify steps of one sequence have yielded (``floor(a steps)``; arrays work)."""
        return _floor(self.acceptance, steps)

    def steps_for(self, done_steps, tokens_left):
        """The verify steps a sequence that has run ``done_steps`` needs for ``tokens_left`` more tokens."""
        import numpy as np

        got = _floor(self.acceptance, done_steps)
        return np.ceil((got + np.asarray(tokens_left) - 1e-9) / self.acceptance - done_steps).astype(np.int64)

    def describe(self) -> str:
        what = {
            "mtp": "MTP head",
            "eagle": "EAGLE head",
            "ngram": "n-gram lookup",
            "draft": f"draft {self.draft_model}",
        }
        return (
            f"speculative decoding: {what[self.method]} drafts {self.k} token(s) per step, a verify step scores "
            f"{self.slots} positions per sequence and yields {self.acceptance:g} tokens on average (as given)"
        )


def _floor(a: float, steps):
    import numpy as np

    return np.floor(np.asarray(steps, float) * a + 1e-9).astype(np.int64)


def parse(text: str | dict | None, acceptance_length: float | None = None, acceptance_rates=None) -> Speculation | None:
    """The speculation a ``--speculative-config`` JSON (any engine's spelling) and the acceptance describe; None when
    ``text`` is None (and then no acceptance may be given)."""
    if text is None:
        if acceptance_length is not None or acceptance_rates:
            raise CostModelError("--acceptance-length and --acceptance-rates go with --speculative-config")
        return None
    try:
        config = json.loads(text) if isinstance(text, str) else dict(text)
    except json.JSONDecodeError as err:
        raise CostModelError(f"--speculative-config is not JSON: {err.msg} ({text[:60]!r})") from None
    if not isinstance(config, dict):
        raise CostModelError(f"--speculative-config must be a JSON object, got {text[:60]!r}")
    named = [config[key] for key in METHOD_KEYS if key in config]
    if not named or str(named[0]).lower() not in METHODS:
        raise CostModelError(
            f"--speculative-config: the method {named[0] if named else '(none)'!r} is not known; known: "
            f"{', '.join(sorted(METHODS))} (as method, speculative_algorithm or decoding_type)"
        )
    method = METHODS[str(named[0]).lower()]
    ks = [int(config[key]) + add for key, add in DRAFT_KEYS.items() if key in config]
    if not ks or ks[0] < 1 or ks[0] > 16:
        raise CostModelError(
            "--speculative-config: give the drafted tokens, 1 to 16 (num_speculative_tokens; SGLang's "
            "speculative_num_steps or speculative_num_draft_tokens; TensorRT-LLM's max_draft_len)"
        )
    k = ks[0]
    draft = config.get("model") or config.get("speculative_draft_model_path")
    if method == "draft" and not draft:
        raise CostModelError('--speculative-config: a draft model needs "model": a preset id (costmodel models list)')
    return Speculation(method, k, _acceptance(k, acceptance_length, acceptance_rates), draft)


def _acceptance(k: int, length: float | None, rates) -> float:
    """The mean tokens per verify step from the length or the per-position rates (exactly one of them)."""
    if (length is None) == (not rates):
        raise CostModelError(
            "speculative decoding needs its acceptance: --acceptance-length A (mean tokens per verify step, the bonus "
            f"token included, 1 to {k + 1}) or --acceptance-rates p1,...,pk; no engine documents a default"
        )
    if rates:
        rates = [float(p) for p in rates]
        if len(rates) > k or any(not 0 <= p <= 1 for p in rates):
            raise CostModelError(f"--acceptance-rates: at most {k} probabilities, each 0 to 1; got {rates}")
        length = 1 + sum(math.prod(rates[: i + 1]) for i in range(len(rates)))
    if not 1 <= length <= k + 1:
        raise CostModelError(f"--acceptance-length {length:g}: a verify step yields 1 to {k + 1} tokens (k = {k})")
    return float(length)


class Drafting:
    """A speculation made ready for one setup (:class:`costmodel.engine.served.Setup`): its counts, and the
    proposer's time per decode iteration from the target's iteration table (an MTP or EAGLE head: ``layers`` of the
    target's decoder layers and its output head, ``k`` times) or the draft model's (its decode step, ``k`` times)."""

    def __init__(self, spec: Speculation, table, layers: int, draft_table=None):
        self.spec, self.table, self.layers, self.draft_table = spec, table, layers, draft_table
        self.slots, self.acceptance = spec.slots, spec.acceptance
        self.tokens, self.steps_for = spec.tokens, spec.steps_for

    def describe(self) -> str:
        """The speculation and how its proposer is priced, as a report's assumption states it."""
        how = {
            "ngram": "the proposer a lookup on the host (no GPU time)",
            "draft": "the proposer k decode steps of the draft model on the same devices, its weights and KV cache "
            "taken from the target's KV budget",
        }.get(
            self.spec.method,
            f"the proposer k passes of a {self.spec.layers}-layer head (one decoder layer's share of the target's "
            "per-token ops and attention, and the output head)",
        )
        return (
            f"{self.spec.describe()}; {how}; a verify step's attention reads each sequence's cache once for its "
            f"{self.slots} queries, its other ops see {self.slots} tokens per sequence; simulated"
        )

    def propose(self, seqs: int, mean_context):
        """The proposer's time for one decode iteration of ``seqs`` sequences at ``mean_context`` cached positions
        (an array of contexts gives an array of times): ``k`` sequential drafting passes over one token each."""
        spec = self.spec
        if spec.method == "ngram" or seqs <= 0:  # a lookup in the prompt, on the host
            return 0.0 * mean_context
        if spec.method == "draft":
            return spec.k * _step(self.draft_table, seqs, mean_context, 1.0)
        return spec.k * _step(self.table, seqs, mean_context, spec.layers / self.layers)


def _step(table, seqs: int, mean_context, share: float):
    """One decode step of ``seqs`` sequences through ``share`` of ``table``'s decoder layers (their per-token ops
    and attention) and the whole output head."""
    tok, comm = table.per_token(seqs)
    return (float(tok) + float(comm) + table.decode_attention_time(seqs, mean_context)) * share + float(
        table.head_time(seqs)
    )

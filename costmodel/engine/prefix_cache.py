"""The engine's prefix cache (:class:`PrefixCache`): whole KV pages a request's prompt left behind, kept and lent to
later requests whose prompts start with the same tokens, as vLLM (its hashed full blocks), SGLang (its radix tree,
pages of one token) and TensorRT-LLM (KV block reuse) keep them.

Requests fall in groups: the requests sharing one prefix (a system prompt, a document), or the turns of one
conversation. A request's reusable tokens are its group's prefix, or for a turn the whole previous turn (its prompt
and its output). A group's pages become resident when a request's prefill passes the prefix (a shared prefix) or
when a turn finishes with a turn to follow (a conversation: its whole pages stay, the rest are freed). A later
request of the group finds them at admission, computes only its tail, and holds the lent pages while it runs. The
resident pages count against the pool; when a request finds no room, the groups no running request holds are
evicted, the least recently used first (every other page is a running request's).
"""

from __future__ import annotations

import numpy as np


class PrefixCache:
    """``group``: each request's group (-1: none), ``tokens``: the tokens each may find cached (its prefix),
    ``page``: tokens per KV page, ``turns``: a conversation's turns (1: a shared prefix)."""

    def __init__(self, group: np.ndarray, tokens: np.ndarray, page: int, turns: int, res):
        self.group, self.tokens, self.page, self.turns, self.res = group, tokens, page, turns, res
        self.lent = np.zeros(len(group), np.int64)  # pages of its group's each request holds while it runs
        self.held: dict[int, int] = {}  # group -> pages resident
        self.users: dict[int, int] = {}  # group -> running requests holding them
        self.used: dict[int, float] = {}  # group -> when they were last lent or kept

    def hit(self, v: int, done: int, target: int) -> int:
        """The tokens request ``v`` (with ``done`` of its ``target`` cached) finds at admission: its group's
        resident pages' tokens up to its prefix, beyond those it has done; at least one token is computed."""
        g = int(self.group[v])
        if g < 0 or not self.held.get(g):
            return 0
        return max(min(self.held[g] * self.page, int(self.tokens[v]), target - 1) - done, 0)

    def pages_for(self, v: int) -> int:
        """The resident pages request ``v``'s hit is lent."""
        return self.held.get(int(self.group[v]), 0)

    def lend(self, v: int, clock: float) -> int:
        """Request ``v`` admitted with a hit: the pages lent to it (not taken from the free pool)."""
        g = int(self.group[v])
        self.lent[v] = self.held[g]
        self.users[g] = self.users.get(g, 0) + 1
        self.used[g] = clock
        self.res.prefix_hits += 1
        return int(self.lent[v])

    def prefilled(self, v: int, done: int, clock: float) -> None:
        """Request ``v`` has ``done`` tokens prefilled: a shared prefix it has passed, not yet resident, becomes so
        (its whole pages, which ``v`` took, now lent to it by the cache)."""
        g = int(self.group[v])
        if self.turns > 1 or g < 0 or self.held.get(g) or done < self.tokens[v] or self.tokens[v] < self.page:
            return
        self.held[g] = int(self.tokens[v]) // self.page
        self.lent[v] = self.held[g]
        self.users[g] = self.users.get(g, 0) + 1
        self.used[g] = clock

    def release(self, v: int, pages: int, context: int, finished: bool, clock: float) -> int:
        """Request ``v`` leaves the batch holding ``pages`` for ``context`` tokens (``finished``: done, else
        preempted): the pages the pool gets back. A finished turn with a turn to follow leaves its whole pages to
        its conversation; a conversation's last turn takes its group's pages with it."""
        g, lent = int(self.group[v]), int(self.lent[v])
        self.lent[v] = 0
        if lent:
            self.users[g] -= 1
        if self.turns > 1 and finished and g >= 0:
            if (v + 1) % self.turns:  # a turn follows: its whole context stays cached for it
                kept = context // self.page
                self.held[g], self.used[g] = kept, clock
                return pages - kept
            freed = self.held.pop(g, 0)  # the last turn: its group's pages go with it
            return pages - lent + freed
        return pages - lent

    def evict(self, need: int) -> int:
        """Evict groups no running request holds, least recently used first, until ``need`` pages are freed (or
        none is left); the pages freed."""
        freed = 0
        for g in sorted((g for g in self.held if not self.users.get(g)), key=lambda g: self.used.get(g, 0.0)):
            if freed >= need:
                break
            freed += self.held.pop(g)
            self.res.prefix_evictions += 1
        return freed

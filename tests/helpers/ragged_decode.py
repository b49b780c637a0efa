"""Sequences of different lengths in one ``runtime.PagedKVCache`` (issue 43): each prefilled alone, decoded together
in one compiled call per step (a ragged batch), against each sequence run alone over a fresh cache."""
from __future__ import annotations

import numpy as np

from runtime import ContiguousKVCache, PagedKVCache


def run_alone(model, prompt: np.ndarray, steps: int, forced: list[int] | None = None,
              chunks: tuple[int, ...] | None = None) -> tuple[np.ndarray, list[int]]:
    """``prompt`` (L,) prefilled (in ``chunks`` of those lengths, when given) then ``steps`` greedy decode steps,
    batch 1 over a fresh cache; each step feeds the argmax, or ``forced[i]`` at step ``i``. Returns the last
    position's logits of the prefill and every step, (steps + 1, vocab), and the tokens fed after the prompt
    (the argmaxes unless forced)."""
    cache = ContiguousKVCache()
    done = 0
    for n in chunks or (len(prompt),):
        logits = model["prefill"](prompt[None, done:done + n], cache, done + n)
        done += n
    out, tokens = [logits[0, -1]], []
    for i in range(steps):
        token = int(out[-1].argmax()) if forced is None else forced[i]
        tokens.append(token)
        out.append(model["decode"](np.array([[token]], np.int64), cache, done + i + 1)[0, -1])
    return np.stack(out), tokens


class RaggedRun:
    """Sequences in one :class:`PagedKVCache` driven as a server does: :meth:`prefill` one alone (batch 1,
    possibly in chunks: a prefix already in the cache), :meth:`decode` the ones named together (one call, rows of
    different lengths). ``logits[sid]`` the last position's logits of each call, ``fed[sid]`` the tokens decoded."""

    def __init__(self, model, max_tokens: int = 512, block_size: int = 4) -> None:
        self.model = model
        self.cache = PagedKVCache(max_tokens=max_tokens, block_size=block_size)
        self.logits: dict[int, list[np.ndarray]] = {}
        self.fed: dict[int, list[int]] = {}

    def prefill(self, sid: int, prompt: np.ndarray, chunks: tuple[int, ...] | None = None) -> None:
        """Add sequence ``sid`` and prefill ``prompt`` (L,) into it, in ``chunks`` when given."""
        self.cache.add_sequence(sid)
        self.logits[sid], self.fed[sid] = [], []
        done = 0
        for n in chunks or (len(prompt),):
            total = self.cache.begin_forward([sid], n)
            assert total == done + n
            logits = self.model["prefill"](prompt[None, done:done + n], self.cache, total)
            done += n
        self.logits[sid].append(logits[0, -1])

    def fork(self, parent: int, child: int) -> None:
        """Sequence ``child`` from ``parent`` (its logits so far shared)."""
        self.cache.fork_sequence(parent, child)
        self.logits[child], self.fed[child] = list(self.logits[parent]), list(self.fed[parent])

    def decode(self, sids: list[int], forced: dict[int, int] | None = None) -> None:
        """One decode call of every sequence in ``sids``: each feeds its last argmax (or ``forced[sid]``)."""
        tokens = [int(self.logits[s][-1].argmax()) if forced is None or s not in forced else forced[s] for s in sids]
        total = self.cache.begin_forward(sids, 1)
        assert total == max(self.cache.seq_len(s) for s in sids)
        out = self.model["decode"](np.array(tokens, np.int64)[:, None], self.cache, total)
        for r, s in enumerate(sids):
            self.fed[s].append(tokens[r])
            self.logits[s].append(out[r, -1])


def assert_same_as_alone(run: RaggedRun, sid: int, prompt: np.ndarray, atol: float = 1e-5,
                         forced: list[int] | None = None) -> None:
    """Sequence ``sid`` of ``run`` gave the logits (within ``atol``) and tokens of ``prompt`` run alone with the
    same number of decode steps (feeding the same forced tokens)."""
    got = np.stack(run.logits[sid])
    want, tokens = run_alone(run.model, prompt, len(got) - 1, forced=forced)
    np.testing.assert_allclose(got, want, atol=atol, rtol=0, err_msg=f"sequence {sid}")
    assert run.fed[sid] == tokens, sid


def check_ragged_decode(model, prompts: list[np.ndarray], steps: int, order: list[int] | None = None,
                        atol: float = 1e-5) -> None:
    """Prefill ``prompts`` one by one into one paged cache (blocks of 4), decode them together ``steps`` times
    (the rows in ``order``, default the prompts' order), and check each against its run alone."""
    run = RaggedRun(model, block_size=4)
    for sid, prompt in enumerate(prompts):
        run.prefill(sid, prompt)
    for _ in range(steps):
        run.decode(order if order is not None else list(range(len(prompts))))
    for sid, prompt in enumerate(prompts):
        assert_same_as_alone(run, sid, prompt, atol=atol)

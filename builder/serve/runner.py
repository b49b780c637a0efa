"""``ModelRunner``: the engine's calls of a causal LM's compiled ``prefill`` / ``decode`` over one
:class:`runtime.PagedKVCache` holding all its sequences, and the cache's token budget.

The engine names sequences by int ids: :meth:`ModelRunner.add_sequence` / :meth:`fork_sequence` (the child shares
the parent's blocks: ``n`` completions of one prompt hold it once) / :meth:`remove_sequence`; :meth:`prefill`
appends prompt tokens to one sequence (in chunks: a prefix may be held already) and returns the last position's
logits; :meth:`decode` appends one token to each of several sequences of different lengths in ONE call of the
compiled ``decode`` (a ragged batch, ``PagedKVCache.begin_forward``: every weight read once per step) and returns
their logits. The budget (``capacity`` tokens, whole blocks) is shared by reservations the engine makes when it
admits a request (:meth:`reserve` / :meth:`release`; ``peak_reserved`` the most held at once), so a running request
never finds the cache full.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from runtime import PagedKVCache

__all__ = ["ModelRunner"]

StepFn = Callable[[np.ndarray, Any, int], np.ndarray]


def _last_logits(out: Any, rows: int, what: str) -> np.ndarray:
    """The last position's float logits (rows, vocab) of a step's output (rows, seq, vocab), checked."""
    if (not isinstance(out, np.ndarray) or out.ndim != 3 or out.shape[0] != rows
            or not np.issubdtype(out.dtype, np.floating)):
        raise ValueError(f"{what} must return float logits ({rows}, seq, vocab), got "
                         + (f"{out.dtype}{list(out.shape)}" if isinstance(out, np.ndarray) else type(out).__name__))
    last = np.asarray(out[:, -1, :], dtype=np.float32)
    if np.isnan(last).any():
        raise ValueError(f"{what} returned NaN logits")
    return last


class ModelRunner:
    """``prefill`` / ``decode``: ``fn(input_ids int64 (batch, seq), cache, total_seq_len) -> logits (batch, seq or
    1, vocab)``, the compiled functions of a recipe whose attention reads ``runtime.PagedKVCache``'s ragged rows;
    ``capacity``: the KV cache's budget in tokens (rounded up to whole blocks of ``block_size``). Raises ValueError
    for a non-positive ``capacity``; the methods raise KeyError for an unknown sequence id, ValueError for a known
    one added again, ValueError for logits of the wrong shape / NaN, and what the cache raises."""

    def __init__(self, prefill: StepFn, decode: StepFn, capacity: int, block_size: int = 16):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"ModelRunner: capacity must be a positive int, got {capacity!r}")
        self._prefill, self._decode = prefill, decode
        self.cache = PagedKVCache(max_tokens=capacity, block_size=block_size)
        self.block_size = self.cache.block_size
        self.capacity = self.cache.num_blocks * self.block_size
        self.reserved = 0
        self.peak_reserved = 0

    # -- the budget -----------------------------------------------------------------------------------
    @property
    def free(self) -> int:
        """Tokens of the budget not reserved."""
        return self.capacity - self.reserved

    def tokens_to_reserve(self, tokens: int, rows: int) -> int:
        """The budget ``rows`` sequences of ``tokens`` tokens each take at most (whole blocks each; forks share
        the prompt's, so this bounds them)."""
        return rows * math.ceil(tokens / self.block_size) * self.block_size

    def reserve(self, tokens: int) -> None:
        """Take ``tokens`` of the budget. Raises ValueError when fewer are free."""
        if tokens > self.free:
            raise ValueError(f"ModelRunner: {tokens} tokens asked, {self.free} free")
        self.reserved += tokens
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def release(self, tokens: int) -> None:
        """Give back ``tokens`` reserved earlier."""
        self.reserved = max(0, self.reserved - tokens)

    # -- sequences -------------------------------------------------------------------------------------
    @property
    def sequences(self) -> list[int]:
        """The ids of the sequences held."""
        return self.cache.sequences

    def add_sequence(self, seq_id: int) -> None:
        """A new, empty sequence."""
        self.cache.add_sequence(seq_id)

    def fork_sequence(self, parent_id: int, child_id: int) -> None:
        """A new sequence ``child_id`` holding what ``parent_id`` holds (its blocks shared)."""
        self.cache.fork_sequence(parent_id, child_id)

    def remove_sequence(self, seq_id: int) -> None:
        """Forget sequence ``seq_id`` (the blocks no other sequence holds are freed)."""
        self.cache.remove_sequence(seq_id)

    def seq_len(self, seq_id: int) -> int:
        """Tokens sequence ``seq_id`` holds."""
        return self.cache.seq_len(seq_id)

    # -- forward ----------------------------------------------------------------------------------------
    def prefill(self, seq_id: int, ids: Sequence[int]) -> np.ndarray:
        """Append ``ids`` (a prompt or a chunk of one) to sequence ``seq_id``: the logits of its last position,
        float32 (vocab,)."""
        x = np.array([list(ids)], dtype=np.int64)
        total = self.cache.begin_forward([seq_id], x.shape[1])
        try:
            return _last_logits(self._prefill(x, self.cache, total), 1, "prefill")[0]
        finally:
            self.cache.end_forward()

    def decode(self, seq_ids: Sequence[int], last_ids: Sequence[int]) -> np.ndarray:
        """Append token ``last_ids[i]`` to sequence ``seq_ids[i]`` each, in one call: their logits, float32
        (len(seq_ids), vocab)."""
        x = np.array(list(last_ids), dtype=np.int64).reshape(-1, 1)
        total = self.cache.begin_forward(list(seq_ids), 1)
        try:
            return _last_logits(self._decode(x, self.cache, total), x.shape[0], "decode")
        finally:
            self.cache.end_forward()

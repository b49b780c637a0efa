"""``ModelRunner``: the engine's calls of a causal LM's compiled ``prefill`` / ``decode`` over the KV cache of
all its sequences, and the cache's token budget.

The engine names sequences by int ids: :meth:`ModelRunner.add_sequence` / :meth:`fork_sequence` /
:meth:`remove_sequence`; :meth:`prefill` appends prompt tokens to one sequence (in chunks: a prefix may be held
already) and returns the last position's logits; :meth:`decode` appends one token to each of several sequences
and returns their logits. The budget (``capacity`` tokens) is shared by reservations the engine makes when it
admits a request (:meth:`reserve` / :meth:`release`; ``peak_reserved`` the most held at once), so a running request
never finds the cache full.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import numpy as np

from runtime import ContiguousKVCache

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
    1, vocab)``, as :func:`builder.generation.greedy_generate` takes them; ``capacity``: the KV cache's budget in
    tokens. Raises ValueError for a non-positive ``capacity``; the methods raise KeyError for an unknown
    sequence id, ValueError for a known one added again, and ValueError for logits of the wrong shape / NaN."""

    def __init__(self, prefill: StepFn, decode: StepFn, capacity: int):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"ModelRunner: capacity must be a positive int, got {capacity!r}")
        self._prefill, self._decode = prefill, decode
        self.capacity = capacity
        self.reserved = 0
        self.peak_reserved = 0
        self._caches: dict[int, ContiguousKVCache] = {}

    # -- the budget -----------------------------------------------------------------------------------
    @property
    def free(self) -> int:
        """Tokens of the budget not reserved."""
        return self.capacity - self.reserved

    def tokens_to_reserve(self, tokens: int, rows: int) -> int:
        """The budget ``rows`` sequences of ``tokens`` tokens each take."""
        return tokens * rows

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
        return sorted(self._caches)

    def add_sequence(self, seq_id: int) -> None:
        """A new, empty sequence."""
        if seq_id in self._caches:
            raise ValueError(f"sequence {seq_id} exists")
        self._caches[seq_id] = ContiguousKVCache()

    def fork_sequence(self, parent_id: int, child_id: int) -> None:
        """A new sequence ``child_id`` holding what ``parent_id`` holds."""
        if child_id in self._caches:
            raise ValueError(f"sequence {child_id} exists")
        self._caches[child_id] = copy.deepcopy(self._caches[parent_id])

    def remove_sequence(self, seq_id: int) -> None:
        """Forget sequence ``seq_id`` (its memory is freed)."""
        del self._caches[seq_id]

    def seq_len(self, seq_id: int) -> int:
        """Tokens sequence ``seq_id`` holds."""
        return self._caches[seq_id].seq_len

    # -- forward ----------------------------------------------------------------------------------------
    def prefill(self, seq_id: int, ids: Sequence[int]) -> np.ndarray:
        """Append ``ids`` (a prompt or a chunk of one) to sequence ``seq_id``: the logits of its last position,
        float32 (vocab,)."""
        cache = self._caches[seq_id]
        x = np.array([list(ids)], dtype=np.int64)
        return _last_logits(self._prefill(x, cache, cache.seq_len + x.shape[1]), 1, "prefill")[0]

    def decode(self, seq_ids: Sequence[int], last_ids: Sequence[int]) -> np.ndarray:
        """Append token ``last_ids[i]`` to sequence ``seq_ids[i]`` each: their logits, float32 (len(seq_ids), vocab)."""
        out = []
        for seq_id, tid in zip(seq_ids, last_ids):
            cache = self._caches[seq_id]
            out.append(_last_logits(self._decode(np.array([[tid]], dtype=np.int64), cache, cache.seq_len + 1),
                                    1, "decode")[0])
        return np.stack(out)

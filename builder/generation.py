"""Greedy autoregressive generation over a compiled model's prefill / decode functions and the runtime
KV cache (``runtime.ContiguousKVCache``).

    from runtime import ContiguousKVCache
    ids = greedy_generate(lambda ids, cache, n: vm["prefill"](ids, cache, n, *params),
                          lambda ids, cache, n: vm["decode"](ids, cache, n, *params),
                          prompt_ids, max_new_tokens=24)

(a ``JitModule`` is called as ``m["prefill"](ids, cache, n)``). This is HF transformers'
``generate(do_sample=False, use_cache=True)`` without stopping criteria: the prompt is run once
(prefill, filling the cache), then each new token is fed back one at a time (decode), and every token
is the argmax of the logits of the last position (the lowest index on ties, as ``torch.argmax``).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from runtime import ContiguousKVCache
from runtime.memory import check_allocation

__all__ = ["greedy_generate", "MAX_NEW_TOKENS"]

#: The most tokens one call of :func:`greedy_generate` generates.
MAX_NEW_TOKENS = 1 << 16

StepFn = Callable[[np.ndarray, Any, int], np.ndarray]


def _logits(where: str, out: Any, batch: int, seq: int, vocab: int | None) -> np.ndarray:
    """The last position's logits (batch, vocab) of a step's output, checked."""
    if not isinstance(out, np.ndarray) or out.ndim != 3 or not np.issubdtype(out.dtype, np.floating):
        raise ValueError(f"greedy_generate: {where} must return float logits (batch, seq, vocab), got "
                         + (f"{out.dtype}{list(out.shape)}" if isinstance(out, np.ndarray) else type(out).__name__))
    if out.shape[0] != batch or out.shape[1] not in (1, seq) or out.shape[2] == 0:
        raise ValueError(f"greedy_generate: {where} returned logits of shape {out.shape}, expected "
                         f"({batch}, {seq} or 1, vocab)")
    if vocab is not None and out.shape[2] != vocab:
        raise ValueError(f"greedy_generate: {where} returned {out.shape[2]} logits per token, the prefill "
                         f"returned {vocab}")
    last = out[:, -1, :]
    if np.isnan(last).any():
        raise ValueError(f"greedy_generate: {where} returned NaN logits")
    return last


def greedy_generate(prefill: StepFn, decode: StepFn, prompt_ids: np.ndarray, max_new_tokens: int,
                    new_cache: Callable[[], Any] = ContiguousKVCache,
                    return_logits: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Generate ``max_new_tokens`` tokens after ``prompt_ids`` by greedy decoding.

    - ``prefill(ids, cache, total_seq_len)``: ``ids`` int64 (batch, prompt_len), a fresh cache from
      ``new_cache()``, ``total_seq_len = prompt_len``; returns logits (batch, prompt_len or 1, vocab).
    - ``decode(ids, cache, total_seq_len)``: ``ids`` int64 (batch, 1), the token chosen last, the same
      cache, ``total_seq_len = prompt_len + step`` (step 1 .. max_new_tokens - 1); returns logits
      (batch, 1, vocab).
    - ``prompt_ids``: integer array (batch, prompt_len), batch >= 1, prompt_len >= 1 (every sequence
      of the batch is as long: pad and mask in the model otherwise).
    - ``max_new_tokens``: 1 .. :data:`MAX_NEW_TOKENS`.

    Returns the new ids, int64 (batch, max_new_tokens) (the prompt excluded); with ``return_logits``
    also the logits each token was chosen from, float32 (batch, max_new_tokens, vocab).

    Raises TypeError for a ``prefill`` / ``decode`` / ``new_cache`` that is not callable or a
    ``prompt_ids`` that is not an integer numpy array; ValueError for a ``prompt_ids`` that is not 2-D
    or empty, a ``max_new_tokens`` out of range, logits of the wrong shape / dtype or NaN;
    :class:`runtime.memory.MemoryLimitError` when the returned logits cannot fit in memory.
    """
    for what, fn in (("prefill", prefill), ("decode", decode), ("new_cache", new_cache)):
        if not callable(fn):
            raise TypeError(f"greedy_generate: {what} must be callable, got {type(fn).__name__}")
    if not isinstance(prompt_ids, np.ndarray) or not (np.issubdtype(prompt_ids.dtype, np.integer)):
        raise TypeError("greedy_generate: prompt_ids must be an integer numpy array (batch, prompt_len), got "
                        + (str(prompt_ids.dtype) if isinstance(prompt_ids, np.ndarray) else type(prompt_ids).__name__))
    if prompt_ids.ndim != 2 or 0 in prompt_ids.shape:
        raise ValueError(f"greedy_generate: prompt_ids must be 2-D (batch, prompt_len) and non-empty, got shape "
                         f"{prompt_ids.shape}")
    if (isinstance(max_new_tokens, (bool, np.bool_)) or not isinstance(max_new_tokens, (int, np.integer))
            or not 1 <= max_new_tokens <= MAX_NEW_TOKENS):
        raise ValueError(f"greedy_generate: max_new_tokens must be an int in 1..{MAX_NEW_TOKENS}, got "
                         f"{max_new_tokens!r}")
    max_new_tokens = int(max_new_tokens)
    batch, prompt_len = prompt_ids.shape
    ids = np.ascontiguousarray(prompt_ids, dtype=np.int64)
    new_ids = np.empty((batch, max_new_tokens), dtype=np.int64)
    cache = new_cache()
    last = _logits("prefill", prefill(ids, cache, prompt_len), batch, prompt_len, None)
    vocab = last.shape[1]
    step_logits = None
    if return_logits:
        check_allocation(batch * max_new_tokens * vocab * 4,
                         f"greedy_generate: the logits of {max_new_tokens} steps ({batch} x {vocab} each)")
        step_logits = np.empty((batch, max_new_tokens, vocab), dtype=np.float32)
    for step in range(max_new_tokens):
        if step:
            out = decode(new_ids[:, step - 1: step].copy(), cache, prompt_len + step)
            last = _logits(f"decode (step {step})", out, batch, 1, vocab)
        new_ids[:, step] = np.argmax(last, axis=-1)
        if step_logits is not None:
            step_logits[:, step] = last
    return (new_ids, step_logits) if return_logits else new_ids

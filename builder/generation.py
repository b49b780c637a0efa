"""Autoregressive generation over a compiled model's prefill / decode functions and the runtime KV cache
(``runtime.ContiguousKVCache``): :func:`greedy_generate` (argmax, a fixed number of tokens) and
:func:`generate` / :func:`stream_generate` (the sampler chain of :mod:`builder.sampling`, ``n`` completions,
stopping per sequence on stop ids, token by token as a stream).

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

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from runtime import ContiguousKVCache
from runtime.memory import check_allocation

from .sampling import Sampler, SamplingParams, check_constraints

__all__ = ["greedy_generate", "generate", "stream_generate", "GenerationStream", "GenerationStep",
           "GenerationOutput", "MAX_NEW_TOKENS", "MAX_STOP_IDS"]

#: The most tokens one call of :func:`greedy_generate` generates.
MAX_NEW_TOKENS = 1 << 16

#: The most stop ids one call takes.
MAX_STOP_IDS = 1 << 12

StepFn = Callable[[np.ndarray, Any, int], np.ndarray]


def _logits(where: str, out: Any, batch: int, seq: int, vocab: int | None,
            who: str = "greedy_generate") -> np.ndarray:
    """The last position's logits (batch, vocab) of a step's output, checked."""
    if not isinstance(out, np.ndarray) or out.ndim != 3 or not np.issubdtype(out.dtype, np.floating):
        raise ValueError(f"{who}: {where} must return float logits (batch, seq, vocab), got "
                         + (f"{out.dtype}{list(out.shape)}" if isinstance(out, np.ndarray) else type(out).__name__))
    if out.shape[0] != batch or out.shape[1] not in (1, seq) or out.shape[2] == 0:
        raise ValueError(f"{who}: {where} returned logits of shape {out.shape}, expected "
                         f"({batch}, {seq} or 1, vocab)")
    if vocab is not None and out.shape[2] != vocab:
        raise ValueError(f"{who}: {where} returned {out.shape[2]} logits per token, the prefill "
                         f"returned {vocab}")
    last = out[:, -1, :]
    if np.isnan(last).any():
        raise ValueError(f"{who}: {where} returned NaN logits")
    return last


def _check_args(who: str, prefill, decode, new_cache, prompt_ids, max_new_tokens) -> int:
    """The checks :func:`greedy_generate` documents; returns ``max_new_tokens`` as an int."""
    for what, fn in (("prefill", prefill), ("decode", decode), ("new_cache", new_cache)):
        if not callable(fn):
            raise TypeError(f"{who}: {what} must be callable, got {type(fn).__name__}")
    if not isinstance(prompt_ids, np.ndarray) or not (np.issubdtype(prompt_ids.dtype, np.integer)):
        raise TypeError(f"{who}: prompt_ids must be an integer numpy array (batch, prompt_len), got "
                        + (str(prompt_ids.dtype) if isinstance(prompt_ids, np.ndarray) else type(prompt_ids).__name__))
    if prompt_ids.ndim != 2 or 0 in prompt_ids.shape:
        raise ValueError(f"{who}: prompt_ids must be 2-D (batch, prompt_len) and non-empty, got shape "
                         f"{prompt_ids.shape}")
    if (isinstance(max_new_tokens, (bool, np.bool_)) or not isinstance(max_new_tokens, (int, np.integer))
            or not 1 <= max_new_tokens <= MAX_NEW_TOKENS):
        raise ValueError(f"{who}: max_new_tokens must be an int in 1..{MAX_NEW_TOKENS}, got "
                         f"{max_new_tokens!r}")
    return int(max_new_tokens)


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
    max_new_tokens = _check_args("greedy_generate", prefill, decode, new_cache, prompt_ids, max_new_tokens)
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


@dataclass
class GenerationStep:
    """One step of :class:`GenerationStream` for all its rows (``batch * n``; row ``r`` is completion
    ``r % n`` of prompt ``r // n``): ``token_ids`` int64 (rows,) the tokens chosen (meaningful where
    ``active``); ``active`` bool (rows,) the rows that produced a token in this step; ``finished`` bool (rows,)
    the rows that ended with it (a stop id, included, or the last step); with ``logprobs``, the
    :class:`builder.sampling.SampleOutput` arrays of the step."""

    token_ids: np.ndarray
    active: np.ndarray
    finished: np.ndarray
    logprobs: np.ndarray | None = None
    top_ids: np.ndarray | None = None
    top_logprobs: np.ndarray | None = None


class GenerationStream:
    """Tokens as they come: iterate for one :class:`GenerationStep` per step (what :func:`stream_generate`
    returns). The prompt is prefilled on the first ``next()``; each later step decodes the batch once (rows
    that finished are fed their last token and ignored, since the cache has one length). The stream ends
    when every row has finished or after ``max_new_tokens`` steps. :meth:`finish` ends a row from outside
    (a stop string found in its text); ``finish_reasons[r]`` is ``"stop"`` (a stop id, :meth:`finish` or a
    finished constraint), ``"length"`` (``max_new_tokens``) or None while it runs. ``constraints``: None or one
    per row (:class:`builder.structured.GrammarConstraint` or None), given to the :class:`Sampler`; a row whose
    constraint ``is_finished`` after its token ends there (``"stop"``)."""

    def __init__(self, prefill: StepFn, decode: StepFn, prompt_ids: np.ndarray, max_new_tokens: int,
                 sampling: SamplingParams | None, stop_ids: Iterable[int], new_cache: Callable[[], Any],
                 constraints: list | None = None):
        who = "generate"
        self.max_new_tokens = _check_args(who, prefill, decode, new_cache, prompt_ids, max_new_tokens)
        if sampling is None:
            sampling = SamplingParams(do_sample=False)
        if not isinstance(sampling, SamplingParams):
            raise TypeError(f"{who}: sampling must be builder.sampling.SamplingParams, got {type(sampling).__name__}")
        stops = list(_bounded(stop_ids, MAX_STOP_IDS, "stop_ids"))
        if any(isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 for t in stops):
            raise ValueError(f"{who}: stop_ids must be non-negative ints, got {stops[:8]}")
        self.sampling = sampling
        self.stop_ids = np.array(sorted(set(int(t) for t in stops)), dtype=np.int64)
        self.prompt_ids = np.repeat(np.ascontiguousarray(prompt_ids, dtype=np.int64), sampling.n, axis=0)
        self.rows = self.prompt_ids.shape[0]
        self.constraints = check_constraints(constraints, self.rows)
        self.finish_reasons: list[str | None] = [None] * self.rows
        self._prefill, self._decode, self._new_cache = prefill, decode, new_cache
        self._step = 0
        self._cache = None
        self._sampler: Sampler | None = None
        self._last = None
        self._vocab: int | None = None

    def __iter__(self) -> "GenerationStream":
        return self

    def finish(self, row: int) -> None:
        """End row ``row`` now (finish reason ``"stop"``); its later steps are inactive."""
        if self.finish_reasons[row] is None:
            self.finish_reasons[row] = "stop"

    @property
    def done(self) -> bool:
        """True when every row has finished."""
        return all(r is not None for r in self.finish_reasons)

    def __next__(self) -> GenerationStep:
        if self.done or self._step >= self.max_new_tokens:
            raise StopIteration
        prompt_len = self.prompt_ids.shape[1]
        if self._step == 0:
            self._cache = self._new_cache()
            logits = _logits("prefill", self._prefill(self.prompt_ids, self._cache, prompt_len), self.rows,
                             prompt_len, None, "generate")
            self._vocab = logits.shape[1]
            self._sampler = Sampler(self.sampling, self.prompt_ids, self._vocab, self.constraints)
        else:
            out = self._decode(self._last[:, None].copy(), self._cache, prompt_len + self._step)
            logits = _logits(f"decode (step {self._step})", out, self.rows, 1, self._vocab, "generate")
        active = np.array([r is None for r in self.finish_reasons])
        choice = self._sampler(logits, active)
        ids = choice.token_ids
        self._last = ids
        self._step += 1
        finished = active & np.isin(ids, self.stop_ids)
        if self.constraints is not None:
            finished |= active & np.array([bool(getattr(c, "is_finished", False)) for c in self.constraints])
        for r in np.flatnonzero(active):
            if finished[r]:
                self.finish_reasons[r] = "stop"
            elif self._step >= self.max_new_tokens:
                self.finish_reasons[r] = "length"
                finished[r] = True
        return GenerationStep(ids, active, finished, choice.logprobs, choice.top_ids, choice.top_logprobs)


def _bounded(items: Iterable, limit: int, what: str) -> list:
    if isinstance(items, (int, np.integer)):
        items = [items]
    out = []
    for item in items:
        out.append(item)
        if len(out) > limit:
            raise ValueError(f"generate: more than {limit} {what}")
    return out


@dataclass
class GenerationOutput:
    """What :func:`generate` returns, one entry per row (``batch * n``; row ``r`` is completion ``r % n`` of
    prompt ``r // n``): ``ids`` int64 arrays of the new tokens (a stop id that ended a row is its last
    token), ``finish_reasons`` (``"stop"`` / ``"length"``); with ``logprobs``, ``logprobs`` float64 (tokens,)
    and ``top_ids`` / ``top_logprobs`` (tokens, N) per row; ``steps``: the steps run (the longest row)."""

    ids: list[np.ndarray]
    finish_reasons: list[str]
    logprobs: list[np.ndarray] | None = None
    top_ids: list[np.ndarray] | None = None
    top_logprobs: list[np.ndarray] | None = None
    steps: int = field(default=0)


def stream_generate(prefill: StepFn, decode: StepFn, prompt_ids: np.ndarray, max_new_tokens: int,
                    sampling: SamplingParams | None = None, stop_ids: Iterable[int] = (),
                    new_cache: Callable[[], Any] = ContiguousKVCache,
                    constraints: list | None = None) -> GenerationStream:
    """A :class:`GenerationStream` over ``prefill`` / ``decode`` (as :func:`greedy_generate` takes them):
    each ``next()`` chooses one token per row with ``sampling`` (:class:`builder.sampling.SamplingParams`;
    None: greedy, exactly :func:`greedy_generate`'s tokens) and ends a row at one of ``stop_ids`` (at most
    :data:`MAX_STOP_IDS`, e.g. the eos ids). ``sampling.n`` completions of each prompt are rows of one batch.
    ``constraints``: None or one per row (``batch * n``), a :class:`builder.structured.GrammarConstraint` or None
    (structured output: the row's tokens follow its grammar, and it ends when the grammar is finished).

    Raises what :func:`greedy_generate` raises for its arguments and outputs (naming ``generate``), and
    ValueError for bad stop ids or a ``constraints`` list not one per row; TypeError for a ``sampling`` that is
    not SamplingParams or a constraint without ``mask`` / ``accept``."""
    return GenerationStream(prefill, decode, prompt_ids, max_new_tokens, sampling, stop_ids, new_cache, constraints)


def generate(prefill: StepFn, decode: StepFn, prompt_ids: np.ndarray, max_new_tokens: int,
             sampling: SamplingParams | None = None, stop_ids: Iterable[int] = (),
             new_cache: Callable[[], Any] = ContiguousKVCache, constraints: list | None = None) -> GenerationOutput:
    """Run :func:`stream_generate` to the end and collect each row's tokens (a :class:`GenerationOutput`).
    HF transformers' ``generate`` with ``eos_token_id=stop_ids`` and the sampler chain of
    :mod:`builder.sampling`; with ``sampling=None`` the ids are :func:`greedy_generate`'s, cut after the
    first stop id; ``constraints`` as :func:`stream_generate` takes them."""
    stream = stream_generate(prefill, decode, prompt_ids, max_new_tokens, sampling, stop_ids, new_cache, constraints)
    ids: list[list[int]] = [[] for _ in range(stream.rows)]
    want = stream.sampling.logprobs is not None
    lps: list[list] = [[] for _ in range(stream.rows)]
    tops: list[list] = [[] for _ in range(stream.rows)]
    top_lps: list[list] = [[] for _ in range(stream.rows)]
    steps = 0
    for step in stream:
        steps += 1
        for r in np.flatnonzero(step.active):
            ids[r].append(int(step.token_ids[r]))
            if want:
                lps[r].append(step.logprobs[r])
                tops[r].append(step.top_ids[r])
                top_lps[r].append(step.top_logprobs[r])
    out = GenerationOutput([np.array(row, dtype=np.int64) for row in ids], list(stream.finish_reasons), steps=steps)
    if want:
        out.logprobs = [np.array(row, dtype=np.float64) for row in lps]
        out.top_ids = [np.array(row, dtype=np.int64).reshape(len(row), -1) for row in tops]
        out.top_logprobs = [np.array(row, dtype=np.float64).reshape(len(row), -1) for row in top_lps]
    return out

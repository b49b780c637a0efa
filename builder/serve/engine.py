"""Continuous batching: one engine thread runs the steps of every active request of a causal LM.

A request (:meth:`Engine.submit`) is a prompt's token ids, ``max_tokens``, its :class:`~builder.sampling.SamplingParams`
(``n`` completions: rows of the request), stop strings and stop ids. At every step (:meth:`Engine.step`, the
scheduling of vLLM and of llama.cpp's server slots):

1. cancelled requests are retired (their sequences leave the KV cache);
2. waiting requests are admitted, oldest first, while the rows of the batch stay within ``max_batch`` and the
   KV cache can hold every admitted row's prompt and ``max_tokens`` (reserved at admission, so a running
   request never finds the cache full; the queue of waiting requests is bounded by ``max_queue``, and a full
   queue refuses new requests with :class:`QueueFullError`);
3. at most ``prefill_chunk`` prompt tokens are prefilled, of the admitted requests oldest first, one call per
   request (a long prompt takes several steps, interleaved with the decode of the others; short ones share a
   step); when a prompt is done its first tokens are sampled;
4. every decoding row of every request is decoded (:class:`ModelRunner`), its token sampled with its
   request's sampler, its text streamed (:class:`~builder.text_stream.CompletionText`), and finished rows and
   requests retired.

Events reach the caller through the ``deliver`` callback given to :meth:`Engine.submit`, called on the engine's
thread: :class:`~builder.completion.TextChunk` s, then one :class:`RequestDone` (or :class:`RequestFailed`).
:class:`RequestHandle` collects them for a synchronous caller (``for chunk in handle``).
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..completion import TextChunk, TextModel, step_chunk
from ..generation import MAX_NEW_TOKENS, MAX_STOP_IDS
from ..sampling import Sampler, SamplingParams
from ..text_stream import CompletionText
from .runner import ModelRunner

__all__ = ["Engine", "RequestHandle", "RequestDone", "RequestFailed", "QueueFullError", "RequestTooLongError",
           "DEFAULT_MAX_QUEUE", "DEFAULT_MAX_BATCH", "DEFAULT_PREFILL_CHUNK"]

DEFAULT_MAX_QUEUE = 256
"""Requests that may wait for admission before :meth:`Engine.submit` refuses more."""

DEFAULT_MAX_BATCH = 16
"""Rows (sequences) decoded in one step."""

DEFAULT_PREFILL_CHUNK = 256
"""Prompt tokens prefilled per step."""


class QueueFullError(RuntimeError):
    """The engine's queue of waiting requests is full (the server answers 429)."""


class RequestTooLongError(ValueError):
    """A request whose prompt and ``max_tokens`` cannot fit in the KV cache or the model's context."""


@dataclass
class RequestDone:
    """The last event of a request: ``prompt_tokens`` and ``completion_tokens`` (all rows)."""

    prompt_tokens: int
    completion_tokens: int


@dataclass
class RequestFailed:
    """The last event of a request that failed while it ran (the model raised): ``error``."""

    error: BaseException


@dataclass
class _Row:
    """One completion of a request: its sequence in the cache, its text, its last token."""

    seq_id: int
    text: CompletionText
    last: int = -1
    tokens: int = 0
    finished: bool = False


@dataclass
class _Request:
    id: int
    prompt_ids: list[int]
    max_tokens: int
    sampling: SamplingParams
    stop: Any
    stop_ids: frozenset[int]
    deliver: Callable[[Any], None]
    reserved: int                   # cache tokens reserved at admission
    constraints: list | None        # one grammar constraint per row, or None
    cancelled: threading.Event = field(default_factory=threading.Event)
    prefilled: int = 0
    rows: list[_Row] = field(default_factory=list)
    sampler: Sampler | None = None

    @property
    def decoding(self) -> bool:
        return self.sampler is not None


class RequestHandle:
    """What :meth:`Engine.submit` returns: :meth:`cancel`, and for a synchronous caller that let the engine
    collect the events (``deliver=None``), iteration over the :class:`~builder.completion.TextChunk` s as they
    come, ending at the request's end (raising the model's error if it failed); :attr:`done` is then the
    :class:`RequestDone`."""

    def __init__(self, request_id: int, cancelled: threading.Event, events: "queue.Queue | None"):
        self.id = request_id
        self._cancelled = cancelled
        self._events = events
        self.done: RequestDone | None = None

    def cancel(self) -> None:
        """Stop the request: the engine retires it at its next step and frees its sequences."""
        self._cancelled.set()

    def __iter__(self) -> Iterator[TextChunk]:
        if self._events is None:
            raise TypeError("this request delivers its events to its own callback")
        while True:
            event = self._events.get()
            if isinstance(event, RequestDone):
                self.done = event
                return
            if isinstance(event, RequestFailed):
                raise event.error
            yield event


class Engine:
    """Continuous batching of a causal LM (see the module docstring).

    ``model``: a :class:`~builder.completion.TextModel` (its ``prefill`` / ``decode``, tokenizer and eos ids);
    ``kv_cache_tokens``: the KV cache's budget in tokens, all sequences together (llama.cpp's ``--ctx-size``);
    ``max_context``: the most tokens one sequence may hold (prompt and completion; None: the budget);
    ``max_batch``, ``max_queue``, ``prefill_chunk``: see the module docstring. :meth:`start` runs the steps on
    a thread of their own; without it, call :meth:`step` (tests).

    Raises ValueError for sizes that are not positive ints.
    """

    def __init__(self, model: TextModel, kv_cache_tokens: int = 8192, max_context: int | None = None,
                 max_batch: int = DEFAULT_MAX_BATCH, max_queue: int = DEFAULT_MAX_QUEUE,
                 prefill_chunk: int = DEFAULT_PREFILL_CHUNK):
        for name, value in (("kv_cache_tokens", kv_cache_tokens), ("max_batch", max_batch),
                            ("max_queue", max_queue), ("prefill_chunk", prefill_chunk),
                            ("max_context", 1 if max_context is None else max_context)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"Engine: {name} must be a positive int, got {value!r}")
        self.model = model
        self.runner = ModelRunner(model.prefill, model.decode, kv_cache_tokens)
        self.max_context = min(max_context or kv_cache_tokens, kv_cache_tokens)
        self.max_batch, self.max_queue, self.prefill_chunk = max_batch, max_queue, prefill_chunk
        self._lock = threading.Condition()
        self._waiting: deque[_Request] = deque()
        self._running: list[_Request] = []
        self._ids = itertools.count()
        self._seq_ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.steps = 0

    # -- the caller's side -------------------------------------------------------------------------------
    def submit(self, prompt_ids: Sequence[int], max_tokens: int, sampling: SamplingParams | None = None,
               stop: Any = None, stop_token_ids: Sequence[int] = (), response_format: Any = None,
               deliver: Callable[[Any], None] | None = None) -> RequestHandle:
        """Queue a request: ``prompt_ids`` (1 .. ``max_context - max_tokens`` ids below the model's vocabulary),
        ``max_tokens`` (1 .. :data:`~builder.generation.MAX_NEW_TOKENS`), ``sampling`` (None: greedy), ``stop``
        strings, ``stop_token_ids`` (with the model's eos ids), ``response_format`` (OpenAI's: a JSON schema, a JSON
        object or a regex constrains each completion, :mod:`builder.structured`). ``deliver(event)`` is called on the engine's
        thread with each event; without it the returned handle collects them (iterate over it).

        Raises ValueError for bad arguments (naming ``response_format`` for a bad one), :class:`RequestTooLongError` when the prompt and ``max_tokens``
        cannot fit, :class:`QueueFullError` when ``max_queue`` requests are waiting.
        """
        ids = [int(t) for t in prompt_ids]
        if not ids:
            raise ValueError("prompt: the prompt has no tokens")
        vocab = self.model.vocab
        if min(ids) < 0 or (vocab is not None and max(ids) >= vocab):
            raise ValueError(f"prompt: token ids must be in 0..{(vocab or 0) - 1 if vocab else 'vocab'}")
        if (isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer))
                or not 1 <= max_tokens <= MAX_NEW_TOKENS):
            raise ValueError(f"max_tokens must be an int in 1..{MAX_NEW_TOKENS}, got {max_tokens!r}")
        sampling = SamplingParams(do_sample=False) if sampling is None else sampling
        if not isinstance(sampling, SamplingParams):
            raise TypeError(f"sampling must be SamplingParams, got {type(sampling).__name__}")
        if sampling.n > self.max_batch:
            raise ValueError(f"n: {sampling.n} completions cannot run together; this engine decodes at most "
                             f"{self.max_batch} sequences at once (max_batch)")
        stop_ids = [*self.model.eos_ids, *stop_token_ids]
        if len(stop_ids) > MAX_STOP_IDS or any(isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0
                                               for t in stop_ids):
            raise ValueError(f"stop_token_ids must be at most {MAX_STOP_IDS} non-negative ints")
        CompletionText(self.model.tokenizer, stop, ())      # checks the stop strings now
        constraints = self.model.constraints(response_format, sampling.n)
        need = len(ids) + int(max_tokens)
        if need > self.max_context:
            raise RequestTooLongError(
                f"the prompt has {len(ids)} tokens and max_tokens is {max_tokens}: {need} tokens, more than the "
                f"{self.max_context} one sequence may hold")
        reserved = self.runner.tokens_to_reserve(need, sampling.n)
        if reserved > self.runner.capacity:
            raise RequestTooLongError(
                f"{sampling.n} completion(s) of {need} tokens need {reserved} tokens of KV cache, more than its "
                f"{self.runner.capacity}")
        events: queue.Queue | None = None
        if deliver is None:
            events = queue.Queue()
            deliver = events.put
        request = _Request(next(self._ids), ids, int(max_tokens), sampling, stop, frozenset(int(t) for t in stop_ids),
                           deliver, reserved, constraints)
        with self._lock:
            if len(self._waiting) >= self.max_queue:
                raise QueueFullError(f"{len(self._waiting)} requests are waiting already (max_queue "
                                     f"{self.max_queue})")
            self._waiting.append(request)
            self._lock.notify()
        return RequestHandle(request.id, request.cancelled, events)

    @property
    def num_waiting(self) -> int:
        """Requests waiting for admission."""
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        """Requests admitted and not finished."""
        return len(self._running)

    # -- the thread -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Run the steps on a daemon thread until :meth:`shutdown`."""
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="model-builder-engine", daemon=True)
            self._thread.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the thread (after its current step); requests still queued or running fail."""
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        for request in [*self._waiting, *self._running]:
            self._retire(request, RequestFailed(RuntimeError("the server is shutting down")))
        self._waiting.clear()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and not self._waiting and not self._running:
                    self._lock.wait()
                if self._stopping:
                    return
            self.step()

    # -- one step -----------------------------------------------------------------------------------
    def step(self) -> bool:
        """Run one step (see the module docstring); False when there was nothing to do."""
        for request in [r for r in self._running if r.cancelled.is_set()]:
            self._retire(request, self._done(request))
        with self._lock:
            cancelled = [r for r in self._waiting if r.cancelled.is_set()]
            for request in cancelled:
                self._waiting.remove(request)
            self._admit()
        for request in cancelled:
            self._deliver(request, self._done(request))
        if not self._running:
            return False
        self.steps += 1
        decoding = [r for r in self._running if r.decoding]
        budget = self.prefill_chunk
        for request in [r for r in self._running if not r.decoding]:
            if budget <= 0:
                break
            take = min(budget, len(request.prompt_ids) - request.prefilled)
            budget -= take
            self._guarded(request, lambda r, n=take: self._prefill_chunk(r, n))
        if decoding:
            self._decode(decoding)
        return True

    def _admit(self) -> None:
        rows = sum(len(r.rows) or r.sampling.n for r in self._running)
        while self._waiting:
            request = self._waiting[0]
            if rows + request.sampling.n > self.max_batch or request.reserved > self.runner.free:
                return
            self._waiting.popleft()
            self.runner.reserve(request.reserved)
            rows += request.sampling.n
            request.rows = [_Row(next(self._seq_ids), CompletionText(self.model.tokenizer, request.stop,
                                                                      request.stop_ids))
                            for _ in range(request.sampling.n)]
            self.runner.add_sequence(request.rows[0].seq_id)
            self._running.append(request)

    def _guarded(self, request: _Request, fn: Callable[[_Request], None]) -> None:
        try:
            fn(request)
        except Exception as exc:      # the model failed on this request: it ends, the engine goes on
            self._retire(request, RequestFailed(exc))

    def _prefill_chunk(self, request: _Request, count: int) -> None:
        start = request.prefilled
        chunk = request.prompt_ids[start:start + count]
        logits = self.runner.prefill(request.rows[0].seq_id, chunk)
        request.prefilled += len(chunk)
        if request.prefilled < len(request.prompt_ids):
            return
        for row in request.rows[1:]:
            self.runner.fork_sequence(request.rows[0].seq_id, row.seq_id)
        n = len(request.rows)
        request.sampler = Sampler(request.sampling, np.array([request.prompt_ids] * n, dtype=np.int64),
                                  logits.shape[-1], constraints=request.constraints)
        self._sample(request, np.repeat(logits[None, :], n, axis=0))

    def _decode(self, requests: list[_Request]) -> None:
        rows = [(request, row) for request in requests for row in request.rows if not row.finished]
        try:
            logits = self.runner.decode([row.seq_id for _, row in rows], [row.last for _, row in rows])
        except Exception as exc:
            for request in requests:
                self._retire(request, RequestFailed(exc))
            return
        at = 0
        for request in requests:
            live = [not row.finished for row in request.rows]
            step = np.zeros((len(request.rows), logits.shape[1]), dtype=logits.dtype)
            k = sum(live)
            step[np.array(live)] = logits[at:at + k]
            at += k
            self._guarded(request, lambda r, s=step: self._sample(r, s))

    def _sample(self, request: _Request, logits: np.ndarray) -> None:
        """Choose each live row's token from ``logits`` (rows, vocab), stream its text, retire what ended."""
        live = np.array([not row.finished for row in request.rows])
        choice = request.sampler(logits, active=live)
        for r, row in enumerate(request.rows):
            if row.finished:
                continue
            tid = int(choice.token_ids[r])
            row.last, row.tokens = tid, row.tokens + 1
            grammar = request.constraints[r] if request.constraints else None
            reason = ("stop" if grammar is not None and grammar.is_finished
                      else "length" if row.tokens >= request.max_tokens else None)
            text, end = row.text.push(tid, reason)
            chunk = step_chunk(r, text, end, tid, choice)
            self._deliver(request, chunk)
            if end is not None:
                row.finished = True
                self.runner.remove_sequence(row.seq_id)
        if all(row.finished for row in request.rows):
            self._retire(request, self._done(request))

    @staticmethod
    def _done(request: _Request) -> RequestDone:
        return RequestDone(len(request.prompt_ids), sum(row.tokens for row in request.rows))

    def _deliver(self, request: _Request, event: Any) -> None:
        try:
            request.deliver(event)
        except Exception:             # the receiver is gone (its event loop closed): drop the request
            request.cancelled.set()

    def _retire(self, request: _Request, event: Any) -> None:
        """Take ``request`` out (its sequences leave the cache, its reservation is returned); then ``event``."""
        if request in self._running:
            self._running.remove(request)
            for row in request.rows:
                if not row.finished:
                    row.finished = True
                    self.runner.remove_sequence(row.seq_id)
            self.runner.release(request.reserved)
        if event is not None:
            self._deliver(request, event)

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until no request waits or runs (True), or ``timeout`` seconds pass (False)."""
        end = time.monotonic() + timeout
        while self._waiting or self._running:
            if time.monotonic() > end:
                return False
            time.sleep(0.005)
        return True

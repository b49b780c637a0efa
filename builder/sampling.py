"""Choosing the next token from the last position's logits: a sampler chain, numpy, float64.

The chain (:func:`process_logits`), each step a function of its own, in this order:

1. repetition penalty on every token seen (prompt and generated): HF transformers'
   ``RepetitionPenaltyLogitsProcessor`` (CTRL, Keskar et al. 2019): a seen token's logit ``l``
   becomes ``l * p`` when ``l < 0``, else ``l / p``;
2. presence and frequency penalties on the generated tokens (OpenAI's definition, as vLLM applies it):
   ``l -= frequency_penalty * count + presence_penalty * (count > 0)``;
3. logit bias: ``{token id: value}`` added (OpenAI ``logit_bias``);
4. temperature: ``l / T`` (``TemperatureLogitsWarper``);
5. top-k: keep the tokens whose logit is at least the k-th largest (ties at the k-th kept), as
   ``TopKLogitsWarper``;
6. top-p (nucleus, Holtzman et al. 2019): sort ascending, drop the tokens whose cumulative probability
   is at most ``1 - top_p``, keep the most likely one always, as ``TopPLogitsWarper``;
7. min-p: drop the tokens whose probability is below ``min_p`` times the most likely token's, as
   ``MinPLogitsWarper``.

Dropped tokens get ``-inf``. Then a token is drawn from the softmax of what is left with a seeded
``numpy.random.Generator`` (:class:`Sampler`; one uniform per row per step, so the same seed gives the
same tokens). Greedy decoding (``temperature=0`` or ``do_sample=False``) takes the argmax of the
penalised logits, the lowest index on ties (``numpy.argmax`` = ``torch.argmax``); temperature and the
filters do not change an argmax, so they are skipped.

Constraints (structured output, :class:`builder.structured.GrammarConstraint`): before the chain, each
constrained row's logits are masked (``-inf`` for the tokens its grammar does not allow), so the penalties,
filters and logprobs see the masked logits (as vLLM applies its guided-decoding masks before sampling); the
chosen token is then accepted into the row's constraint.

Logprobs (``logprobs=N``): the log-softmax of the *processed* logits (after every step above, as vLLM's
``logprobs_mode="processed_logprobs"``) of the chosen token and of the N most likely tokens; a dropped
token has ``-inf``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["SamplingParams", "Sampler", "SampleOutput", "MAX_N", "MAX_LOGPROBS", "process_logits",
           "apply_repetition_penalty", "apply_presence_frequency_penalty", "apply_logit_bias", "apply_temperature",
           "apply_top_k", "apply_top_p", "apply_min_p", "log_softmax", "check_constraints"]

MAX_N = 128
"""The most completions (``n``) one request asks for."""

MAX_LOGPROBS = 20
"""The most alternatives ``logprobs`` reports per token (OpenAI's limit)."""

MAX_LOGIT_BIAS = 1 << 16
"""The most entries of ``logit_bias``."""


def _number(name: str, value, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    ok = (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
    if not ok or math.isnan(v):
        raise ValueError(f"{name} must be in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}, got {value!r}")
    return v


def _integer(name: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an int in {lo}..{hi}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen (the names of OpenAI's API and HF ``GenerationConfig``).

    ``temperature`` >= 0 (0: greedy); ``do_sample=False``: greedy whatever the temperature;
    ``top_k`` >= 0 (0: off); ``top_p`` in (0, 1] (1: off); ``min_p`` in [0, 1] (0: off);
    ``repetition_penalty`` > 0 (1: off); ``presence_penalty`` / ``frequency_penalty`` in [-2, 2];
    ``logit_bias``: token id -> value in [-100, 100]; ``seed``: an int >= 0 or None (fresh entropy);
    ``n``: completions per prompt, 1 .. :data:`MAX_N`; ``logprobs``: None, or how many top alternatives
    to report (0 .. :data:`MAX_LOGPROBS`; 0 reports the chosen token's only).

    Raises ValueError naming the parameter for a value out of range or of the wrong type.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    do_sample: bool = True
    seed: int | None = None
    n: int = 1
    logprobs: int | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "temperature", _number("temperature", self.temperature, 0.0, math.inf, hi_open=True))
        set_(self, "top_k", _integer("top_k", self.top_k, 0, 1 << 31))
        set_(self, "top_p", _number("top_p", self.top_p, 0.0, 1.0, lo_open=True))
        set_(self, "min_p", _number("min_p", self.min_p, 0.0, 1.0))
        set_(self, "repetition_penalty", _number("repetition_penalty", self.repetition_penalty, 0.0, math.inf,
                                                 lo_open=True, hi_open=True))
        set_(self, "presence_penalty", _number("presence_penalty", self.presence_penalty, -2.0, 2.0))
        set_(self, "frequency_penalty", _number("frequency_penalty", self.frequency_penalty, -2.0, 2.0))
        if not isinstance(self.do_sample, (bool, np.bool_)):
            raise ValueError(f"do_sample must be a bool, got {self.do_sample!r}")
        if self.seed is not None:
            set_(self, "seed", _integer("seed", self.seed, 0, (1 << 64) - 1))
        set_(self, "n", _integer("n", self.n, 1, MAX_N))
        if self.logprobs is not None:
            set_(self, "logprobs", _integer("logprobs", self.logprobs, 0, MAX_LOGPROBS))
        bias = self.logit_bias if self.logit_bias is not None else {}
        if not isinstance(bias, Mapping):
            raise ValueError(f"logit_bias must be a mapping token id -> bias, got {type(bias).__name__}")
        if len(bias) > MAX_LOGIT_BIAS:
            raise ValueError(f"logit_bias has {len(bias)} entries, more than {MAX_LOGIT_BIAS}")
        clean = {}
        for key, value in bias.items():
            tid = int(key) if isinstance(key, str) and key.isdigit() else key   # JSON object keys are strings
            clean[_integer("logit_bias key", tid, 0, (1 << 63) - 1)] = _number(f"logit_bias[{tid}]", value,
                                                                                -100.0, 100.0)
        set_(self, "logit_bias", clean)

    @property
    def greedy(self) -> bool:
        """True when the argmax is taken (``temperature == 0`` or ``do_sample=False``)."""
        return self.temperature == 0.0 or not self.do_sample

    @classmethod
    def from_kwargs(cls, **kwargs) -> "SamplingParams":
        """``SamplingParams(**kwargs)``, with ValueError (not TypeError) naming an unknown parameter."""
        known = cls.__dataclass_fields__
        unknown = sorted(k for k in kwargs if k not in known)
        if unknown:
            raise ValueError(f"unknown sampling parameter(s) {unknown}; known: {sorted(known)}")
        return cls(**kwargs)


def _check_logits(logits: np.ndarray) -> np.ndarray:
    if not isinstance(logits, np.ndarray) or logits.ndim != 2 or not np.issubdtype(logits.dtype, np.floating):
        raise ValueError("logits must be a float array (batch, vocab)")
    return logits.astype(np.float64, copy=True)


def apply_repetition_penalty(logits: np.ndarray, seen: np.ndarray, penalty: float) -> np.ndarray:
    """HF's repetition penalty: where ``seen`` (bool (batch, vocab): the token occurred in the prompt or
    the output), ``l < 0 -> l * penalty`` and ``l >= 0 -> l / penalty``. Returns a new float64 array."""
    out = _check_logits(logits)
    if penalty != 1.0:
        pen = np.where(out < 0, out * penalty, out / penalty)
        out = np.where(seen, pen, out)
    return out


def apply_presence_frequency_penalty(logits: np.ndarray, counts: np.ndarray, presence: float,
                                     frequency: float) -> np.ndarray:
    """OpenAI's penalties: ``l - frequency * count - presence * (count > 0)``, ``counts`` int (batch,
    vocab) the times each token was generated. Returns a new float64 array."""
    out = _check_logits(logits)
    if presence or frequency:
        out -= frequency * counts + presence * (counts > 0)
    return out


def apply_logit_bias(logits: np.ndarray, bias: Mapping[int, float]) -> np.ndarray:
    """``logits[:, id] += bias[id]`` for each id below the vocabulary size (others are ignored: no
    logit to bias). Returns a new float64 array."""
    out = _check_logits(logits)
    for tid, value in bias.items():
        if 0 <= tid < out.shape[1]:
            out[:, tid] += value
    return out


def apply_temperature(logits: np.ndarray, temperature: float) -> np.ndarray:
    """``logits / temperature`` (temperature > 0). Returns a new float64 array."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 to scale logits, got {temperature!r}")
    return _check_logits(logits) / temperature


def apply_top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """Keep the logits at least as large as the k-th largest of each row (so ties at the k-th are kept,
    as ``TopKLogitsWarper``), the rest ``-inf``; ``k = 0`` or ``k >= vocab`` keeps all."""
    out = _check_logits(logits)
    vocab = out.shape[1]
    if 0 < k < vocab:
        kth = np.partition(out, vocab - k, axis=1)[:, vocab - k: vocab - k + 1]
        out[out < kth] = -np.inf
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """``log(softmax(logits))`` per row in float64 (``-inf`` stays ``-inf``)."""
    x = np.asarray(logits, dtype=np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def apply_top_p(logits: np.ndarray, top_p: float) -> np.ndarray:
    """Nucleus filtering as ``TopPLogitsWarper``: sort each row ascending (stable), drop the tokens whose
    cumulative probability is ``<= 1 - top_p``, always keeping the most likely one; ``top_p = 1`` keeps
    all. Returns a new float64 array."""
    out = _check_logits(logits)
    if top_p >= 1.0:
        return out
    order = np.argsort(out, axis=1, kind="stable")
    sorted_logits = np.take_along_axis(out, order, axis=1)
    cum = np.cumsum(_softmax(sorted_logits), axis=1)
    drop_sorted = cum <= 1.0 - top_p
    drop_sorted[:, -1] = False
    drop = np.zeros_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, axis=1)
    out[drop] = -np.inf
    return out


def apply_min_p(logits: np.ndarray, min_p: float) -> np.ndarray:
    """min-p filtering as ``MinPLogitsWarper``: drop the tokens whose probability is below ``min_p`` times
    the row's largest, keeping the most likely one; ``min_p = 0`` keeps all."""
    out = _check_logits(logits)
    if min_p <= 0.0:
        return out
    probs = _softmax(out)
    drop = probs < min_p * probs.max(axis=1, keepdims=True)
    drop[np.arange(out.shape[0]), np.argmax(probs, axis=1)] = False
    out[drop] = -np.inf
    return out


def process_logits(logits: np.ndarray, params: SamplingParams, seen: np.ndarray | None = None,
                   counts: np.ndarray | None = None) -> np.ndarray:
    """The whole chain (module docstring) on ``logits`` float (batch, vocab): ``seen`` bool (batch, vocab)
    for the repetition penalty, ``counts`` int (batch, vocab) of generated tokens for presence / frequency
    (None: nothing seen). Greedy parameters stop after the logit bias (the argmax is what is left).
    Returns float64 (batch, vocab)."""
    out = _check_logits(logits)
    if seen is not None and params.repetition_penalty != 1.0:
        out = apply_repetition_penalty(out, seen, params.repetition_penalty)
    if counts is not None:
        out = apply_presence_frequency_penalty(out, counts, params.presence_penalty, params.frequency_penalty)
    if params.logit_bias:
        out = apply_logit_bias(out, params.logit_bias)
    if params.greedy:
        return out
    out = apply_temperature(out, params.temperature)
    out = apply_top_k(out, params.top_k)
    out = apply_top_p(out, params.top_p)
    return apply_min_p(out, params.min_p)


def check_constraints(constraints: Sequence[Any] | None, rows: int) -> list | None:
    """``constraints`` (None, or one per row: None or an object with ``mask`` and ``accept``) as a list, or None
    when none constrains. Raises ValueError for a count that is not ``rows``, TypeError for an entry without
    those methods."""
    if constraints is None:
        return None
    if isinstance(constraints, (str, bytes)) or not isinstance(constraints, Sequence):
        raise TypeError(f"constraints must be a list (one per row) or None, got {type(constraints).__name__}")
    if len(constraints) != rows:
        raise ValueError(f"constraints must have one entry per row ({rows}), got {len(constraints)}")
    for r, c in enumerate(constraints):
        if c is not None and not (callable(getattr(c, "mask", None)) and callable(getattr(c, "accept", None))):
            raise TypeError(f"constraints[{r}] must have mask() and accept() (a GrammarConstraint), got "
                            f"{type(c).__name__}")
    return list(constraints) if any(c is not None for c in constraints) else None


@dataclass
class SampleOutput:
    """One step's choice for each row: ``token_ids`` int64 (rows,); with logprobs, ``logprobs`` float64
    (rows,) of the chosen tokens, ``top_ids`` int64 (rows, N) and ``top_logprobs`` float64 (rows, N), the N
    most likely tokens, most likely first (ties: lowest id first)."""

    token_ids: np.ndarray
    logprobs: np.ndarray | None = None
    top_ids: np.ndarray | None = None
    top_logprobs: np.ndarray | None = None


class Sampler:
    """The sampler of one generation: ``rows`` sequences over a ``vocab``, with the tokens each has seen.

    ``prompt_ids``: per row, the prompt's token ids (for the repetition penalty). Each call
    ``sampler(logits)`` (float (rows, vocab)) chooses one token per row, records it as seen (and as
    generated, for presence / frequency) and returns a :class:`SampleOutput`. The draw is
    ``searchsorted(cumsum(p), u)`` with ``u`` uniform from ``numpy.random.default_rng(params.seed)``, one
    per row per call in row order, so a seed reproduces a run.

    ``constraints``: None, or one entry per row, None or an object with ``mask(logits_row)`` (sets ``-inf`` in
    place where a token is not allowed) and ``accept(token_id)`` (a
    :class:`builder.structured.GrammarConstraint`): the row's logits are masked before the chain and the
    chosen token accepted (module docstring). Raises TypeError for params that are not
    :class:`SamplingParams` or a constraint without those methods; ValueError for a ``constraints`` list not
    one per row.
    """

    def __init__(self, params: SamplingParams, prompt_ids: Sequence[np.ndarray] | np.ndarray, vocab: int,
                 constraints: Sequence[Any] | None = None):
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be SamplingParams, got {type(params).__name__}")
        self.params = params
        self.vocab = int(vocab)
        rows = len(prompt_ids)
        self.constraints = check_constraints(constraints, rows)
        self.rng = np.random.default_rng(params.seed)
        needs_seen = params.repetition_penalty != 1.0
        needs_counts = params.presence_penalty != 0.0 or params.frequency_penalty != 0.0
        self.seen = np.zeros((rows, self.vocab), dtype=bool) if needs_seen else None
        self.counts = np.zeros((rows, self.vocab), dtype=np.int64) if needs_counts else None
        if self.seen is not None:
            for r, ids in enumerate(prompt_ids):
                ids = np.asarray(ids, dtype=np.int64)
                self.seen[r, ids[(ids >= 0) & (ids < self.vocab)]] = True

    def __call__(self, logits: np.ndarray, active: np.ndarray | None = None) -> SampleOutput:
        """Choose one token per row from ``logits`` (rows, vocab); see the class docstring. ``active``: bool
        (rows,), the rows whose tokens are used (None: all); the constraints of the others are left alone."""
        use = [] if self.constraints is None else [r for r, c in enumerate(self.constraints)
                                                   if c is not None and (active is None or active[r])]
        if use:
            logits = _check_logits(logits)
            for r in use:
                self.constraints[r].mask(logits[r])
        x = process_logits(logits, self.params, self.seen, self.counts)
        if x.shape[1] != self.vocab:
            raise ValueError(f"logits have {x.shape[1]} entries per row, the sampler was made for {self.vocab}")
        rows = np.arange(x.shape[0])
        if self.params.greedy:
            ids = np.argmax(x, axis=1)
        else:
            probs = _softmax(x)
            cum = np.cumsum(probs, axis=1)
            u = self.rng.random(x.shape[0]) * cum[:, -1]
            ids = np.array([min(int(np.searchsorted(cum[r], u[r], side="right")), self.vocab - 1) for r in rows],
                           dtype=np.int64)
            bad = ~np.isfinite(x[rows, ids])   # rounding at a boundary: the last kept token instead
            if bad.any():
                ids[bad] = [int(np.flatnonzero(np.isfinite(x[r]))[-1]) for r in rows[bad]]
        ids = ids.astype(np.int64)
        for r in use:
            self.constraints[r].accept(int(ids[r]))
        if self.seen is not None:
            self.seen[rows, ids] = True
        if self.counts is not None:
            self.counts[rows, ids] += 1
        out = SampleOutput(ids)
        if self.params.logprobs is not None:
            lp = log_softmax(x)
            out.logprobs = lp[rows, ids]
            n = min(self.params.logprobs, self.vocab)
            order = np.argsort(-lp, axis=1, kind="stable")[:, :n]
            out.top_ids = order.astype(np.int64)
            out.top_logprobs = np.take_along_axis(lp, order, axis=1)
        return out

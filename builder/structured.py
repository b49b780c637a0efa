"""Structured output: OpenAI's ``response_format`` as a grammar that constrains decoding, token by token.

:class:`ResponseFormat` parses what a request gives (``None`` or OpenAI's ``response_format`` object):

- ``{"type": "text"}``: free text, no constraint;
- ``{"type": "json_object"}``: any JSON object (OpenAI's JSON mode);
- ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ..., "description": ...}}``:
  JSON that follows the schema (OpenAI's structured outputs);
- ``{"type": "regex", "regex": "..."}``: ours (vLLM's ``guided_regex``): text that matches the regular expression
  whole (the syntax of Rust's ``regex`` crate, as llguidance reads it; Python's ``re`` agrees on the common part).

:meth:`ResponseFormat.grammar` turns it into an llguidance grammar; :class:`GrammarConstraint` follows one
completion: before each token it masks the logits of the tokens that cannot continue the grammar (``-inf``, as
vLLM's and llama.cpp's grammar samplers do), after it accepts the chosen token. A JSON grammar is compact by
default (no whitespace between tokens: llguidance's ``whitespace_flexible`` off), so a model cannot spend its
budget on blank space; a schema may turn it back on with llguidance's ``"x-guidance": {"whitespace_flexible":
true}``.

Why llguidance (the Rust grammar engine of Microsoft's Guidance; one of vLLM's guided-decoding backends) and not
xgrammar: a plain pip wheel with no torch dependency (xgrammar's needs torch; our runtime is numpy), Lark grammars,
regular expressions and JSON schemas in one grammar format, and fast token masks computed over a token trie (its
lexer is a derivative-based regex engine, its parser Earley's: a JSON schema's mask took a median 45 us per step on
a 1000-id vocabulary here, AMD EPYC Zen 3, ``allowed()`` included), with bounded work per step (``LLParserLimits``:
the fuel of the lexer, the Earley items per step, the lexer states, the grammar size), so an untrusted schema or
regex costs bounded time and memory (one past the limits fails with a ValueError: a million-state regex after about
3 s of CPU here).

Bounds: a schema serialized to at most :data:`MAX_SCHEMA_CHARS` characters, a regex of at most
:data:`MAX_REGEX_CHARS`. llguidance is imported when a grammar is first built (it is the ``serve`` extra).
"""
from __future__ import annotations

import json
import re
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["ResponseFormat", "GrammarConstraint", "ll_tokenizer", "MAX_SCHEMA_CHARS", "MAX_REGEX_CHARS",
           "JSON_DEFAULTS"]

MAX_SCHEMA_CHARS = 100_000
"""The longest JSON schema (characters, serialized)."""

MAX_REGEX_CHARS = 10_000
"""The longest regular expression (characters)."""

MAX_DESCRIPTION_CHARS = 10_000
"""The longest ``json_schema.description``."""

JSON_DEFAULTS = {"whitespace_flexible": False}
"""llguidance's JSON options applied before the schema's own ``x-guidance`` (which may override them)."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")       # OpenAI's rule for json_schema.name
_TYPES = ("text", "json_object", "json_schema", "regex")
_KEYS = {"text": {"type"}, "json_object": {"type"}, "json_schema": {"type", "json_schema"}, "regex": {"type", "regex"}}
_SCHEMA_KEYS = {"name", "description", "schema", "strict"}
_MAX_ERROR_CHARS = 300


def _llguidance():
    try:
        import llguidance
    except ImportError as exc:      # pragma: no cover - llguidance is a test dependency
        raise ImportError("response_format needs llguidance (pip install llguidance, or the serve extra)") from exc
    return llguidance


def _short(message: str) -> str:
    return " ".join(message.split())[:_MAX_ERROR_CHARS]


def _unknown(where: str, value: Mapping, known: set[str]) -> None:
    extra = sorted(str(k) for k in value if k not in known)
    if extra:
        raise ValueError(f"{where} has unknown field(s) {extra[:8]}; known: {sorted(known)}")


@dataclass(frozen=True)
class ResponseFormat:
    """A parsed ``response_format``: ``type`` (``"text"``, ``"json_object"``, ``"json_schema"`` or ``"regex"``);
    for ``json_schema``, ``schema`` (the schema serialized as JSON, str), ``name``, ``description`` and
    ``strict`` (bool or None; the grammar is enforced either way, as OpenAI's strict mode); for ``regex``,
    ``regex``. Make one with :meth:`parse`."""

    type: str = "text"
    schema: str | None = None
    name: str | None = None
    description: str | None = None
    strict: bool | None = None
    regex: str | None = None

    @classmethod
    def parse(cls, value: "Mapping[str, Any] | ResponseFormat | None") -> "ResponseFormat":
        """``value``: None (free text), a :class:`ResponseFormat` (returned as it is) or OpenAI's
        ``response_format`` object (module docstring). Raises ValueError naming ``response_format`` and the field
        for a value of the wrong shape or type, an unknown ``type`` or field, a schema that is not a JSON object
        or longer than :data:`MAX_SCHEMA_CHARS` serialized, a regex longer than :data:`MAX_REGEX_CHARS`."""
        if value is None:
            return cls()
        if isinstance(value, ResponseFormat):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"response_format must be an object like {{\"type\": \"json_object\"}} or None, "
                             f"got {type(value).__name__}")
        kind = value.get("type")
        if not isinstance(kind, str) or kind not in _TYPES:
            raise ValueError(f"response_format.type must be one of {list(_TYPES)}, got {kind!r:.80}")
        _unknown("response_format", value, _KEYS[kind])
        if kind == "regex":
            regex = value.get("regex")
            if not isinstance(regex, str):
                raise ValueError(f"response_format.regex must be a string, got {type(regex).__name__}")
            if len(regex) > MAX_REGEX_CHARS:
                raise ValueError(f"response_format.regex has {len(regex)} characters, more than {MAX_REGEX_CHARS}")
            return cls("regex", regex=regex)
        if kind != "json_schema":
            return cls(kind)
        spec = value.get("json_schema")
        if not isinstance(spec, Mapping):
            raise ValueError(f"response_format.json_schema must be an object, got {type(spec).__name__}")
        _unknown("response_format.json_schema", spec, _SCHEMA_KEYS)
        name = spec.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError("response_format.json_schema.name must be 1 to 64 letters, digits, '_' or '-', got "
                             f"{name!r:.80}")
        description = spec.get("description")
        if description is not None and (not isinstance(description, str)
                                        or len(description) > MAX_DESCRIPTION_CHARS):
            raise ValueError(f"response_format.json_schema.description must be a string of at most "
                             f"{MAX_DESCRIPTION_CHARS} characters")
        strict = spec.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise ValueError(f"response_format.json_schema.strict must be a bool, got {strict!r:.80}")
        schema = spec.get("schema")
        if not isinstance(schema, Mapping):
            raise ValueError(f"response_format.json_schema.schema must be an object, got {type(schema).__name__}")
        try:
            text = json.dumps(schema, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"response_format.json_schema.schema must be JSON: {_short(str(exc))}") from None
        if len(text) > MAX_SCHEMA_CHARS:
            raise ValueError(f"response_format.json_schema.schema is {len(text)} characters serialized, more than "
                             f"{MAX_SCHEMA_CHARS}")
        return cls("json_schema", schema=text, name=name, description=description, strict=strict)

    @property
    def field(self) -> str:
        """The request field a grammar error is about (``response_format.json_schema.schema``, ...)."""
        return {"json_schema": "response_format.json_schema.schema", "regex": "response_format.regex"}.get(
            self.type, "response_format")

    def grammar(self) -> str | None:
        """The llguidance grammar (its JSON form, str) of this format, checked by llguidance's
        ``LLMatcher.validate_grammar_with_warnings``; None for ``text``. Raises ValueError naming
        :attr:`field` for a schema or regex llguidance refuses (an unknown type, a dangling ``$ref``, an unclosed
        class, ...); ImportError without llguidance."""
        return self._grammar

    @cached_property
    def _grammar(self) -> str | None:
        if self.type == "text":
            return None
        matcher = _llguidance().LLMatcher
        if self.type == "regex":
            grammar = matcher.grammar_from_regex(self.regex)
        else:
            schema = self.schema if self.type == "json_schema" else '{"type":"object"}'
            try:
                grammar = matcher.grammar_from_json_schema(schema, defaults=dict(JSON_DEFAULTS))
            except ValueError as exc:
                raise ValueError(f"{self.field}: {_short(str(exc))}") from None
        failed, messages = matcher.validate_grammar_with_warnings(grammar, limits=_limits())
        if failed:
            raise ValueError(f"{self.field}: {_short(messages[0] if messages else 'invalid')}")
        return grammar


def _limits():
    """llguidance's default parser limits, with short error messages (no parser state or grammar in them)."""
    return _llguidance().LLParserLimits(verbose_errors=False)


_LL_TOKENIZERS: "OrderedDict[tuple[int, tuple[int, ...]], tuple[weakref.ref, Any]]" = OrderedDict()
_MAX_LL_TOKENIZERS = 8


def ll_tokenizer(tokenizer: "Tokenizer", eos_ids: Sequence[int]):
    """llguidance's ``LLTokenizer`` for a ``tokenizers.Tokenizer`` with ``eos_ids`` (ints, at least one) as its
    end-of-sequence tokens (what a finished grammar allows). Built from the tokenizer's JSON (padding and
    truncation off), cached per tokenizer object and eos ids (the last :data:`_MAX_LL_TOKENIZERS`; a few ms for
    a small vocabulary, about a second for 150k ids).

    Raises TypeError for a tokenizer that is not a ``tokenizers.Tokenizer``; ValueError naming ``eos_ids`` for no
    ids or ids past the tokenizer's vocabulary, and for a tokenizer llguidance cannot read byte by byte (it needs
    a byte-level decoder, as GPT-2's BPE, or SentencePiece's byte fallback)."""
    from tokenizers import Tokenizer

    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer must be a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    eos = tuple(int(t) for t in eos_ids)
    if not eos:
        raise ValueError("eos_ids: a grammar-constrained completion needs an eos token id to end with; none given")
    if any(not 0 <= t < size for t in eos):
        raise ValueError(f"eos_ids {list(eos)[:8]} must be ids of the tokenizer's vocabulary (0..{size - 1})")
    key = (id(tokenizer), eos)
    hit = _LL_TOKENIZERS.get(key)
    if hit is not None and hit[0]() is tokenizer:
        _LL_TOKENIZERS.move_to_end(key)
        return hit[1]
    plain = Tokenizer.from_str(tokenizer.to_str())
    plain.no_padding()
    plain.no_truncation()
    try:
        built = _llguidance().LLTokenizer(plain.to_str(), eos_token=list(eos))
    except ValueError as exc:
        raise ValueError("response_format needs a tokenizer llguidance can read byte by byte (a byte-level BPE "
                         f"decoder, or SentencePiece's byte fallback): {_short(str(exc))}") from None
    _LL_TOKENIZERS[key] = (weakref.ref(tokenizer), built)
    _LL_TOKENIZERS.move_to_end(key)
    while len(_LL_TOKENIZERS) > _MAX_LL_TOKENIZERS:
        _LL_TOKENIZERS.popitem(last=False)
    return built


class GrammarConstraint:
    """One completion held to a :class:`ResponseFormat`'s grammar (llguidance's ``LLMatcher``).

    ``response_format``: a :class:`ResponseFormat` or what :meth:`ResponseFormat.parse` takes (not ``text``);
    ``tokenizer``: the model's ``tokenizers.Tokenizer``; ``vocab``: the width of the model's logits (its token
    embedding rows, possibly padded past the tokenizer's ids), None for the tokenizer's size; ``eos_ids``: the ids
    that end the completion (at least one). Per step: :meth:`mask` the logits, choose, :meth:`accept` the token.
    When :attr:`is_finished`, the allowed tokens are the eos ids.

    Raises ValueError naming the field for a bad ``response_format`` (and for ``text``: nothing to constrain),
    a bad ``vocab`` or ``eos_ids``, or a grammar llguidance cannot build; see :func:`ll_tokenizer`.
    """

    def __init__(self, response_format: "ResponseFormat | Mapping[str, Any]", tokenizer: "Tokenizer",
                 vocab: int | None, eos_ids: Sequence[int]):
        self.response_format = ResponseFormat.parse(response_format)
        grammar = self.response_format.grammar()
        if grammar is None:
            raise ValueError("response_format of type 'text' constrains nothing: pass None instead")
        self._ll = ll_tokenizer(tokenizer, eos_ids)
        self.eos_ids = np.array(sorted(set(self._ll.eos_tokens)), dtype=np.int64)
        if vocab is None:
            vocab = self._ll.vocab_size
        if isinstance(vocab, bool) or not isinstance(vocab, (int, np.integer)) or not 1 <= vocab <= 1 << 31:
            raise ValueError(f"vocab must be an int in 1..{1 << 31}, got {vocab!r}")
        self.vocab = int(vocab)
        self._matcher = _llguidance().LLMatcher(self._ll, grammar, log_level=0, limits=_limits())
        self._bias: bytes | None = None
        self._next_bias()        # the first mask now (kept for the first step): its errors come at call time
        self._check("llguidance cannot build its grammar")

    def copy(self) -> "GrammarConstraint":
        """An independent constraint in the same state (llguidance's ``deep_copy``: no grammar rebuilt), for the
        other completions of ``n``."""
        other = object.__new__(GrammarConstraint)
        other.__dict__.update(self.__dict__)
        other._matcher = self._matcher.deep_copy()
        return other

    @property
    def is_finished(self) -> bool:
        """True when the grammar is complete and nothing but an eos id may follow (llguidance's
        ``is_stopped``)."""
        return bool(self._matcher.is_stopped()) and not self._matcher.is_error()

    def _check(self, what: str = "the grammar failed") -> None:
        if self._matcher.is_error():
            raise ValueError(f"{self.response_format.field}: {what}: {_short(self._matcher.get_error())}")

    def _next_bias(self) -> bytes:
        """llguidance's mask of the next token (one byte per id: 0 or 200), computed once per state."""
        if self._bias is None:
            self._bias = self._matcher.compute_logit_bias()
        return self._bias

    def allowed(self, vocab: int | None = None) -> np.ndarray:
        """bool (``vocab`` or :attr:`vocab`,): the tokens that can come next (False past the tokenizer's ids);
        the eos ids alone when :attr:`is_finished`. Raises ValueError when the matcher failed (a resource limit
        of llguidance)."""
        self._check()
        width = self.vocab if vocab is None else int(vocab)
        out = np.zeros(width, dtype=bool)
        if self._matcher.is_stopped():
            out[self.eos_ids[self.eos_ids < width]] = True
            return out
        bias = np.frombuffer(self._next_bias(), dtype=np.uint8)   # 0 or 200 per token id
        self._check()
        n = min(width, bias.shape[0])
        out[:n] = bias[:n] != 0
        return out

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """Set ``logits`` (float (vocab,), any width: a model's padded rows included) to ``-inf`` where a token
        is not :meth:`allowed`, in place; returns it. Raises ValueError when no token of that width is
        allowed, or for logits that are not a 1-D float array."""
        if not isinstance(logits, np.ndarray) or logits.ndim != 1 or not np.issubdtype(logits.dtype, np.floating):
            raise ValueError("logits must be a float array (vocab,)")
        ok = self.allowed(logits.shape[0])
        if not ok.any():
            raise ValueError(f"{self.response_format.field}: no token of the model's {logits.shape[0]} can "
                             "continue the grammar")
        logits[~ok] = -np.inf
        return logits

    def accept(self, token_id: int) -> None:
        """Advance past ``token_id`` (an eos id once :attr:`is_finished` leaves it there). Raises ValueError,
        the state unchanged, for a token the grammar does not allow here; ValueError too when llguidance fails on
        an allowed one (a resource limit: the constraint stays failed)."""
        self._check()
        tid = int(token_id)
        if self._matcher.is_stopped():
            if tid in self.eos_ids:
                return
            raise ValueError(f"{self.response_format.field}: token {tid} after the grammar's end (only eos)")
        if not 0 <= tid < self._ll.vocab_size or self._matcher.validate_tokens([tid]) != 1:
            raise ValueError(f"{self.response_format.field}: token {tid} does not continue the grammar")
        self._bias = None
        if not self._matcher.consume_token(tid):
            self._check()

"""Text out of a stream of token ids: incremental detokenization that only ever yields whole characters, and stop
strings that end a completion (the text stops before them) without ever streaming a piece of one.

:class:`IncrementalDetokenizer` decodes a window of the recent ids twice, with and without the new one, and
yields the difference (the offsets method of HF text-generation-inference and vLLM's ``detokenize_incrementally``):
decoding a window rather than one id at a time keeps what a decoder does at token boundaries (a Metaspace
``▁`` becoming a space, byte-level tokens joining into one UTF-8 character). While the window's text ends with
U+FFFD (a character whose bytes are split over tokens, decoded lossily) it is held back, for at most
:data:`MAX_HELD_TOKENS` tokens (a UTF-8 character has at most 4 bytes; after that the bytes are not UTF-8 and
are yielded as U+FFFD).

:class:`StopStrings` takes that text piece by piece: it yields what can no longer become part of a stop string
and holds back the longest end of the text that is the start of one, so that the streamed text is always a
prefix of the final text (the text before the first stop string, which is not included, as OpenAI's ``stop``).

:class:`CompletionText` is one completion's text as its tokens come: the two above and the stop ids (an eos id
ends the completion and is not part of its text), shared by ``m.complete`` and the server's engine.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["IncrementalDetokenizer", "StopStrings", "CompletionText", "MAX_HELD_TOKENS", "MAX_STOP_STRINGS", "MAX_STOP_CHARS"]

MAX_HELD_TOKENS = 4
"""The most tokens held back waiting for the rest of a character."""

MAX_STOP_STRINGS = 64
"""The most stop strings of one request."""

MAX_STOP_CHARS = 1024
"""The longest stop string (characters)."""


class IncrementalDetokenizer:
    """``push(token_id) -> str``: the text one more token adds, whole characters only; ``flush() -> str``:
    what is still held at the end. ``text`` is everything yielded so far (equal, after :meth:`flush`, to
    ``tokenizer.decode(ids, skip_special_tokens=...)`` for tokenizers whose decoding is a concatenation per
    character, such as byte-level BPE).

    ``tokenizer``: a ``tokenizers.Tokenizer``; ``skip_special_tokens`` drops special tokens (eos, ...) from
    the text, as ``decode`` does.
    """

    def __init__(self, tokenizer: "Tokenizer", skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self.text = ""
        self._prefix = 0     # start of the decoded window
        self._read = 0       # ids before this are yielded

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=self.skip_special_tokens) if ids else ""

    def push(self, token_id: int) -> str:
        """Add one token id; return the text it completes ("" while a character is incomplete)."""
        self.ids.append(int(token_id))
        before = self._decode(self.ids[self._prefix:self._read])
        after = self._decode(self.ids[self._prefix:])
        held = len(self.ids) - self._read
        if after.endswith("\ufffd") and held < MAX_HELD_TOKENS:
            return ""
        if not after.startswith(before):   # the decoder changed earlier text (rare): yield only what is new
            before = after[:len(before)]
        new = after[len(before):]
        self._prefix, self._read = self._read, len(self.ids)
        self.text += new
        return new

    def flush(self) -> str:
        """The text of the tokens still held (an incomplete character becomes U+FFFD, as ``decode`` does)."""
        if self._read == len(self.ids):
            return ""
        before = self._decode(self.ids[self._prefix:self._read])
        after = self._decode(self.ids[self._prefix:])
        new = after[len(before):]
        self._prefix = self._read = len(self.ids)
        self.text += new
        return new


class StopStrings:
    """``push(text) -> (safe, stopped)``: of the text so far, the part that can be streamed now, and whether a
    stop string was found (then ``safe`` ends just before it and later pushes are refused); ``flush() -> str``:
    the text held back, at the end of a completion that met no stop string.

    ``stops``: at most :data:`MAX_STOP_STRINGS` non-empty strings of at most :data:`MAX_STOP_CHARS`
    characters each (a single string is one stop). The earliest stop string in the text ends it. Raises
    ValueError for stops that are not strings, empty, too many or too long.
    """

    def __init__(self, stops: str | Iterable[str] | None):
        if stops is None:
            stops = []
        elif isinstance(stops, str):
            stops = [stops]
        stops = list(stops)[:MAX_STOP_STRINGS + 1]
        if len(stops) > MAX_STOP_STRINGS:
            raise ValueError(f"stop: more than {MAX_STOP_STRINGS} stop strings")
        for s in stops:
            if not isinstance(s, str) or not s or len(s) > MAX_STOP_CHARS:
                raise ValueError(f"stop: each stop string must be a non-empty string of at most {MAX_STOP_CHARS} "
                                 f"characters, got {s!r:.80}")
        self.stops = stops
        self.stopped = False
        self._held = ""

    def push(self, text: str) -> tuple[str, bool]:
        """Take ``text`` (the next piece of the completion); see the class docstring."""
        if self.stopped:
            raise ValueError("StopStrings.push after a stop string was found")
        pending = self._held + text
        if not self.stops:
            self._held = ""
            return pending, False
        hits = [i for i in (pending.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            self._held = ""
            return pending[:min(hits)], True
        keep = 0   # the longest end of pending that starts some stop string
        for s in self.stops:
            for n in range(min(len(s) - 1, len(pending)), keep, -1):
                if pending.endswith(s[:n]):
                    keep = n
                    break
        self._held = pending[len(pending) - keep:] if keep else ""
        return pending[:len(pending) - keep], False

    def flush(self) -> str:
        """The text held back (the end of a completion that stopped otherwise)."""
        held, self._held = self._held, ""
        return held


class CompletionText:
    """One completion's text, token by token: ``push(token_id, finish_reason=None) -> (text, end)``.

    ``text`` is what can be streamed now (whole characters, never a piece of a stop string); ``end`` is the
    finish reason when the completion ends with this token, else None: ``"stop"`` for a stop id (its text is
    left out) or a stop string (the text ends before it), else ``finish_reason``, the reason the caller ends
    it with this token (``"length"`` after ``max_tokens``, ``"stop"`` when a grammar is complete), whose
    held-back text is then flushed. ``tokenizer``: a ``tokenizers.Tokenizer``; ``stop``: as
    :class:`StopStrings` takes them (ValueError for bad ones); ``stop_ids``: the ids that end it (eos).
    After the end, :meth:`push` raises ValueError.
    """

    def __init__(self, tokenizer: "Tokenizer", stop: str | Iterable[str] | None, stop_ids: Iterable[int]):
        self.detokenizer = IncrementalDetokenizer(tokenizer)
        self.stops = StopStrings(stop)
        self.stop_ids = frozenset(int(t) for t in stop_ids)
        self.finish_reason: str | None = None

    def push(self, token_id: int, finish_reason: str | None = None) -> tuple[str, str | None]:
        """Take the next token (see the class docstring)."""
        if self.finish_reason is not None:
            raise ValueError("CompletionText.push after the completion ended")
        tid = int(token_id)
        if tid in self.stop_ids:        # an eos / stop id: not part of the text
            text, hit = self.stops.push(self.detokenizer.flush())
            end: str | None = "stop"
        else:
            text, hit = self.stops.push(self.detokenizer.push(tid))
            end = finish_reason
            if not hit and end is not None:
                more, hit = self.stops.push(self.detokenizer.flush())
                text += more
        if hit:
            end = "stop"
        elif end is not None:
            text += self.stops.flush()
        self.finish_reason = end
        return text, end

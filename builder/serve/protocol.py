"""The OpenAI API's request bodies as pydantic models, checked before anything runs, and the error body.

The fields are OpenAI's (``/v1/completions``, ``/v1/chat/completions``, ``/v1/embeddings``), with the sampling
extensions llama.cpp's server and vLLM accept (``top_k``, ``min_p``, ``repetition_penalty``, ``stop_token_ids``)
and a ``{"type": "regex", "regex": ...}`` ``response_format``. Unknown fields are refused (a misspelt parameter
is an error, not a silent default); fields of OpenAI's that this server does not implement (``tools``, ``echo``,
``suffix``, ``best_of`` other than ``n``, ``dimensions``) are refused by name. Every size is bounded.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..generation import MAX_NEW_TOKENS
from ..sampling import MAX_LOGIT_BIAS, MAX_LOGPROBS, MAX_N, SamplingParams

__all__ = ["CompletionRequest", "ChatCompletionRequest", "EmbeddingRequest", "ChatMessage", "StreamOptions",
           "error_body", "MAX_PROMPTS", "MAX_MESSAGES", "MAX_TEXT_CHARS", "MAX_EMBEDDING_INPUTS"]

MAX_PROMPTS = 64
"""The most prompts one completion request holds."""

MAX_MESSAGES = 1024
"""The most messages of one chat request."""

MAX_TEXT_CHARS = 1 << 20
"""The longest prompt, message or embedding input (characters)."""

MAX_EMBEDDING_INPUTS = 2048
"""The most texts one embedding request holds (OpenAI's limit)."""


def error_body(message: str, param: str | None = None, kind: str = "invalid_request_error",
               code: str | None = None) -> dict:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Strict):
    """``stream_options``: ``include_usage`` sends a last chunk with the token counts."""

    include_usage: bool = False


class _Sampling(_Strict):
    """The fields every generation request shares."""

    model: str = Field(max_length=256)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_NEW_TOKENS)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0, le=10.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    n: int = Field(default=1, ge=1, le=MAX_N)
    seed: int | None = Field(default=None, ge=0, le=2 ** 63 - 1)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = Field(default=None, max_length=1024)
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: dict[str, Any] | None = None
    user: str | None = Field(default=None, max_length=256)

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, value):
        if value is not None:
            if len(value) > MAX_LOGIT_BIAS:
                raise ValueError(f"at most {MAX_LOGIT_BIAS} entries")
            for key, v in value.items():
                if not key.isdigit() or len(key) > 12:
                    raise ValueError(f"keys must be token ids, got {key[:20]!r}")
                if not -100.0 <= v <= 100.0:
                    raise ValueError(f"values must be in [-100, 100], got {v}")
        return value

    def sampling_params(self, logprobs: int | None) -> SamplingParams:
        """The request's :class:`~builder.sampling.SamplingParams` (``temperature=0``: greedy). Raises ValueError
        as :class:`SamplingParams` does."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p,
                              repetition_penalty=self.repetition_penalty, presence_penalty=self.presence_penalty,
                              frequency_penalty=self.frequency_penalty, n=self.n, seed=self.seed,
                              logit_bias={int(k): float(v) for k, v in (self.logit_bias or {}).items()},
                              logprobs=logprobs)


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: ``prompt`` is a string, a list of strings (choices ``i * n + j``), or token
    ids (a list of ints, or a list of such lists); ``logprobs``: 0 .. 5 alternatives per token (OpenAI's
    bound); ``max_tokens`` defaults to 16 (OpenAI's)."""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @model_validator(mode="after")
    def _unsupported(self):
        if self.echo:
            raise ValueError("echo: not supported by this server")
        if self.suffix:
            raise ValueError("suffix: not supported by this server")
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of: only best_of = n is supported")
        return self

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value):
        items = [value] if isinstance(value, str) or (value and isinstance(value[0], int)) else value
        if not items:
            raise ValueError("the prompt is empty")
        if len(items) > MAX_PROMPTS:
            raise ValueError(f"at most {MAX_PROMPTS} prompts")
        for item in items:
            if isinstance(item, str) and len(item) > MAX_TEXT_CHARS:
                raise ValueError(f"a prompt has more than {MAX_TEXT_CHARS} characters")
            if isinstance(item, list) and (not item or len(item) > MAX_TEXT_CHARS or min(item) < 0):
                raise ValueError(f"a token-id prompt must hold 1 .. {MAX_TEXT_CHARS} non-negative ids")
        return value

    def prompts(self) -> list[str | list[int]]:
        """The prompts: strings or lists of token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and isinstance(p[0], int):
            return [list(p)]
        return list(p)


class ChatMessage(_Strict):
    """One message: ``role`` and ``content`` (a string, or a list of ``{"type": "text", "text": ...}`` parts);
    ``name`` is passed to the template."""

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = Field(default=None, max_length=256)

    @field_validator("content")
    @classmethod
    def _content(cls, value):
        if isinstance(value, list):
            parts = []
            for part in value[:MAX_MESSAGES + 1]:
                if part.get("type") != "text" or not isinstance(part.get("text"), str) or set(part) - {"type", "text"}:
                    raise ValueError("only text parts ({'type': 'text', 'text': ...}) are supported")
                parts.append(part["text"])
            value = "".join(parts)
        if value is not None and len(value) > MAX_TEXT_CHARS:
            raise ValueError(f"more than {MAX_TEXT_CHARS} characters")
        return value

    def for_template(self) -> dict[str, Any]:
        """The message as a chat template takes it."""
        out: dict[str, Any] = {"role": self.role, "content": self.content or ""}
        if self.name is not None:
            out["name"] = self.name
        return out


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``: ``messages``; ``logprobs`` (bool) with ``top_logprobs`` 0 .. 20;
    ``max_completion_tokens`` is ``max_tokens``'s newer name; tools are refused."""

    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_NEW_TOKENS)
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None

    @model_validator(mode="after")
    def _checks(self):
        if self.tools:
            raise ValueError("tools: tool calls are not supported by this server")
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs: needs logprobs=true")
        if self.max_completion_tokens is not None:
            if self.max_tokens is not None and self.max_tokens != self.max_completion_tokens:
                raise ValueError("max_completion_tokens: differs from max_tokens")
            self.max_tokens = self.max_completion_tokens
        return self

    def logprobs_count(self) -> int | None:
        """The alternatives per token to report (None: no logprobs)."""
        return (self.top_logprobs or 0) if self.logprobs else None


class EmbeddingRequest(_Strict):
    """``POST /v1/embeddings``: ``input`` a string or a list of at most :data:`MAX_EMBEDDING_INPUTS` strings;
    ``encoding_format`` ``float`` or ``base64`` (little-endian float32, as OpenAI's)."""

    model: str = Field(max_length=256)
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = Field(default=None, max_length=256)

    @field_validator("input")
    @classmethod
    def _input(cls, value):
        items = [value] if isinstance(value, str) else value
        if not items or len(items) > MAX_EMBEDDING_INPUTS:
            raise ValueError(f"input must hold 1 .. {MAX_EMBEDDING_INPUTS} texts")
        if any(not s or len(s) > MAX_TEXT_CHARS for s in items):
            raise ValueError(f"each input must be a non-empty string of at most {MAX_TEXT_CHARS} characters")
        return value

    @model_validator(mode="after")
    def _dimensions(self):
        if self.dimensions is not None:
            raise ValueError("dimensions: the model's embeddings have one size")
        return self

"""Chat templates: a conversation (``[{"role": ..., "content": ...}, ...]``) rendered into the prompt text a chat
model was trained on, from the ``chat_template`` of a checkpoint's ``tokenizer_config.json``, as HF transformers'
``PreTrainedTokenizerBase.apply_chat_template(messages, tokenize=False)`` renders it.

Templates are untrusted input (a checkpoint's files): they run in ``jinja2.sandbox.ImmutableSandboxedEnvironment``
(no attribute access to Python internals, no mutation of the values passed in), as transformers runs them, with
the same settings (``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols`` extension, a ``{% generation %}`` block
that renders its body) and globals: ``raise_exception(message)`` (a ValueError here), ``strftime_now(format)``,
``tojson`` without HTML escaping, ``namespace`` refusing underscore names. The template sees ``messages``,
``add_generation_prompt``, ``tools``, ``documents``, the special tokens (``bos_token``, ``eos_token``, ...) and any
extra keyword. Bounds: a template of at most :data:`MAX_TEMPLATE_CHARS`, at most :data:`MAX_MESSAGES` messages,
an output of at most :data:`MAX_RENDERED_CHARS` (the render stops there).
"""
from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Sequence

from runtime.files import read_regular

__all__ = ["ChatTemplate", "load_tokenizer_config", "special_tokens", "MAX_TEMPLATE_CHARS", "MAX_RENDERED_CHARS", "MAX_MESSAGES",
           "SPECIAL_TOKEN_KEYS"]

MAX_TEMPLATE_CHARS = 1 << 20
"""The longest template source (characters); real ones are a few KB."""

MAX_RENDERED_CHARS = 1 << 24
"""The longest rendered prompt (characters)."""

MAX_MESSAGES = 1 << 16
"""The most messages of one conversation."""

MAX_CONFIG_BYTES = 16 << 20
"""The largest ``tokenizer_config.json`` read (some embed long templates and added-token tables)."""

SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""The special tokens of ``tokenizer_config.json`` a template sees by name (transformers' ``special_tokens_map``)."""


def _environment():
    """The sandboxed environment with transformers' settings and globals (module docstring)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: the body, as it is (transformers tracks its span)."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    class Namespace(jinja2.utils.Namespace):
        """jinja's ``namespace`` that refuses attributes starting with ``_``."""

        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a chat template may not set the namespace attribute {name!r}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, namespace=Namespace,
                       dict=lambda *a, **k: dict(*a, **k))
    return env


def _plain(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` made of dicts, lists, strings, numbers, bools and None only (what a template
    may read); anything else is a ValueError."""
    if depth > 64:
        raise ValueError("chat messages are nested more than 64 levels deep")
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    raise ValueError(f"chat messages may hold dicts, lists, strings and numbers, not {type(value).__name__}")


class ChatTemplate:
    """A compiled chat template: ``ChatTemplate(source, special_tokens)`` then ``.render(messages, ...)``.

    ``source``: the Jinja text (``tokenizer_config.json``'s ``chat_template``); ``special_tokens``: name ->
    token text (``{"bos_token": "<s>", ...}``) passed to every render. Raises ValueError for a source that
    is not a string, too long, or not valid Jinja (with its line); ImportError without ``jinja2``.
    """

    def __init__(self, source: str, special_tokens: Mapping[str, str] | None = None, where: str = "chat_template"):
        import jinja2

        if not isinstance(source, str):
            raise ValueError(f"{where}: a chat template must be a string, got {type(source).__name__}")
        if len(source) > MAX_TEMPLATE_CHARS:
            raise ValueError(f"{where}: the chat template has {len(source)} characters, more than "
                             f"{MAX_TEMPLATE_CHARS}")
        self.source = source
        self.where = where
        self.special_tokens = dict(special_tokens or {})
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"{where}: line {exc.lineno}: {exc.message}") from None

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = False,
               tools: Sequence[Mapping] | None = None, documents: Sequence[Mapping] | None = None,
               **kwargs: Any) -> str:
        """The prompt text of ``messages`` (dicts with ``role`` and ``content``, and whatever else the
        template reads), with the assistant's opening when ``add_generation_prompt``. ``tools`` /
        ``documents`` are JSON-like lists the template may read; ``kwargs`` are more template variables
        (they override the special tokens). Raises ValueError for messages that are not dicts (or hold
        other than JSON-like values), more than :data:`MAX_MESSAGES`, a template error (its
        ``raise_exception`` message, or the sandbox refusing an operation) or an output longer than
        :data:`MAX_RENDERED_CHARS`."""
        import jinja2

        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise ValueError(f"messages must be a list of dicts, got {type(messages).__name__}")
        if len(messages) > MAX_MESSAGES:
            raise ValueError(f"{len(messages)} messages, more than the {MAX_MESSAGES} a conversation may have")
        for i, message in enumerate(messages):
            if not isinstance(message, Mapping):
                raise ValueError(f"messages[{i}] must be a dict with 'role' and 'content', got "
                                 f"{type(message).__name__}")
        variables = {**self.special_tokens, **_plain(kwargs)}
        variables.update(messages=_plain(list(messages)), add_generation_prompt=bool(add_generation_prompt),
                         tools=_plain(tools), documents=_plain(documents))
        parts: list[str] = []
        size = 0
        try:
            for chunk in self._template.generate(**variables):
                size += len(chunk)
                if size > MAX_RENDERED_CHARS:
                    raise ValueError(f"{self.where}: the rendered chat is longer than {MAX_RENDERED_CHARS} characters")
                parts.append(chunk)
        except jinja2.TemplateError as exc:      # raise_exception, undefined calls, the sandbox's SecurityError
            raise ValueError(f"{self.where}: {exc.message or type(exc).__name__}") from None
        except (TypeError, AttributeError, OverflowError, RecursionError, ZeroDivisionError, IndexError,
                KeyError) as exc:
            raise ValueError(f"{self.where}: the template failed: {type(exc).__name__}: {exc}") from None
        return "".join(parts)

    @classmethod
    def from_tokenizer_config(cls, config: Mapping[str, Any], where: str = "tokenizer_config.json",
                              name: str | None = None) -> "ChatTemplate | None":
        """The template of a parsed ``tokenizer_config.json`` (None when it has none) with its special
        tokens. ``chat_template`` is a string, or a list of ``{"name", "template"}`` (the ``name`` asked,
        else ``"default"``). Raises ValueError for a malformed entry or a ``name`` it lacks."""
        source = config.get("chat_template")
        if source is None:
            return None
        if isinstance(source, list):
            named = {e.get("name"): e.get("template") for e in source if isinstance(e, Mapping)}
            pick = name or "default"
            if pick not in named:
                raise ValueError(f"{where}: no chat template named {pick!r} (it has {sorted(map(str, named))})")
            source = named[pick]
        elif name not in (None, "default"):
            raise ValueError(f"{where}: one unnamed chat template, not {name!r}")
        return cls(source, special_tokens(config), f"{where}: chat_template")


def special_tokens(config: Mapping[str, Any]) -> dict[str, str]:
    """``{bos_token: "<s>", ...}``: the special tokens of a ``tokenizer_config.json`` given as text or as
    an AddedToken dict (``{"content": "<s>", ...}``)."""
    out = {}
    for key in SPECIAL_TOKEN_KEYS:
        value = config.get(key)
        if isinstance(value, Mapping):
            value = value.get("content")
        if isinstance(value, str):
            out[key] = value
    return out


def load_tokenizer_config(path: str | os.PathLike) -> dict[str, Any] | None:
    """The parsed ``tokenizer_config.json`` of a folder, or beside a ``tokenizer.json`` file (``path`` may
    also name the config itself); None when there is none. Raises ValueError naming the file when it is
    unreadable, larger than :data:`MAX_CONFIG_BYTES`, not JSON or not an object."""
    path = Path(path)
    if path.name != "tokenizer_config.json":
        path = (path if path.is_dir() else path.parent) / "tokenizer_config.json"
    if not path.exists():
        return None
    try:
        config = json.loads(read_regular(path, max_bytes=MAX_CONFIG_BYTES).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the tokenizer config: {str(exc).splitlines()[0][:300]}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: a tokenizer config must be a JSON object")
    return config

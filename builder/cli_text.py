"""``build RECIPE --prompt TEXT --tokenizer tokenizer.json``: the completion of TEXT streamed to stdout as it is
generated (:meth:`builder.CompiledModel.complete`), with the sampling flags ``--temperature`` (default 0:
greedy, as ``--prompt-ids``), ``--top-k``, ``--top-p``, ``--min-p``, ``--repetition-penalty``, ``--stop`` and
``--seed`` (also the seed of random weights) and ``--max-new-tokens``. ``--chat`` is an interactive chat on the
terminal with the tokenizer's chat template (``tokenizer_config.json`` beside ``tokenizer.json``): each line read
is a user message, the reply is streamed; ``/reset`` forgets the conversation, ``/exit`` or end of input ends it. The model's text is untrusted: control
characters other than newline and tab are shown escaped, so it cannot drive the terminal.
"""
from __future__ import annotations

import argparse
import sys
import time

__all__ = ["add_prompt_arguments", "check_prompt_arguments", "complete_prompt", "chat_loop", "terminal_safe"]


def add_prompt_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--prompt`` argument group of ``build``."""
    g = p.add_argument_group("text generation (--prompt)")
    g.add_argument("--prompt", metavar="TEXT",
                   help="complete this text with the recipe's prefill / decode and --tokenizer, streamed to stdout")
    g.add_argument("--chat", action="store_true",
                   help="chat on the terminal with the tokenizer's chat template (/reset, /exit)")
    g.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="sampling temperature for --prompt (default 0: greedy)")
    g.add_argument("--top-k", type=int, default=0, metavar="K", help="keep the K most likely tokens (default 0: off)")
    g.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling (default 1: off)")
    g.add_argument("--min-p", type=float, default=0.0, metavar="P",
                   help="drop tokens below P times the most likely one's probability (default 0: off)")
    g.add_argument("--repetition-penalty", type=float, default=1.0, metavar="R",
                   help="HF's repetition penalty (default 1: off)")
    g.add_argument("--stop", action="append", default=None, metavar="TEXT",
                   help="stop the completion before this text (repeatable)")


def check_prompt_arguments(args: argparse.Namespace) -> None:
    """Refuse ``--prompt`` without ``--tokenizer`` or with another flag that runs the model, and sampling
    flags that are out of range (ValueError naming the flag), before anything is built."""
    from .sampling import SamplingParams

    if args.prompt is None and not args.chat:
        if args.stop is not None:
            raise ValueError("--stop needs --prompt or --chat")
        return
    flag = "--chat" if args.chat else "--prompt"
    if args.tokenizer is None:
        raise ValueError(f"{flag} needs --tokenizer tokenizer.json (the model's tokenizer)")
    if args.chat and args.json:
        raise ValueError("--chat is interactive: no --json")
    if (args.text is not None or args.input is not None or args.prompt_ids is not None
            or (args.chat and args.prompt is not None)):
        raise ValueError("--prompt, --chat, --text, --input and --prompt-ids each run the model; give one of them")
    try:
        SamplingParams(**_sampling(args))
    except ValueError as exc:
        raise ValueError(f"--{str(exc).replace('_', '-')}") from None


def _sampling(args: argparse.Namespace) -> dict:
    return {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "min_p": args.min_p,
            "repetition_penalty": args.repetition_penalty, "seed": args.seed}


def terminal_safe(text: str) -> str:
    """``text`` with its control characters but newline and tab escaped (``schemas.errors.printable``)."""
    from schemas.errors import printable

    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in "\n\t" else printable(ch) for ch in text)


def complete_prompt(args: argparse.Namespace, model, stream: bool, out) -> dict:
    """``--prompt``: the completion, written to stdout piece by piece when ``stream`` (else only returned),
    then a line on ``out`` with the token count and speed; returns the data for ``--json``."""
    model.tokenizer = args.tokenizer
    t0 = time.perf_counter()
    text, tokens, reason = [], 0, None
    for chunk in model.complete(args.prompt, max_tokens=args.max_new_tokens, stream=True, stop=args.stop,
                                **_sampling(args)):
        tokens += len(chunk.token_ids)
        text.append(chunk.text)
        reason = chunk.finish_reason or reason
        if stream and chunk.text:
            sys.stdout.write(terminal_safe(chunk.text))
            sys.stdout.flush()
    sec = time.perf_counter() - t0
    if stream:
        sys.stdout.write("\n")
        sys.stdout.flush()
    out.print(f"generated {tokens} token(s) in {sec * 1e3:.1f} ms ({tokens / sec:.1f} tokens/s; {reason})")
    return {"text": "".join(text), "tokens": tokens, "finish_reason": reason, "ms": sec * 1e3}


def chat_loop(args: argparse.Namespace, model, console, read=input) -> dict:
    """``--chat``: read user lines with ``read(prompt)`` until ``/exit`` or end of input, stream each reply to
    stdout (:meth:`builder.CompiledModel.chat`), keep the conversation; returns ``{"turns": N}``."""
    if model.group is not None:
        raise ValueError("--chat reads the terminal in one process; run it without tensor parallelism")
    model.tokenizer = args.tokenizer
    model.text_model().chat_template     # no template: the error now, not after the first line
    console.print("chat: /reset forgets the conversation, /exit ends it", style="dim")
    messages: list[dict] = []
    turns = 0
    while True:
        try:
            line = read("> ")
        except EOFError:
            sys.stdout.write("\n")
            break
        if line.strip() == "/exit":
            break
        if line.strip() == "/reset":
            messages.clear()
            continue
        messages.append({"role": "user", "content": line})
        reply = []
        for chunk in model.chat(messages, max_tokens=args.max_new_tokens, stream=True, stop=args.stop,
                                **_sampling(args)):
            reply.append(chunk.text)
            sys.stdout.write(terminal_safe(chunk.text))
            sys.stdout.flush()
        sys.stdout.write("\n")
        messages.append({"role": "assistant", "content": "".join(reply)})
        turns += 1
    return {"turns": turns}

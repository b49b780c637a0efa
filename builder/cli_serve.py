"""``build MODEL --serve [--host 127.0.0.1 --port 8000]``: the OpenAI-compatible server (:mod:`builder.serve`) for
the built model: chat and completions for a model with ``prefill`` / ``decode`` (through the continuous-batching
engine, ``--kv-cache-tokens`` and ``--max-batch`` its sizes), embeddings for one with ``embed``. The model's name
in requests is ``--served-model-name``, default the recipe's ``name`` (a checkpoint folder's: the folder's name).
It binds 127.0.0.1 unless ``--host`` says otherwise.
"""
from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_serve_arguments", "check_serve_arguments", "serve_model"]


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--serve`` argument group of ``build``."""
    g = p.add_argument_group("serving (--serve)")
    g.add_argument("--serve", action="store_true",
                   help="serve the model over HTTP with the OpenAI API (/v1/chat/completions, /v1/completions, "
                        "/v1/embeddings, /v1/models, /health)")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    g.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    g.add_argument("--served-model-name", metavar="NAME", help="the model's name in requests (default: the recipe's)")
    g.add_argument("--kv-cache-tokens", type=int, default=8192, metavar="N",
                   help="the KV cache's budget in tokens, all sequences together (default 8192)")
    g.add_argument("--max-batch", type=int, default=16, metavar="N",
                   help="sequences decoded together in one step (default 16)")


def check_serve_arguments(args: argparse.Namespace) -> None:
    """Refuse ``--serve`` with another flag that runs the model, without a tokenizer, or with sizes out of range
    (ValueError naming the flag), before anything is built."""
    if not args.serve:
        return
    if (args.prompt is not None or args.chat or args.text is not None or args.input is not None
            or args.prompt_ids is not None or args.bench is not None or args.json):
        raise ValueError("--serve runs the server: no --prompt, --chat, --text, --input, --prompt-ids, --bench or "
                         "--json with it")
    if args.tokenizer is None:
        raise ValueError("--serve needs --tokenizer tokenizer.json (the model's tokenizer)")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    for flag, value in (("--kv-cache-tokens", args.kv_cache_tokens), ("--max-batch", args.max_batch)):
        if value <= 0:
            raise ValueError(f"{flag} must be positive, got {value}")


def serve_model(args: argparse.Namespace, model, out) -> None:
    """Serve ``model`` (a :class:`builder.CompiledModel`) until interrupted. Raises ValueError for a model with
    neither ``prefill`` / ``decode`` nor ``embed``."""
    from .serve.app import create_app
    from .serve.engine import Engine
    from .serve.server import serve

    source = Path(args.recipe)
    name = args.served_model_name or (source.name if source.is_dir() else model.recipe.name or source.stem)
    generator = embedder = None
    if "prefill" in model.spec and "decode" in model.spec:
        generator = (name, Engine(model.text_model(), kv_cache_tokens=args.kv_cache_tokens, max_batch=args.max_batch))
    if "embed" in model.spec:
        embedder = (name, model)
    if generator is None and embedder is None:
        raise ValueError(f"--serve needs prefill / decode (chat, completions) or embed (embeddings); the recipe "
                         f"exports {model.functions}")
    routes = (["/v1/chat/completions", "/v1/completions"] if generator else []) + (["/v1/embeddings"] if embedder
                                                                                   else [])
    out.print(f"serving {name!r} on http://{args.host}:{args.port} ({', '.join(routes)}, /v1/models, /health); "
              "Ctrl-C stops")
    serve(create_app(generator, embedder), args.host, args.port)

"""The OpenAI-compatible HTTP API on FastAPI: ``/v1/completions``, ``/v1/chat/completions`` (both streamed as
server-sent events with ``stream: true``), ``/v1/embeddings``, ``/v1/models``, ``/health``.

:func:`create_app` serves a causal LM through its continuous-batching :class:`~builder.serve.engine.Engine`
and/or an encoder with an ``embed`` function (a :class:`builder.CompiledModel` such as the MiniLM recipe's),
each under a name that requests give as ``model`` (an unknown one: 404, as vLLM). Errors are OpenAI's error
objects (:func:`~builder.serve.protocol.error_body`): 400 for a request that is not valid, naming the field in
``param``; 413 for a body over ``max_body_bytes``; 429 when the engine's queue is full; 404 / 405 for unknown
routes and methods; 500 (message only) when the model fails. A streaming client that disconnects cancels its
request (its sequences leave the KV cache at the next step); a waiting non-streaming one is checked every
:data:`DISCONNECT_POLL_S` seconds.
"""
from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import uuid
from typing import Any, AsyncIterator

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.concurrency import run_in_threadpool

from ..completion import TextChunk
from .engine import Engine, QueueFullError, RequestDone, RequestFailed, RequestTooLongError
from .protocol import ChatCompletionRequest, CompletionRequest, EmbeddingRequest, error_body

__all__ = ["create_app", "MAX_BODY_BYTES", "DISCONNECT_POLL_S", "DEFAULT_CHAT_MAX_TOKENS"]

MAX_BODY_BYTES = 8 << 20
"""The largest request body read (bytes); a larger one gets 413 before it is parsed."""

DISCONNECT_POLL_S = 0.25
"""How often a waiting non-streaming request checks that its client is still connected (seconds)."""

DEFAULT_CHAT_MAX_TOKENS = 512
"""A chat completion's ``max_tokens`` when the request gives none (at most what the context leaves)."""


def _param_of(message: str, fields) -> str | None:
    """The request field a ValueError's message starts with (``"top_k must be ..."`` -> ``top_k``), else None."""
    head = message.split(" ", 1)[0].rstrip(":")
    return head if head.split(".")[0] in fields else None


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None, status: int = 400, kind: str = "invalid_request_error",
                 code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.status, self.kind, self.code = message, param, status, kind, code


class _BodyLimit:
    """ASGI middleware: reads the whole body first, at most ``max_bytes`` (413 past it), then replays it."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                response = JSONResponse(error_body(f"the request body is larger than {self.max_bytes} bytes",
                                                   None), status_code=413)
                return await response(scope, receive, send)
            chunks.append(body)
            more = message.get("more_body", False)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class _Events:
    """The engine's events for one HTTP request, moved onto its event loop: ``deliver(tag)`` gives the callback
    of one engine request (its events arrive as ``(tag, event)``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.queue = loop, asyncio.Queue()

    def deliver(self, tag: int):
        return lambda event: self.loop.call_soon_threadsafe(self.queue.put_nowait, (tag, event))


def _now() -> int:
    return int(time.time())


class _Generation:
    """One HTTP generation request: its engine requests (one per prompt), their events, and the token counts."""

    def __init__(self, engine: Engine, events: _Events, prompts: list[list[int]], max_tokens: int | None,
                 default_max: int, sampling, stop, stop_ids, n: int, response_format: Any = None):
        self.events, self.n = events, n
        self.handles = []
        self.prompt_tokens = sum(len(p) for p in prompts)
        self.completion_tokens = 0
        try:
            for i, ids in enumerate(prompts):
                limit = max_tokens if max_tokens is not None else max(1, min(default_max,
                                                                             engine.max_context - len(ids)))
                self.handles.append(engine.submit(ids, limit, sampling, stop, stop_ids, response_format,
                                                  deliver=events.deliver(i)))
        except QueueFullError as exc:
            self.cancel()
            raise _BadRequest(str(exc), None, 429, "rate_limit_exceeded") from None
        except RequestTooLongError as exc:
            self.cancel()
            raise _BadRequest(str(exc), "max_tokens" if max_tokens is not None else "messages", 400,
                              code="context_length_exceeded") from None
        except (ValueError, TypeError) as exc:
            self.cancel()
            raise _BadRequest(str(exc), _param_of(str(exc), ("max_tokens", "n", "stop", "stop_token_ids", "prompt",
                                                             "response_format"))) from None
        self.pending = len(self.handles)

    def cancel(self) -> None:
        for handle in self.handles:
            handle.cancel()

    async def next(self, request: Request | None) -> tuple[int, TextChunk] | None:
        """The next chunk as ``(choice index, chunk)``; None when every engine request is done. Raises
        RuntimeError when the model failed; with ``request``, cancels and returns None if its client left."""
        while self.pending:
            try:
                tag, event = await asyncio.wait_for(self.events.queue.get(), DISCONNECT_POLL_S)
            except asyncio.TimeoutError:
                if request is not None and await request.is_disconnected():
                    self.cancel()
                    return None
                continue
            if isinstance(event, RequestDone):
                self.pending -= 1
                self.completion_tokens += event.completion_tokens
                continue
            if isinstance(event, RequestFailed):
                self.cancel()
                raise RuntimeError(f"the model failed: {str(event.error).splitlines()[0][:500]}")
            return tag * self.n + event.index, event
        return None

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


def _sse(data: Any) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def create_app(generator: tuple[str, Engine] | None = None,
               embedder: tuple[str, Any] | None = None,
               max_body_bytes: int = MAX_BODY_BYTES) -> Any:
    """The ASGI app serving ``generator`` (``(name, engine)``: completions and chat) and/or ``embedder``
    (``(name, model)``: a :class:`builder.CompiledModel` with ``embed`` and a tokenizer, whose ``embed_texts``
    gives the embeddings). The engine's thread is started when
    the app starts (its lifespan) and stopped when it stops. Raises ValueError when neither is given."""
    if generator is None and embedder is None:
        raise ValueError("create_app: serve a generator, an embedder, or both")
    engine = generator[1] if generator else None
    embed_lock = threading.Lock()

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        if engine is not None:
            engine.start()
        try:
            yield
        finally:
            if engine is not None:
                engine.shutdown()

    app = FastAPI(title="model-builder", lifespan=lifespan)
    created = _now()

    @app.exception_handler(_BadRequest)
    async def _bad(_, exc: _BadRequest):
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        return JSONResponse(error_body(exc.message, exc.param, exc.kind, exc.code), status_code=exc.status,
                            headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        # a union's branches add their type names to the location; keep the field path
        loc = [p for p in loc if not any(c in p for c in "[]") and p not in ("str", "int", "list", "function-after")]
        param = ".".join(loc) or None
        return JSONResponse(error_body(f"{param or 'body'}: {first.get('msg', 'invalid')}", param), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_, exc: StarletteHTTPException):
        return JSONResponse(error_body(str(exc.detail), None, "not_found_error" if exc.status_code == 404
                                       else "invalid_request_error"), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _internal(_, exc: Exception):
        return JSONResponse(error_body(f"internal error: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}",
                                       None, "server_error"), status_code=500)

    def _model(name: str, served, what: str):
        if served is None:
            raise _BadRequest(f"this server does not serve {what}", "model", 404, "not_found_error", "model_not_found")
        if name != served[0]:
            raise _BadRequest(f"the model {name!r} does not exist; this server serves {served[0]!r}", "model", 404,
                              "not_found_error", "model_not_found")
        return served[1]

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        data = [{"id": served[0], "object": "model", "created": created, "owned_by": "model-builder"}
                for served in (generator, embedder) if served is not None]
        return {"object": "list", "data": data}

    def _stop_ids(body) -> list[int]:
        return list(body.stop_token_ids or [])

    def _sampling(body, logprobs):
        try:
            return body.sampling_params(logprobs)
        except ValueError as exc:
            raise _BadRequest(str(exc), _param_of(str(exc), type(body).model_fields)) from None

    async def _run(request: Request, gen: _Generation, body, make_chunk, make_choice, object_name: str, prefix: str):
        rid = f"{prefix}-{uuid.uuid4().hex[:24]}"
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)

            async def stream() -> AsyncIterator[bytes]:
                try:
                    first = set()
                    while True:
                        item = await gen.next(None)
                        if item is None:
                            break
                        index, chunk = item
                        yield _sse({"id": rid, "object": f"{object_name}.chunk" if object_name == "chat.completion"
                                    else object_name, "created": _now(), "model": body.model,
                                    "choices": [make_chunk(index, chunk, index not in first)]})
                        first.add(index)
                    if include_usage:
                        yield _sse({"id": rid, "object": f"{object_name}.chunk" if object_name == "chat.completion"
                                    else object_name, "created": _now(), "model": body.model, "choices": [],
                                    "usage": gen.usage()})
                    yield b"data: [DONE]\n\n"
                except RuntimeError as exc:
                    yield _sse(error_body(str(exc), None, "server_error"))
                finally:
                    gen.cancel()      # a client that left: its sequences are freed at the next step

            return StreamingResponse(stream(), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        choices: dict[int, dict] = {}
        try:
            while True:
                item = await gen.next(request)
                if item is None:
                    break
                index, chunk = item
                make_choice(choices.setdefault(index, {"index": index, "finish_reason": None}), chunk)
        except RuntimeError as exc:
            raise _BadRequest(str(exc), None, 500, "server_error") from None
        finally:
            gen.cancel()
        return {"id": rid, "object": object_name, "created": _now(), "model": body.model,
                "choices": [choices[i] for i in sorted(choices)], "usage": gen.usage()}

    def _token_text(tid: int) -> str:
        return engine.model.tokenizer.decode([int(tid)], skip_special_tokens=False)

    def _chat_logprobs(chunk: TextChunk) -> dict | None:
        if chunk.logprobs is None:
            return None
        content = []
        for tid, lp, tops in zip(chunk.token_ids, chunk.logprobs, chunk.top_logprobs):
            text = _token_text(tid)
            content.append({"token": text, "logprob": lp, "bytes": list(text.encode("utf-8")),
                            "top_logprobs": [{"token": _token_text(t), "logprob": v,
                                              "bytes": list(_token_text(t).encode("utf-8"))} for t, v in tops]})
        return {"content": content}

    def _completion_logprobs(chunk: TextChunk) -> dict | None:
        if chunk.logprobs is None:
            return None
        return {"tokens": [_token_text(t) for t in chunk.token_ids], "token_logprobs": list(chunk.logprobs),
                "top_logprobs": [{_token_text(t): v for t, v in tops} for tops in chunk.top_logprobs]}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        eng = _model(body.model, generator, "chat completions")
        model = eng.model
        try:
            prompt = model.chat_template.render([m.for_template() for m in body.messages], add_generation_prompt=True)
            ids = model.encode(prompt, add_special_tokens=False)
        except ValueError as exc:
            raise _BadRequest(str(exc), "messages") from None
        sampling = _sampling(body, body.logprobs_count())
        gen = _Generation(eng, _Events(asyncio.get_running_loop()), [ids], body.max_tokens, DEFAULT_CHAT_MAX_TOKENS,
                          sampling, body.stop, _stop_ids(body), body.n, body.response_format)

        def make_chunk(index: int, chunk: TextChunk, first: bool) -> dict:
            delta = {"role": "assistant", "content": chunk.text} if first else {"content": chunk.text}
            return {"index": index, "delta": delta, "logprobs": _chat_logprobs(chunk),
                    "finish_reason": chunk.finish_reason}

        def make_choice(choice: dict, chunk: TextChunk) -> None:
            message = choice.setdefault("message", {"role": "assistant", "content": ""})
            message["content"] += chunk.text
            lp = _chat_logprobs(chunk)
            if lp is not None:
                choice.setdefault("logprobs", {"content": []})["content"].extend(lp["content"])
            else:
                choice.setdefault("logprobs", None)
            if chunk.finish_reason is not None:
                choice["finish_reason"] = chunk.finish_reason

        return await _run(request, gen, body, make_chunk, make_choice, "chat.completion", "chatcmpl")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        eng = _model(body.model, generator, "completions")
        model = eng.model
        prompts = []
        for i, p in enumerate(body.prompts()):
            try:
                prompts.append(model.encode(p) if isinstance(p, str) else list(p))
            except ValueError as exc:
                raise _BadRequest(str(exc), "prompt") from None
        sampling = _sampling(body, body.logprobs)
        gen = _Generation(eng, _Events(asyncio.get_running_loop()), prompts, body.max_tokens or 16, 16, sampling,
                          body.stop, _stop_ids(body), body.n, body.response_format)

        def make_chunk(index: int, chunk: TextChunk, first: bool) -> dict:
            return {"index": index, "text": chunk.text, "logprobs": _completion_logprobs(chunk),
                    "finish_reason": chunk.finish_reason}

        def make_choice(choice: dict, chunk: TextChunk) -> None:
            choice["text"] = choice.get("text", "") + chunk.text
            lp = _completion_logprobs(chunk)
            if lp is None:
                choice.setdefault("logprobs", None)
            else:
                have = choice.get("logprobs") or {"tokens": [], "token_logprobs": [], "top_logprobs": []}
                for key in have:
                    have[key].extend(lp[key])
                choice["logprobs"] = have
            if chunk.finish_reason is not None:
                choice["finish_reason"] = chunk.finish_reason

        return await _run(request, gen, body, make_chunk, make_choice, "text_completion", "cmpl")

    @app.post("/v1/embeddings")
    async def embeddings(body: EmbeddingRequest):
        model = _model(body.model, embedder, "embeddings")
        texts = [body.input] if isinstance(body.input, str) else list(body.input)

        def run():
            with embed_lock:
                return model.embed_texts(texts)
        try:
            emb, tokens = await run_in_threadpool(run)
        except ValueError as exc:
            raise _BadRequest(str(exc), "input") from None
        emb = np.asarray(emb, dtype=np.float32)
        count = int(tokens["attention_mask"].sum())
        data = []
        for i, row in enumerate(emb):
            value = (base64.b64encode(row.astype("<f4").tobytes()).decode() if body.encoding_format == "base64"
                     else row.astype(np.float64).tolist())
            data.append({"object": "embedding", "index": i, "embedding": value})
        return {"object": "list", "data": data, "model": body.model,
                "usage": {"prompt_tokens": count, "total_tokens": count}}

    return _BodyLimit(app, max_body_bytes)

"""The OpenAI-compatible server (builder.serve.app) with the real ``openai`` client against uvicorn on 127.0.0.1:
chat completions (whole and streamed: the same text, equal to ``m.chat``), completions with stop strings, n
choices, logprobs, embeddings equal to the MiniLM recipe's, /v1/models and /health, and the errors (400 naming
the field, 404, 413, 429)."""
from __future__ import annotations

import base64
import json
import threading

import numpy as np
import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from builder.serve import Engine, QueueFullError  # noqa: E402
from builder.serve.app import create_app  # noqa: E402
from builder.serve.server import BackgroundServer  # noqa: E402

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello café, the model"}]


@pytest.fixture(scope="module")
def minilm():
    import builder
    from helpers.text_models import ROOT, minilm_folder

    assets = minilm_folder()
    return builder.build(ROOT / "recipes" / "minilm_l6.yaml", weights=assets / "model.safetensors",
                         tokenizer=assets / "tokenizer.json")


@pytest.fixture(scope="module")
def served(llama):
    engine = Engine(llama.text_model(), kv_cache_tokens=4096, max_queue=8)
    with BackgroundServer(create_app(("tiny-llama", engine))) as server:
        yield server, engine


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[0].url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_a_chat_completion_is_the_models_chat(client, llama):
    want = llama.chat(MESSAGES, max_tokens=10, temperature=0)
    got = client.chat.completions.create(model="tiny-llama", messages=MESSAGES, max_tokens=10, temperature=0)
    assert got.choices[0].message.content == want.text and got.choices[0].message.role == "assistant"
    assert got.choices[0].finish_reason == want.choices[0].finish_reason
    assert got.usage.prompt_tokens == want.prompt_tokens
    assert got.usage.completion_tokens == len(want.choices[0].token_ids)
    assert got.object == "chat.completion" and got.model == "tiny-llama"


def test_the_streamed_chat_equals_the_whole(client):
    whole = client.chat.completions.create(model="tiny-llama", messages=MESSAGES, max_tokens=14, temperature=0)
    chunks = list(client.chat.completions.create(model="tiny-llama", messages=MESSAGES, max_tokens=14, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens and not chunks[-1].choices


def test_a_completion_stops_before_a_stop_string(client, llama):
    whole = llama.complete("the model is", max_tokens=12, temperature=0).text
    stop = whole[3:6]
    got = client.completions.create(model="tiny-llama", prompt="the model is", max_tokens=12, temperature=0,
                                    stop=[stop, "never-there"])
    assert got.choices[0].text == whole[:whole.find(stop)] and got.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="tiny-llama", prompt="the model is", max_tokens=12, temperature=0,
                                         stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == got.choices[0].text


def test_several_prompts_and_n_choices_are_indexed_prompt_by_prompt(client, llama):
    got = client.completions.create(model="tiny-llama", prompt=["hello", "zu bene"], max_tokens=6, temperature=0.8,
                                    n=2, seed=3)
    assert [c.index for c in got.choices] == [0, 1, 2, 3]
    for p, pair in (("hello", got.choices[:2]), ("zu bene", got.choices[2:])):
        want = llama.complete(p, max_tokens=6, temperature=0.8, n=2, seed=3)
        assert [c.text for c in pair] == [c.text for c in want.choices]
    ids = llama.text_model().encode("hello")
    by_ids = client.completions.create(model="tiny-llama", prompt=ids, max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == llama.complete("hello", max_tokens=6, temperature=0).text


def test_logprobs_are_the_processed_log_softmax(client, llama):
    want = llama.complete("hello", max_tokens=4, temperature=0, logprobs=3)
    got = client.completions.create(model="tiny-llama", prompt="hello", max_tokens=4, temperature=0, logprobs=3)
    np.testing.assert_allclose(got.choices[0].logprobs.token_logprobs, want.choices[0].logprobs, rtol=1e-6)
    assert all(len(t) == 3 for t in got.choices[0].logprobs.top_logprobs)
    chat = client.chat.completions.create(model="tiny-llama", messages=MESSAGES, max_tokens=3, temperature=0,
                                          logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens and all(len(c.top_logprobs) == 2 for c in content)
    assert all(c.top_logprobs[0].logprob >= c.top_logprobs[1].logprob for c in content)


def test_models_and_health(served, client):
    assert [m.id for m in client.models.list().data] == ["tiny-llama"]
    assert httpx.get(served[0].url + "/health").json() == {"status": "ok"}


@pytest.mark.parametrize("body, param", [
    ({"temperature": 5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"n": 0}, "n"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"bogus_field": 1}, "bogus_field"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"tools": [{"type": "function"}]}, None),
    ({"max_tokens": 100000}, "max_tokens"),
    ({"n": 17, "temperature": 1.0}, "n"),
    ({"max_tokens": 5000}, "max_tokens"),
])
def test_a_bad_chat_request_is_a_400_naming_the_field(served, body, param):
    request = {"model": "tiny-llama", "messages": MESSAGES, "max_tokens": 4, **body}
    r = httpx.post(served[0].url + "/v1/chat/completions", json=request)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param, error


def test_bad_bodies_unknown_models_and_routes(served):
    url = served[0].url
    r = httpx.post(url + "/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()
    r = httpx.post(url + "/v1/completions", json={"model": "other", "prompt": "x"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"
    r = httpx.post(url + "/v1/completions", content=b" " * (9 << 20), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "larger than" in r.json()["error"]["message"]
    r = httpx.post(url + "/v1/embeddings", json={"model": "tiny-llama", "input": "x"})
    assert r.status_code == 404
    assert httpx.get(url + "/v2/nothing").status_code == 404
    assert httpx.get(url + "/v1/completions").status_code == 405


def test_a_full_queue_answers_429(llama):
    engine = Engine(llama.text_model(), kv_cache_tokens=4096, max_queue=2)
    release, busy = threading.Event(), threading.Event()
    real = engine.runner._prefill

    def held_prefill(ids, cache, total):    # the engine's thread waits here: nothing more is admitted
        busy.set()
        release.wait(30)
        return real(ids, cache, total)
    engine.runner._prefill = held_prefill
    ids = llama.text_model().encode("hello")
    with BackgroundServer(create_app(("tiny-llama", engine))) as server:
        first = engine.submit(ids, 2)
        assert busy.wait(30)
        queued = [engine.submit(ids, 2) for _ in range(2)]
        with pytest.raises(QueueFullError):
            engine.submit(ids, 2)
        r = httpx.post(server.url + "/v1/completions", json={"model": "tiny-llama", "prompt": "x", "max_tokens": 2})
        release.set()
        assert r.status_code == 429 and r.headers.get("retry-after") == "1"
        assert r.json()["error"]["type"] == "rate_limit_exceeded" and "max_queue 2" in r.json()["error"]["message"]
        assert all(list(h) and h.done.completion_tokens >= 1 for h in (first, *queued))
        assert _idle(engine)


def _idle(engine, timeout=30.0) -> bool:
    return engine.wait_idle(timeout) and engine.runner.sequences == [] and engine.runner.reserved == 0


def test_embeddings_equal_the_recipes(minilm):
    texts = ["A man is eating food.", "Un homme mange.", "the café is closed"]
    want, _ = minilm.embed_texts(texts)
    with BackgroundServer(create_app(embedder=("minilm", minilm))) as server:
        c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        got = c.embeddings.create(model="minilm", input=texts)
        one = c.embeddings.create(model="minilm", input=texts[2])
        b64 = httpx.post(server.url + "/v1/embeddings", json={"model": "minilm", "input": texts,
                                                              "encoding_format": "base64"}).json()
        bad = httpx.post(server.url + "/v1/embeddings", json={"model": "minilm", "input": []})
    np.testing.assert_allclose(np.array([d.embedding for d in got.data]), want, atol=1e-6, rtol=0)
    np.testing.assert_allclose(one.data[0].embedding, want[2], atol=1e-6, rtol=0)
    decoded = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in b64["data"]])
    np.testing.assert_array_equal(decoded, np.asarray(want, dtype=np.float32))
    assert got.usage.prompt_tokens > len(texts) and bad.status_code == 400 and bad.json()["error"]["param"] == "input"


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 999}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "seed": 5, "n": 2}])
def test_a_json_schema_response_parses_and_validates(client, llama, sampling):
    pytest.importorskip("llguidance")
    jsonschema = pytest.importorskip("jsonschema")
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    got = client.chat.completions.create(model="tiny-llama", messages=MESSAGES, max_tokens=64, response_format=fmt,
                                         **sampling)
    want = llama.chat(MESSAGES, max_tokens=64, response_format=fmt, **sampling)
    assert [c.message.content for c in got.choices] == [c.text for c in want.choices]
    for c in got.choices:
        jsonschema.validate(json.loads(c.message.content), PERSON)
        assert c.finish_reason == "stop"
    streamed = client.chat.completions.create(model="tiny-llama", messages=MESSAGES, max_tokens=64, response_format=fmt,
                                              stream=True, **sampling)
    texts = {}
    for chunk in streamed:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
    assert [texts[i] for i in range(len(got.choices))] == [c.message.content for c in got.choices]


def test_regex_and_json_object_responses_of_completions(client):
    pytest.importorskip("llguidance")
    import re
    got = client.completions.create(model="tiny-llama", prompt="the model", max_tokens=20, temperature=1.0, seed=2,
                                    extra_body={"response_format": {"type": "regex", "regex": "[ab]{2,4}c"}})
    assert re.fullmatch("[ab]{2,4}c", got.choices[0].text) and got.choices[0].finish_reason == "stop"
    obj = client.chat.completions.create(model="tiny-llama", messages=MESSAGES, max_tokens=64, temperature=0,
                                         response_format={"type": "json_object"})
    assert isinstance(json.loads(obj.choices[0].message.content), dict)


@pytest.mark.parametrize("fmt, param", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}, "response_format.json_schema.schema"),
    ({"type": "xml"}, "response_format.type"),
    ({"type": "regex", "regex": "("}, "response_format.regex"),
])
def test_a_bad_response_format_is_a_400_naming_it(served, fmt, param):
    pytest.importorskip("llguidance")
    r = httpx.post(served[0].url + "/v1/chat/completions",
                   json={"model": "tiny-llama", "messages": MESSAGES, "max_tokens": 4, "response_format": fmt})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text

"""A bounded load test of the server: 64 requests from 16 concurrent clients (streamed and whole, completions and
chats, greedy, different prompts and lengths), none lost or mixed up (each gets the text ``m.complete`` / ``m.chat``
gives it alone), the KV cache's reservations within its budget, and clients that disconnect mid-stream leave
nothing behind (no sequence, no reservation, no request)."""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from builder.serve import Engine  # noqa: E402
from builder.serve.app import create_app  # noqa: E402
from builder.serve.server import BackgroundServer  # noqa: E402

WORDS = "the model café zu bene lika a of thing that is 😀 one more".split()
BUDGET = 1024


def _cases(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        cases.append({"i": i, "prompt": prompt, "max_tokens": rng.randint(2, 14), "chat": i % 3 == 0,
                      "stream": i % 2 == 0})
    return cases


def test_64_requests_from_16_clients_none_lost_or_mixed(llama):
    cases = _cases(64)
    want = {}
    for c in cases:
        if c["chat"]:
            want[c["i"]] = llama.chat([{"role": "user", "content": c["prompt"]}], max_tokens=c["max_tokens"],
                                      temperature=0).text
        else:
            want[c["i"]] = llama.complete(c["prompt"], max_tokens=c["max_tokens"], temperature=0).text
    engine = Engine(llama.text_model(), kv_cache_tokens=BUDGET, max_batch=8, max_queue=64)
    with BackgroundServer(create_app(("tiny-llama", engine))) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)

        def run(c: dict) -> tuple[int, str]:
            kw = {"model": "tiny-llama", "max_tokens": c["max_tokens"], "temperature": 0, "stream": c["stream"]}
            if c["chat"]:
                r = client.chat.completions.create(messages=[{"role": "user", "content": c["prompt"]}], **kw)
                text = ("".join(x.choices[0].delta.content or "" for x in r) if c["stream"]
                        else r.choices[0].message.content)
            else:
                r = client.completions.create(prompt=c["prompt"], **kw)
                text = "".join(x.choices[0].text for x in r) if c["stream"] else r.choices[0].text
            return c["i"], text

        with ThreadPoolExecutor(16) as pool:
            got = dict(pool.map(run, cases, timeout=240))
        assert engine.wait_idle(30)
    assert got == want
    assert engine.runner.peak_reserved <= BUDGET and engine.runner.reserved == 0
    cache = engine.runner.cache      # the stores never grew past the budget's blocks, and every block is free
    assert cache.layer_ids and all(cache.capacity(i) <= BUDGET for i in cache.layer_ids)
    assert cache.free_blocks == cache.num_blocks
    assert engine.runner.sequences == [] and engine.num_running == engine.num_waiting == 0


def test_clients_that_disconnect_mid_stream_leave_nothing_behind(llama):
    engine = Engine(llama.text_model(), kv_cache_tokens=BUDGET, max_batch=8)
    with BackgroundServer(create_app(("tiny-llama", engine))) as server:
        def run(i: int) -> int:
            body = {"model": "tiny-llama", "prompt": f"the model {i}", "max_tokens": 900, "stream": True,
                    "temperature": 1.0, "seed": i}
            events = 0
            with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events += 1
                        if events == 3:      # leave mid-stream
                            break
            return events

        with ThreadPoolExecutor(6) as pool:
            assert list(pool.map(run, range(6), timeout=120)) == [3] * 6
        assert engine.wait_idle(30), (engine.num_running, engine.num_waiting)
        assert engine.runner.sequences == [] and engine.runner.reserved == 0
        ok = httpx.post(server.url + "/v1/completions", json={"model": "tiny-llama", "prompt": "hello",
                                                              "max_tokens": 3, "temperature": 0}, timeout=60)
        assert ok.status_code == 200 and ok.json()["choices"][0]["text"] == llama.complete(
            "hello", max_tokens=3, temperature=0).text

"""Continuous batching (builder.serve.engine): requests of different prompt lengths started together, or joining
while others decode, give, greedy, the tokens each gives alone (``m.complete`` with a fresh cache); n completions,
stop strings, cancellation freeing the sequences and the reservation, the bounded queue, and the budget."""
from __future__ import annotations

import numpy as np
import pytest

from builder.sampling import SamplingParams
from builder.serve import Engine, QueueFullError, RequestTooLongError

PROMPTS = ["hello", "the model is a thing that", "café 😀", "a b c d e f g h i j k", "ok", "the the the the",
           "zu bene lika", "one more prompt of another length here"]


def _run_all(engine: Engine, steps: int = 10_000) -> None:
    for _ in range(steps):
        if not engine.step():
            return
    raise AssertionError("the engine did not finish")


def _text(handle) -> tuple[str, list[int], str]:
    chunks = list(handle)
    return "".join(c.text for c in chunks), [t for c in chunks for t in c.token_ids], chunks[-1].finish_reason


def test_requests_started_together_give_the_tokens_each_gives_alone(llama):
    tm = llama.text_model()
    engine = Engine(tm, kv_cache_tokens=4096, max_batch=16, prefill_chunk=4)   # prompts prefilled in chunks
    handles = [engine.submit(tm.encode(p), 6 + i) for i, p in enumerate(PROMPTS)]
    _run_all(engine)
    for i, (p, h) in enumerate(zip(PROMPTS, handles)):
        want = llama.complete(p, max_tokens=6 + i, temperature=0)
        text, ids, reason = _text(h)
        assert (text, ids, reason) == (want.text, want.choices[0].token_ids, want.choices[0].finish_reason), p
        assert h.done.prompt_tokens == want.prompt_tokens and h.done.completion_tokens == len(ids)
    assert engine.runner.sequences == [] and engine.runner.reserved == 0 and engine.num_running == 0


def test_a_request_that_joins_while_others_decode_gives_its_own_tokens(llama):
    tm = llama.text_model()
    engine = Engine(tm, kv_cache_tokens=4096)
    first = [engine.submit(tm.encode(p), 12) for p in PROMPTS[:3]]
    for _ in range(5):
        engine.step()
    assert engine.num_running == 3
    late = engine.submit(tm.encode(PROMPTS[3]), 7)
    _run_all(engine)
    for p, h, n in [*zip(PROMPTS[:3], first, [12] * 3), (PROMPTS[3], late, 7)]:
        want = llama.complete(p, max_tokens=n, temperature=0)
        assert _text(h)[:2] == (want.text, want.choices[0].token_ids)


def test_max_batch_makes_the_others_wait(llama):
    tm = llama.text_model()
    engine = Engine(tm, kv_cache_tokens=4096, max_batch=2)
    handles = [engine.submit(tm.encode(p), 5) for p in PROMPTS[:5]]
    engine.step()
    assert engine.num_running == 2 and engine.num_waiting == 3
    _run_all(engine)
    for p, h in zip(PROMPTS[:5], handles):
        assert _text(h)[0] == llama.complete(p, max_tokens=5, temperature=0).text


def test_n_completions_are_seeded_like_complete(llama):
    tm = llama.text_model()
    engine = Engine(tm, kv_cache_tokens=4096)
    params = SamplingParams(temperature=1.0, top_k=50, seed=7, n=3)
    h = engine.submit(tm.encode(PROMPTS[1]), 8, params)
    _run_all(engine)
    chunks = list(h)
    got = ["".join(c.text for c in chunks if c.index == i) for i in range(3)]
    want = llama.complete(PROMPTS[1], max_tokens=8, temperature=1.0, top_k=50, seed=7, n=3)
    assert got == [c.text for c in want.choices]
    assert len(set(got)) > 1        # three draws, not one


def test_a_stop_string_ends_the_row_and_frees_it(llama):
    tm = llama.text_model()
    whole = llama.complete(PROMPTS[0], max_tokens=12, temperature=0).text
    stop = whole[4:7]
    engine = Engine(tm, kv_cache_tokens=4096)
    h = engine.submit(tm.encode(PROMPTS[0]), 12, stop=[stop])
    _run_all(engine)
    text, _, reason = _text(h)
    assert text == whole[:whole.find(stop)] and reason == "stop"
    assert engine.runner.sequences == [] and engine.runner.reserved == 0


def test_cancel_frees_the_sequences_and_the_reservation(llama):
    tm = llama.text_model()
    engine = Engine(tm, kv_cache_tokens=4096, max_batch=3)     # the third request waits
    keep = engine.submit(tm.encode(PROMPTS[2]), 10)
    gone = engine.submit(tm.encode(PROMPTS[1]), 200, SamplingParams(temperature=1.0, seed=1, n=2))
    waiting = engine.submit(tm.encode(PROMPTS[3]), 10)
    for _ in range(3):
        engine.step()
    assert len(engine.runner.sequences) == 3 and engine.num_waiting == 1
    gone.cancel()
    waiting.cancel()
    engine.step()
    assert len(engine.runner.sequences) == 1 and engine.runner.reserved == keep_reserved(engine, tm, PROMPTS[2], 10)
    _run_all(engine)
    assert engine.runner.sequences == [] and engine.runner.reserved == 0
    assert _text(keep)[0] == llama.complete(PROMPTS[2], max_tokens=10, temperature=0).text
    assert list(waiting) == [] and waiting.done.completion_tokens == 0


def keep_reserved(engine, tm, prompt, max_tokens) -> int:
    return engine.runner.tokens_to_reserve(len(tm.encode(prompt)) + max_tokens, 1)


def test_the_budget_admits_what_fits_and_refuses_what_never_can(llama):
    tm = llama.text_model()
    ids = tm.encode(PROMPTS[3])
    engine = Engine(tm, kv_cache_tokens=2 * (len(ids) + 20))
    with pytest.raises(RequestTooLongError, match="more than"):
        engine.submit(ids, 2 * (len(ids) + 20))
    with pytest.raises(RequestTooLongError, match="KV cache"):
        engine.submit(ids, 20, SamplingParams(n=3, temperature=1.0))
    handles = [engine.submit(ids, 20) for _ in range(3)]
    engine.step()
    assert engine.num_running == 2 and engine.num_waiting == 1       # the third waits for room
    assert engine.runner.reserved <= engine.runner.capacity
    _run_all(engine)
    assert all(_text(h)[1] == _text_ids(llama, PROMPTS[3], 20) for h in handles)


def _text_ids(llama, prompt, n):
    return llama.complete(prompt, max_tokens=n, temperature=0).choices[0].token_ids


def test_the_queue_is_bounded_and_arguments_are_checked(llama):
    tm = llama.text_model()
    engine = Engine(tm, kv_cache_tokens=4096, max_queue=2)
    ids = tm.encode(PROMPTS[0])
    engine.submit(ids, 4)
    engine.submit(ids, 4)
    with pytest.raises(QueueFullError, match="max_queue 2"):
        engine.submit(ids, 4)
    for bad, match in (([], "no tokens"), ([10 ** 6], "token ids"), ([-1], "token ids")):
        with pytest.raises(ValueError, match=match):
            engine.submit(bad, 4)
    with pytest.raises(ValueError, match="max_tokens"):
        engine.submit(ids, 0)
    with pytest.raises(ValueError, match="stop"):
        engine.submit(ids, 4, stop=[""])
    with pytest.raises(ValueError, match="n: 17 completions"):
        engine.submit(ids, 4, SamplingParams(temperature=1.0, n=17))
    with pytest.raises(ValueError, match="kv_cache_tokens"):
        Engine(tm, kv_cache_tokens=0)


def test_a_model_failure_ends_its_request_and_not_the_engine(llama):
    tm = llama.text_model()
    engine = Engine(tm, kv_cache_tokens=4096)
    real = engine.runner._prefill
    calls = []

    def failing(ids, cache, total):
        calls.append(ids.shape)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real(ids, cache, total)
    engine.runner._prefill = failing
    bad = engine.submit(tm.encode(PROMPTS[0]), 4)
    good = engine.submit(tm.encode(PROMPTS[1]), 4)
    _run_all(engine)
    with pytest.raises(RuntimeError, match="boom"):
        list(bad)
    assert _text(good)[0] == llama.complete(PROMPTS[1], max_tokens=4, temperature=0).text
    assert engine.runner.sequences == [] and engine.runner.reserved == 0


def test_the_engine_thread_serves_submitted_requests(llama):
    tm = llama.text_model()
    engine = Engine(tm, kv_cache_tokens=4096)
    engine.start()
    try:
        handles = [engine.submit(tm.encode(p), 5) for p in PROMPTS[:4]]
        got = [_text(h)[0] for h in handles]
    finally:
        engine.shutdown()
    assert got == [llama.complete(p, max_tokens=5, temperature=0).text for p in PROMPTS[:4]]
    assert np.all([h.done is not None for h in handles])


def test_one_decode_call_per_step_for_every_running_row(llama):
    tm = llama.text_model()
    engine = Engine(tm, kv_cache_tokens=4096)
    real = engine.runner._decode
    batches = []

    def counted(ids, cache, total):
        batches.append(ids.shape[0])
        return real(ids, cache, total)
    engine.runner._decode = counted
    handles = [engine.submit(tm.encode(p), 6) for p in PROMPTS[:4]]
    handles.append(engine.submit(tm.encode(PROMPTS[4]), 4, SamplingParams(temperature=1.0, seed=0, n=3)))
    _run_all(engine)
    assert max(batches) == 7        # 4 requests and 3 completions of the fifth, in one call
    assert len(batches) < 6 * 7     # not one call per row
    assert [len(list(h)) > 0 for h in handles] == [True] * 5

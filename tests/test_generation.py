"""builder.generation.generate / stream_generate: on a numpy "model" whose logits are a seeded table of
(last token, length), against a loop written here that recomputes every step from the whole sequence with
the same :class:`builder.sampling.Sampler`; greedy equal to ``greedy_generate``; stop ids per row, ``n``
completions, the stream equal to the whole; and on recipes/llama.yaml with its reference weights, seeded
sampling over the KV cache equal to sampling from ``forward`` over the whole sequence (no cache)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.generation import generate, greedy_generate, stream_generate
from builder.sampling import Sampler, SamplingParams

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 13
TABLE = np.random.default_rng(5).normal(0, 1.5, size=(VOCAB, 64, VOCAB)).astype(np.float32)


def toy(ids, cache, total_seq_len):
    """Logits (batch, 1, vocab) of the next token: TABLE[last token, total_seq_len]."""
    assert cache == "cache"
    return TABLE[ids[:, -1], total_seq_len][:, None, :]


def reference(prompt, steps, params, stop_ids=()):
    """Each row's tokens, recomputed from the whole sequence at every step (no stream, no cache)."""
    rows = np.repeat(prompt, params.n, axis=0)
    sampler = Sampler(params, rows, VOCAB)
    seqs = [list(r) for r in rows]
    done = [False] * len(seqs)
    out = [[] for _ in seqs]
    for _ in range(steps):
        logits = np.stack([TABLE[s[-1], len(s)] for s in seqs])
        ids = sampler(logits).token_ids
        for r, t in enumerate(ids):
            seqs[r].append(int(t))
            if not done[r]:
                out[r].append(int(t))
                done[r] = int(t) in stop_ids
        if all(done):
            break
    return out


PROMPT = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64)


def _run(prompt, steps, params=None, stop_ids=()):
    return generate(toy, toy, prompt, steps, sampling=params, stop_ids=stop_ids, new_cache=lambda: "cache")


def test_greedy_generate_is_unchanged_and_generate_greedy_equals_it():
    want = greedy_generate(toy, toy, PROMPT, 9, new_cache=lambda: "cache")
    got = _run(PROMPT, 9)
    assert [a.tolist() for a in got.ids] == want.tolist() and got.finish_reasons == ["length"] * 2
    got = _run(PROMPT, 9, SamplingParams(temperature=0.0, top_k=3))
    assert [a.tolist() for a in got.ids] == want.tolist()


@pytest.mark.parametrize("params", [
    SamplingParams(seed=0), SamplingParams(temperature=0.7, top_k=5, top_p=0.9, seed=3, n=3),
    SamplingParams(min_p=0.1, repetition_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.2, seed=9, n=2),
])
def test_sampled_generation_matches_the_whole_sequence_loop(params):
    got = _run(PROMPT, 12, params)
    assert [a.tolist() for a in got.ids] == reference(PROMPT, 12, params)
    again = _run(PROMPT, 12, params)
    assert [a.tolist() for a in again.ids] == [a.tolist() for a in got.ids]
    assert len(got.ids) == 2 * params.n


def test_stop_ids_end_each_row_where_it_meets_one():
    params = SamplingParams(seed=1, n=4)
    free = _run(PROMPT, 20, params)
    stop = int(free.ids[0][3])
    got = _run(PROMPT, 20, params, stop_ids=[stop])
    want = reference(PROMPT, 20, params, stop_ids=(stop,))
    assert [a.tolist() for a in got.ids] == want
    assert got.ids[0].tolist()[-1] == stop and len(got.ids[0]) <= 4
    for ids, reason in zip(got.ids, got.finish_reasons):
        assert reason == ("stop" if ids[-1] == stop else "length")
        assert stop not in ids.tolist()[:-1]


def test_generation_stops_decoding_once_every_row_has_stopped():
    calls = []

    def step(ids, cache, n):
        calls.append(n)
        return toy(ids, cache, n)

    first = greedy_generate(toy, toy, PROMPT[:1], 1, new_cache=lambda: "cache")[0, 0]
    got = generate(step, step, PROMPT[:1], 50, stop_ids=[int(first)], new_cache=lambda: "cache")
    assert got.ids[0].tolist() == [first] and calls == [3] and got.finish_reasons == ["stop"]


def test_the_stream_yields_the_tokens_of_the_whole_and_can_finish_a_row():
    params = SamplingParams(temperature=0.9, seed=4, n=2, logprobs=2)
    whole = _run(PROMPT, 8, params)
    stream = stream_generate(toy, toy, PROMPT, 8, params, new_cache=lambda: "cache")
    rows = [[] for _ in range(stream.rows)]
    for step in stream:
        for r in np.flatnonzero(step.active):
            rows[r].append(int(step.token_ids[r]))
    assert rows == [a.tolist() for a in whole.ids]
    assert whole.logprobs[0].shape == (8,) and whole.top_ids[0].shape == (8, 2)
    assert (whole.logprobs[0] <= 0).all() and (whole.top_logprobs[0][:, 0] >= whole.logprobs[0]).all()
    stream = stream_generate(toy, toy, PROMPT, 8, params, new_cache=lambda: "cache")
    first = next(stream)
    assert first.active.all()
    stream.finish(1)
    second = next(stream)
    assert second.active.tolist() == [True, False, True, True]
    assert stream.finish_reasons[1] == "stop"
    for r in (0, 2, 3):
        stream.finish(r)
    assert stream.done and list(stream) == []


def test_generate_checks_its_arguments():
    with pytest.raises(ValueError, match="stop_ids"):
        _run(PROMPT, 2, stop_ids=[-1])
    with pytest.raises(TypeError, match="sampling"):
        _run(PROMPT, 2, params={"temperature": 1.0})
    with pytest.raises(ValueError, match="generate: max_new_tokens"):
        _run(PROMPT, 0)
    with pytest.raises(ValueError, match="generate: prefill must return float logits"):
        generate(lambda *a: np.zeros((2, 1, 3), dtype=np.int64), toy, PROMPT, 2, new_cache=lambda: "cache")


def test_llama_sampling_over_the_kv_cache_equals_sampling_from_forward():
    import builder

    m = builder.build(ROOT / "recipes" / "llama.yaml", weights=ROOT / "tests" / "data" / "llama_causal_lm.safetensors")
    prompt = np.array([[5, 17, 300, 42]], dtype=np.int64)
    params = SamplingParams(temperature=0.8, top_k=50, top_p=0.95, seed=2024, n=2)
    got = generate(m["prefill"], m["decode"], prompt, 6, params)
    seqs = np.repeat(prompt, 2, axis=0)
    sampler = Sampler(params, seqs, 1000)
    for _ in range(6):   # no cache: the whole sequence through forward at each step
        seqs = np.concatenate([seqs, sampler(m["forward"](seqs)[:, -1, :]).token_ids[:, None]], axis=1)
    assert [a.tolist() for a in got.ids] == seqs[:, 4:].tolist()
    assert got.ids[0].tolist() != got.ids[1].tolist()

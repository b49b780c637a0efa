"""builder.sampling: each filter of the sampler chain against HF transformers' own logits processors on the
same random logits (ours in float64, theirs in float64), ties and edge cases, presence / frequency penalties
and logit bias against their formulas in numpy, the draw's distribution and its seed, logprobs, and the
parameter checks."""
from __future__ import annotations

import numpy as np
import pytest

from builder.sampling import (Sampler, SamplingParams, apply_logit_bias, apply_min_p,
                              apply_presence_frequency_penalty, apply_repetition_penalty, apply_temperature,
                              apply_top_k, apply_top_p, log_softmax, process_logits)



class _HF:
    """transformers' logits processors, imported (or the test skipped) on first use."""

    def __getattr__(self, name):
        return getattr(pytest.importorskip("transformers.generation.logits_process"), name)


lp = _HF()

RNG = np.random.default_rng(7)
LOGITS = RNG.normal(0.0, 2.0, size=(4, 50))
IDS = RNG.integers(0, 50, size=(4, 9))


def _hf(processor, logits=LOGITS, ids=IDS):
    torch = pytest.importorskip("torch")
    return processor(torch.from_numpy(ids), torch.from_numpy(logits.copy())).numpy()


def _same(ours, theirs):
    assert np.array_equal(np.isinf(ours), np.isinf(theirs))
    np.testing.assert_allclose(ours[np.isfinite(ours)], theirs[np.isfinite(theirs)], rtol=1e-12, atol=0)


@pytest.mark.parametrize("t", [0.3, 1.0, 2.5])
def test_temperature_matches_transformers(t):
    _same(apply_temperature(LOGITS, t), _hf(lp.TemperatureLogitsWarper(t)))


@pytest.mark.parametrize("k", [1, 5, 49, 50, 80])
def test_top_k_matches_transformers(k):
    ours = apply_top_k(LOGITS, k)
    _same(ours, _hf(lp.TopKLogitsWarper(k)))
    assert (np.isfinite(ours).sum(axis=1) == min(k, 50)).all()


def test_top_k_keeps_ties_at_the_kth_as_transformers():
    logits = np.array([[1.0, 3.0, 2.0, 2.0, 2.0, 0.5]])
    ours = apply_top_k(logits, 2)
    _same(ours, _hf(lp.TopKLogitsWarper(2), logits, IDS[:1]))
    assert np.isfinite(ours).tolist() == [[False, True, True, True, True, False]]


@pytest.mark.parametrize("p", [0.05, 0.3, 0.9, 0.999, 1.0])
def test_top_p_matches_transformers(p):
    ours = apply_top_p(LOGITS, p)
    _same(ours, _hf(lp.TopPLogitsWarper(p)))
    if p == 1.0:
        assert np.isfinite(ours).all()


@pytest.mark.parametrize("m", [0.0, 0.05, 0.3, 1.0])
def test_min_p_matches_transformers(m):
    ours = apply_min_p(LOGITS, m)
    if m > 0:
        _same(ours, _hf(lp.MinPLogitsWarper(m)))
    assert (np.isfinite(ours).sum(axis=1) >= 1).all()


@pytest.mark.parametrize("penalty", [0.5, 1.3, 2.0])
def test_repetition_penalty_matches_transformers(penalty):
    seen = np.zeros(LOGITS.shape, dtype=bool)
    np.put_along_axis(seen, IDS, True, axis=1)
    _same(apply_repetition_penalty(LOGITS, seen, penalty), _hf(lp.RepetitionPenaltyLogitsProcessor(penalty)))


def test_the_chain_matches_transformers_processors_in_turn():
    params = SamplingParams(temperature=0.7, top_k=20, top_p=0.8, min_p=0.02, repetition_penalty=1.2, seed=0)
    seen = np.zeros(LOGITS.shape, dtype=bool)
    np.put_along_axis(seen, IDS, True, axis=1)
    hf = lp.LogitsProcessorList([lp.RepetitionPenaltyLogitsProcessor(1.2), lp.TemperatureLogitsWarper(0.7),
                                 lp.TopKLogitsWarper(20), lp.TopPLogitsWarper(0.8), lp.MinPLogitsWarper(0.02)])
    _same(process_logits(LOGITS, params, seen), _hf(hf))


def test_all_minus_inf_but_one():
    logits = np.full((2, 6), -np.inf)
    logits[0, 4] = 0.3
    logits[1, 0] = -7.0
    for f in (lambda x: apply_top_k(x, 3), lambda x: apply_top_p(x, 0.5), lambda x: apply_min_p(x, 0.5)):
        out = f(logits)
        assert np.array_equal(np.isfinite(out), np.isfinite(logits))
    s = Sampler(SamplingParams(temperature=1.5, top_p=0.9, seed=3, logprobs=2), [[], []], 6)
    got = s(logits)
    assert got.token_ids.tolist() == [4, 0]
    np.testing.assert_array_equal(got.logprobs, [0.0, 0.0])
    assert got.top_ids[:, 0].tolist() == [4, 0] and np.isneginf(got.top_logprobs[:, 1]).all()


def test_presence_frequency_penalties_and_logit_bias():
    counts = RNG.integers(0, 3, size=LOGITS.shape)
    want = LOGITS - 0.4 * counts - 0.7 * (counts > 0)
    np.testing.assert_allclose(apply_presence_frequency_penalty(LOGITS, counts, 0.7, 0.4), want, rtol=0, atol=1e-13)
    want = LOGITS.copy()
    want[:, 3] += 5.0
    want[:, 7] -= 100.0
    np.testing.assert_array_equal(apply_logit_bias(LOGITS, {3: 5.0, 7: -100.0, 999: 1.0}), want)


def test_greedy_is_argmax_with_the_lowest_index_on_ties():
    logits = np.array([[0.0, 2.0, 2.0, 1.0], [5.0, 5.0, 5.0, 5.0]], dtype=np.float32)
    for params in (SamplingParams(temperature=0.0), SamplingParams(do_sample=False, temperature=3.0, top_k=1)):
        assert Sampler(params, [[], []], 4)(logits).token_ids.tolist() == [1, 0]


def test_greedy_applies_penalties_and_bias():
    logits = np.array([[1.0, 0.9, 0.0]])
    s = Sampler(SamplingParams(temperature=0.0, repetition_penalty=2.0), [[0]], 3)
    assert s(logits).token_ids.tolist() == [1]
    s = Sampler(SamplingParams(temperature=0.0, logit_bias={"2": 3.0}), [[]], 3)
    assert s(logits).token_ids.tolist() == [2]


def test_the_draw_follows_the_filtered_distribution_and_the_seed_reproduces_it():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    params = SamplingParams(top_p=0.85, seed=11)
    s = Sampler(params, [[]], 4)
    draws = np.array([s(logits).token_ids[0] for _ in range(4000)])
    assert 3 not in draws   # 0.5 + 0.3 + 0.15 >= 0.85: the 0.05 token is dropped
    freq = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(freq, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0], atol=0.03)
    again = Sampler(params, [[]], 4)
    assert [again(logits).token_ids[0] for _ in range(4000)] == draws.tolist()
    other = Sampler(SamplingParams(top_p=0.85, seed=12), [[]], 4)
    assert [other(logits).token_ids[0] for _ in range(4000)] != draws.tolist()


def test_logprobs_are_the_log_softmax_of_the_processed_logits():
    params = SamplingParams(temperature=0.5, top_k=10, seed=1, logprobs=3)
    got = Sampler(params, [[]] * 4, 50)(LOGITS)
    ref = np.log(np.exp(LOGITS / 0.5) / np.exp(LOGITS / 0.5).sum(axis=1, keepdims=True))
    ref[apply_top_k(LOGITS, 10) == -np.inf] = -np.inf
    ref = ref - np.log(np.exp(ref).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(got.logprobs, ref[np.arange(4), got.token_ids], rtol=1e-12)
    np.testing.assert_array_equal(got.top_ids, np.argsort(-LOGITS, axis=1, kind="stable")[:, :3])
    np.testing.assert_allclose(got.top_logprobs, np.take_along_axis(ref, got.top_ids, axis=1), rtol=1e-12)
    np.testing.assert_allclose(np.exp(log_softmax(LOGITS)).sum(axis=1), 1.0, rtol=1e-12)


def test_the_penalties_count_what_the_sampler_chose():
    s = Sampler(SamplingParams(temperature=0.0, frequency_penalty=2.0), [[]], 3)
    logits = np.array([[3.0, 0.0, 0.0]])
    # 3, then 3 - 2 = 1 > 0, then 3 - 4 = -1 < 0: token 1, then 1's 0 - 2 < 2's 0: token 2
    assert [int(s(logits).token_ids[0]) for _ in range(4)] == [0, 0, 1, 2]


@pytest.mark.parametrize("kwargs, name", [
    ({"temperature": -0.1}, "temperature"), ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"),
    ({"top_k": -1}, "top_k"), ({"min_p": 2.0}, "min_p"), ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"presence_penalty": 3.0}, "presence_penalty"), ({"frequency_penalty": -2.5}, "frequency_penalty"),
    ({"n": 0}, "n"), ({"logprobs": 21}, "logprobs"), ({"seed": -1}, "seed"), ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"logit_bias": {1: 200}}, "logit_bias"), ({"temperature": float("nan")}, "temperature"),
    ({"top_k": 1.5}, "top_k"), ({"do_sample": "yes"}, "do_sample"), ({"tempurature": 1.0}, "tempurature"),
])
def test_bad_parameters_are_value_errors_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SamplingParams.from_kwargs(**kwargs)

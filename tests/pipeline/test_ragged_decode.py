"""Ragged batched decode over one ``runtime.PagedKVCache`` (issue 43) with the reference Llama (recipes/llama.yaml,
tests/data/llama_causal_lm.safetensors): sequences of different lengths prefilled one by one, then decoded together
in one ``decode`` call per step (weights read once), give each sequence's logits run alone over a fresh cache to
1e-5 and the same greedy tokens (the attention reading the cache's blocks in place); also a sequence added while
others decode, a chunked prefill, forks, and the budget refusing a step before it runs."""
from pathlib import Path

import numpy as np
import pytest

import builder
from helpers.ragged_decode import RaggedRun, assert_same_as_alone, run_alone
from runtime import KVCacheFullError

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = [np.random.default_rng(43 + i).integers(0, 1000, n) for i, n in enumerate((5, 9, 3, 12))]


@pytest.fixture(scope="module")
def llama():
    return builder.build(ROOT / "recipes" / "llama.yaml", weights=ROOT / "tests" / "data" / "llama_causal_lm.safetensors")


def test_four_prompts_prefilled_alone_then_decoded_together_equal_each_run_alone(llama):
    run = RaggedRun(llama)
    for sid, prompt in enumerate(PROMPTS):
        run.prefill(sid, prompt)
    for _ in range(6):
        run.decode([0, 1, 2, 3])
    assert [run.cache.seq_len(s) for s in range(4)] == [11, 15, 9, 18]
    for sid, prompt in enumerate(PROMPTS):
        assert_same_as_alone(run, sid, prompt)
    assert len({tuple(run.fed[s]) for s in range(4)}) == 4      # four different continuations


def test_the_decode_runs_check_the_pool_views_once_per_pool(llama):
    """The cache hands each layer's pools over as the same read-only views step after step until a pool grows;
    the decode's kernel runs check such an array once (as a parameter) and see a grown pool's new view: every
    step still equals each sequence run alone."""
    run = RaggedRun(llama, block_size=4)
    for sid, prompt in enumerate(PROMPTS[:2]):
        run.prefill(sid, prompt)
    plan = llama.vm._plans
    for _ in range(7):        # 4-token blocks: the pools grow on the way
        run.decode([0, 1])
        views = {id(v) for layer in run.cache._layers.values() for v in layer.views()}
        runs = [s.kernel_run for s in plan["decode"].fast_steps if hasattr(s, "kernel_run")]
        kept = {id(hit[0]) for r in runs for hit in r.cached if hit is not None}
        assert views <= kept
    for sid, prompt in enumerate(PROMPTS[:2]):
        assert_same_as_alone(run, sid, prompt)


def test_a_sequence_added_while_others_decode_and_one_removed(llama):
    run = RaggedRun(llama, block_size=16)
    run.prefill(0, PROMPTS[0])
    run.prefill(1, PROMPTS[1])
    for _ in range(3):
        run.decode([0, 1])
    run.prefill(2, PROMPTS[3])                                  # alone, batch 1, while 0 and 1 are held
    for _ in range(3):
        run.decode([0, 1, 2])
    free = run.cache.free_blocks
    run.cache.remove_sequence(0)
    assert run.cache.free_blocks == free + 1
    for _ in range(2):
        run.decode([2, 1])                                      # the rows in another order
    for sid, prompt in ((0, PROMPTS[0]), (1, PROMPTS[1]), (2, PROMPTS[3])):
        assert_same_as_alone(run, sid, prompt)


def test_chunked_prefill_equals_one_prefill(llama):
    run = RaggedRun(llama)
    run.prefill(0, PROMPTS[3], chunks=(5, 7))                   # a prefix already in the cache, then the rest
    run.prefill(1, PROMPTS[1])
    for _ in range(4):
        run.decode([0, 1])
    assert_same_as_alone(run, 0, PROMPTS[3])
    assert_same_as_alone(run, 1, PROMPTS[1])
    chunked, _ = run_alone(llama, PROMPTS[3], 0, chunks=(5, 7))
    np.testing.assert_allclose(chunked, run_alone(llama, PROMPTS[3], 0)[0], atol=1e-5, rtol=0)


def test_two_forks_of_a_prefilled_prompt_decode_like_two_independent_runs(llama):
    run = RaggedRun(llama)
    run.prefill(0, PROMPTS[1])                                  # 9 tokens: 2 full blocks of 4 shared, 1 copied
    run.fork(0, 1)
    run.fork(0, 2)
    one, two = [11, 22, 33, 44], [55, 66, 77, 88]
    for i in range(4):
        run.decode([1, 0, 2], forced={1: one[i], 2: two[i]})   # the parent decodes greedily alongside
    assert_same_as_alone(run, 1, PROMPTS[1], forced=one)
    assert_same_as_alone(run, 2, PROMPTS[1], forced=two)
    assert_same_as_alone(run, 0, PROMPTS[1])                    # the children's appends never reached the parent


def test_the_budget_refuses_a_step_before_it_runs(llama):
    run = RaggedRun(llama, max_tokens=32, block_size=4)         # 8 blocks
    run.prefill(0, PROMPTS[3])                                  # 12 tokens: 3 blocks
    run.prefill(1, PROMPTS[1])                                  # 9 tokens: 3 blocks
    for _ in range(3):
        run.decode([0, 1])                                      # 15 and 12 tokens: 4 + 3 blocks
    assert run.cache.free_blocks == 1
    run.decode([0, 1])                                          # 16 and 13: the last block
    with pytest.raises(KVCacheFullError, match="2 new tokens need 1 new blocks of 4 tokens, but only 0 of the 8"):
        run.decode([0, 1])
    assert [run.cache.seq_len(s) for s in (0, 1)] == [16, 13]   # nothing changed
    run.cache.remove_sequence(1)
    run.decode([0])
    assert_same_as_alone(run, 0, PROMPTS[3])


def test_decode_runs_the_paged_attention_kernel_over_the_cache_blocks(llama):
    """The ragged batch costs no copy and no mask: decode's attention is one native kernel (not the loop code)
    for both layers, given the layer's pools, the block table and the lengths as the cache hands them over
    (one ``kv_cache_append`` per layer); the positions come from one builtin call for both layers."""
    exe = llama.exe
    calls = {i[1] for i in exe.functions["decode"]["instructions"] if i[0] == "call"}
    attention = [n for n in calls if str(exe.kernels[n].get("kernel", "loops")).startswith("attention/")]
    assert len(attention) == 1, sorted(calls)
    params = exe.kernels[attention[0]]["params"]
    assert [p["dtype"] for p in params] == ["float32", "float32", "float32", "int32", "int32", "float32"]
    assert params[1]["shape"] == [["var", "num_blocks"], ["var", "block_size"], 4, 32]
    assert params[3]["shape"] == [["var", "batch"], ["var", "max_blocks"]]
    builtins = [i[2] for i in exe.functions["decode"]["instructions"] if i[0] == "call_builtin"]
    assert builtins.count("vm.builtin.kv_cache_append") == 2 and builtins.count("vm.builtin.kv_cache_positions") == 1
    assert not {"vm.builtin.kv_cache_update", "vm.builtin.kv_cache_attention_mask"} & set(builtins)

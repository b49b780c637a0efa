"""Attention written out in ``forward:`` over the runtime KV cache (issues 42, 43): a ``KVCache`` layer taking the
q, k, v a fused ``qkv`` projection (split by ``split``) and ``rotary_embedding`` made, and returning the attention
(bottom-right causal, grouped-query, an ALiBi-style additive bias; a sliding window, a logit cap and a scale in
a variant). ``forward`` (no cache: the plain attention) is checked against a numpy float64 reference of the same
computation; prefill + decode, chunked prefill and greedy generation (the cache's blocks read in place) against
``forward``; a ragged batch of a paged cache against each sequence alone; a model mixing a ``KVCache`` layer and
an ``Attention`` layer; recipe errors at file:line:column."""
from __future__ import annotations

import re

import numpy as np
import pytest

import builder
from builder import nn
from builder.nn import spec
from runtime import ContiguousKVCache

HEADS, KV_HEADS, HEAD_DIM, HIDDEN, VOCAB, THETA = 4, 2, 4, 16, 13, 10000.0

BLOCK = """\
  Block:
    inputs: [x, positions, num_keys, cache=None, total_seq_len=None]
    layers:
      qkv_proj: {type: Linear, in_features: ${hidden}, out_features: ${(heads + 2 * kv_heads) * head_dim}, bias: true}
      kv: {type: KVCache, num_kv_heads: ${kv_heads}, head_dim: ${head_dim}}
      slopes: {type: Parameter, shape: [1, ${heads}, 1, 1]}
      o_proj: {type: Linear, in_features: ${heads * head_dim}, out_features: ${hidden}, bias: false}
    forward: |
      batch = size(x, 0)
      seq = size(x, 1)
      parts = split(qkv_proj(x), [${heads * head_dim}, ${(heads + kv_heads) * head_dim}], axis=-1)
      q = rotary_embedding(reshape(parts[0], [batch, seq, ${heads}, ${head_dim}]), positions, THETA)
      k = rotary_embedding(reshape(parts[1], [batch, seq, ${kv_heads}, ${head_dim}]), positions, THETA)
      v = reshape(parts[2], [batch, seq, ${kv_heads}, ${head_dim}])
      bias = slopes * reshape(astype(arange(num_keys, dtype="int64"), "float64"), [1, 1, 1, -1])
      o = KV_CALL
      return x + o_proj(reshape(o, [batch, seq, ${heads * head_dim}]))
"""

ATTN_BLOCK = """\
  AttnBlock:
    inputs: [x, positions, cache=None, total_seq_len=None]
    layers:
      self_attn: {type: Attention, hidden_size: ${hidden}, num_heads: ${heads}, num_kv_heads: ${kv_heads}, rope_theta: THETA, causal: true}
    forward: |
      return x + self_attn(x, positions, cache=cache, total_seq_len=total_seq_len)
"""

# the positions of prefill / decode are each row's own (a ragged batch: runtime.PagedKVCache.begin_forward)
FUNCTIONS = """\
functions:
  forward:
    inputs:
      input_ids: {shape: [batch, seq], dtype: int64}
    forward: |
      positions = arange(seq, dtype="int64")
      return lm_head(MODEL(embed(input_ids), positions))
  prefill:
    inputs:
      input_ids: {shape: [batch, seq], dtype: int64}
      cache: {type: kv_cache}
      total_seq_len: {type: int}
    forward: |
      positions = kv_cache_positions(cache, batch, seq, total_seq_len)
      return lm_head(MODEL(embed(input_ids), positions, cache, total_seq_len))
  decode:
    inputs:
      input_ids: {shape: [batch, 1], dtype: int64}
      cache: {type: kv_cache}
      total_seq_len: {type: int}
    forward: |
      positions = kv_cache_positions(cache, batch, 1, total_seq_len)
      return lm_head(MODEL(embed(input_ids), positions, cache, total_seq_len))
"""

KV_CALL = 'kv(q, k, v, cache=cache, total_seq_len=total_seq_len, attn_mask=bias, causal_mask="BottomRight"{})'

#: the options of the windowed variant: a sliding window of 3 keys, a logit cap and a scale of their own
WINDOWED = {"window_size": 3, "logit_softcap": 2.0, "scale": 0.3}


def recipe(kv_call: str = KV_CALL.format(""), mixed: bool = False, rope: bool = True) -> str:
    """The recipe text: two written-out ``Block``s (``layers``), or with ``mixed`` one ``Block`` then one
    ``AttnBlock`` (an ``Attention`` layer) then another ``Block``; ``rope=False`` leaves out the rotary
    embeddings of the written-out blocks. A block's bias has one column per key: ``num_keys`` is ``seq`` in
    ``forward`` and ``total_seq_len`` in prefill / decode."""
    blocks = BLOCK + (ATTN_BLOCK if mixed else "")
    if not rope:
        blocks = re.sub(r"rotary_embedding\((reshape\(.*\]\)), positions, THETA\)", r"\1", blocks)
    layers = ("    first: {type: Block}\n    attn: {type: AttnBlock}\n    last: {type: Block}\n" if mixed
              else "    layers: {type: Block, repeat: 2}\n")
    model = ("last(attn(first(E, positions, N, CC), positions, CC), positions, N, CC)" if mixed
             else "layers(E, positions, N, CC)")
    functions = FUNCTIONS
    for fn_model in ("MODEL(embed(input_ids), positions)", "MODEL(embed(input_ids), positions, cache, total_seq_len)"):
        cached = "cache" in fn_model
        text = (model.replace("E", "embed(input_ids)").replace("N", "total_seq_len" if cached else "seq")
                .replace("CC", "cache, total_seq_len" if cached else "None, None"))
        functions = functions.replace(fn_model, text)
    return (f"name: handwritten_attention\nvars: {{vocab: {VOCAB}, hidden: {HIDDEN}, heads: {HEADS}, "
            f"kv_heads: {KV_HEADS}, head_dim: {HEAD_DIM}}}\ndtype: float64\nblocks:\n"
            + blocks.replace("KV_CALL", kv_call).replace("THETA", str(THETA))
            + "model:\n  layers:\n    embed: {type: Embedding, num: ${vocab}, dim: ${hidden}}\n" + layers
            + "    lm_head: {type: Linear, in_features: ${hidden}, out_features: ${vocab}, bias: false}\n"
            + functions)


def _build(tmp_path, text: str, seed: int = 0):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    m = builder.build(path, seed=seed)
    rng = np.random.default_rng(seed + 1)   # weights off their small init: scores that matter
    for name, value in m.params.items():
        value[...] = rng.normal(0.0, 0.5, value.shape)
    return m


def _rope(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """HF Llama's rotate_half RoPE on x (B, S, H, D), its cos / sin tables in float32 (as
    ``rotary_embedding`` computes them, after HF's ``LlamaRotaryEmbedding``) and the rotation in float64."""
    d = x.shape[-1]
    inv = (np.float32(1.0) / np.float32(THETA) ** (np.arange(0, d, 2).astype(np.float32) / np.float32(d)))
    freqs = pos.astype(np.float32)[:, None] * inv
    angle = np.concatenate([freqs, freqs], -1)[None, :, None, :]
    cos, sin = np.cos(angle).astype(np.float64), np.sin(angle).astype(np.float64)
    rot = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rot * sin


def _reference_logits(p: dict, ids: np.ndarray, rope: bool = True, window_size: int | None = None,
                      logit_softcap: float | None = None, scale: float | None = None) -> np.ndarray:
    """The model's logits (B, S, vocab) in numpy float64: two written-out blocks over the whole sequence
    (with ``rope=False`` no rotary embeddings). Scores ``c * tanh(scale * q.k / c)`` with a ``logit_softcap``
    ``c`` (Gemma 2), plus the bias ``slope_h * j``, causal, and with ``window_size`` ``W`` only keys ``i - W <
    j <= i`` (HF's ``sliding_window_overlay``)."""
    maybe_rope = _rope if rope else (lambda x, pos: x)
    h = p["embed.weight"][ids]
    b, s, _ = h.shape
    pos = np.arange(s)
    group = HEADS // KV_HEADS
    keep = pos[None, :] <= pos[:, None]
    if window_size is not None:
        keep &= pos[None, :] > pos[:, None] - window_size
    for i in range(2):
        w = lambda n: p[f"layers.{i}.{n}"]   # noqa: E731
        qkv = h @ w("qkv_proj.weight").T + w("qkv_proj.bias")
        q = maybe_rope(qkv[..., : HEADS * HEAD_DIM].reshape(b, s, HEADS, HEAD_DIM), pos)
        k = maybe_rope(qkv[..., HEADS * HEAD_DIM: (HEADS + KV_HEADS) * HEAD_DIM].reshape(b, s, KV_HEADS, HEAD_DIM), pos)
        v = qkv[..., (HEADS + KV_HEADS) * HEAD_DIM:].reshape(b, s, KV_HEADS, HEAD_DIM)
        k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
        scores = np.einsum("bihd,bjhd->bhij", q, k) * (1 / np.sqrt(HEAD_DIM) if scale is None else scale)
        if logit_softcap is not None:
            scores = logit_softcap * np.tanh(scores / logit_softcap)
        scores = scores + w("slopes") * pos[None, None, None, :]
        scores = np.where(keep, scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        o = np.einsum("bhij,bjhd->bihd", probs, v).reshape(b, s, HEADS * HEAD_DIM)
        h = h + o @ w("o_proj.weight").T
    return h @ p["lm_head.weight"].T


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("kv"), recipe())


@pytest.fixture(scope="module")
def windowed(tmp_path_factory):
    """Without RoPE (a float64 comparison to rounding), with the options of :data:`WINDOWED`."""
    extra = "".join(f", {k}={v}" for k, v in WINDOWED.items())
    return _build(tmp_path_factory.mktemp("kvw"), recipe(KV_CALL.format(extra), rope=False), seed=7)


IDS = np.array([[1, 5, 2, 12, 7, 3, 9], [4, 0, 11, 6, 8, 10, 2]], np.int64)


def _prefill_then_decode(m, ids: np.ndarray, prompt: int) -> np.ndarray:
    """The logits (B, S, vocab) of ``ids`` by a prefill of its first ``prompt`` tokens, then one decode step
    per token, over a fresh cache."""
    cache = ContiguousKVCache()
    out = [m["prefill"](ids[:, :prompt], cache, prompt)]
    out += [m["decode"](ids[:, t:t + 1], cache, t + 1) for t in range(prompt, ids.shape[1])]
    return np.concatenate(out, 1)


def test_forward_matches_numpy_without_rope(tmp_path):
    m = _build(tmp_path, recipe(rope=False))
    np.testing.assert_allclose(m["forward"](IDS), _reference_logits(m.params, IDS, rope=False), rtol=1e-12,
                               atol=1e-12)


def test_forward_matches_numpy_and_prefill_then_decode_match_forward(model):
    """With RoPE the cos / sin tables are float32 by design (``rotary_embedding``, after HF's
    ``LlamaRotaryEmbedding``), and the compiled float32 cos / sin may differ from numpy's by an ulp: the
    numpy comparison holds to float32 rounding of the tables (everything else is float64, see the test
    above); prefill / decode use the very same tables as forward and match it to float64 rounding."""
    full = model["forward"](IDS)
    np.testing.assert_allclose(full, _reference_logits(model.params, IDS), rtol=1e-5, atol=1e-5)
    cache = ContiguousKVCache()
    np.testing.assert_allclose(model["prefill"](IDS[:, :4], cache, 4), full[:, :4], rtol=1e-12, atol=1e-12)
    for t in range(4, IDS.shape[1]):
        step = model["decode"](IDS[:, t:t + 1], cache, t + 1)
        np.testing.assert_allclose(step[:, 0], full[:, t], rtol=1e-12, atol=1e-12)
    assert cache.layer_ids == [0, 1] and cache.seq_len(1) == IDS.shape[1]


def test_window_cap_and_scale_agree_with_numpy_in_forward_prefill_and_decode(windowed):
    """The layer hands ``window_size``, ``logit_softcap`` and ``scale`` to both attentions alike: forward (the
    plain attention) equals the float64 reference, prefill + decode (the paged attention) equal forward."""
    full = windowed["forward"](IDS)
    np.testing.assert_allclose(full, _reference_logits(windowed.params, IDS, rope=False, **WINDOWED), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(_prefill_then_decode(windowed, IDS, 2), full, rtol=1e-12, atol=1e-12)
    unwindowed = _reference_logits(windowed.params, IDS, rope=False, logit_softcap=2.0, scale=0.3)
    assert np.abs(unwindowed[:, 3:] - full[:, 3:]).max() > 1e-3    # the window does cut keys off


def test_two_prefill_chunks_equal_one_prefill(model):
    one, two = ContiguousKVCache(), ContiguousKVCache()
    whole = model["prefill"](IDS, one, 7)
    first = model["prefill"](IDS[:, :3], two, 3)
    second = model["prefill"](IDS[:, 3:], two, 7)
    np.testing.assert_allclose(np.concatenate([first, second], 1), whole, rtol=1e-12, atol=1e-12)
    for layer in (0, 1):
        for a, b in zip(one.view(layer), two.view(layer)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_greedy_generation_equals_argmax_of_forward_on_the_growing_sequence(model):
    prompt = IDS[:, :3]
    new = model.generate(prompt, 5)
    seq = prompt
    for step in range(5):
        token = model["forward"](seq)[:, -1].argmax(-1)
        np.testing.assert_array_equal(new[:, step], token)
        seq = np.concatenate([seq, token[:, None]], 1)
    assert len(set(new.ravel().tolist())) > 1   # the sequences do move


def test_the_layer_reads_the_cache_blocks_in_place(model):
    """Prefill / decode append with ``kv_cache_append`` and attend with the paged attention kernel: no padded
    copy (``kv_cache_update``) and no padding mask (``kv_cache_attention_mask``) is emitted any more."""
    exe = model.exe
    for fn in ("prefill", "decode"):
        builtins = [i[2] for i in exe.functions[fn]["instructions"] if i[0] == "call_builtin"]
        assert builtins.count("vm.builtin.kv_cache_append") == 2, builtins
        assert not {"vm.builtin.kv_cache_update", "vm.builtin.kv_cache_attention_mask"} & set(builtins)
    calls = {i[1] for i in exe.functions["decode"]["instructions"] if i[0] == "call"}
    paged = [n for n in calls if "block_size" in str(exe.kernels[n].get("params"))]
    assert paged, sorted(calls)


def test_written_out_attention_decodes_a_ragged_batch(model, windowed):
    """Sequences of 2, 6 and 4 tokens prefilled one by one into a paged cache (blocks of 4), then decoded
    together (rows of different lengths, issue 43): each row equals its sequence run alone, with no mask
    written in the recipe (the bias's column ``j`` is the row's key ``j``; the window counts the row's own
    positions)."""
    from helpers.ragged_decode import check_ragged_decode

    prompts = [np.random.default_rng(9 + i).integers(0, VOCAB, n) for i, n in enumerate((2, 6, 4))]
    check_ragged_decode(model, prompts, 4, atol=1e-10)
    check_ragged_decode(windowed, prompts, 3, order=[2, 0, 1], atol=1e-10)


def test_a_model_mixing_kv_cache_and_attention_layers(tmp_path):
    m = _build(tmp_path, recipe(mixed=True), seed=3)
    full = m["forward"](IDS)
    cache = ContiguousKVCache()
    np.testing.assert_allclose(m["prefill"](IDS[:, :5], cache, 5), full[:, :5], rtol=1e-11, atol=1e-11)
    for t in (5, 6):
        np.testing.assert_allclose(m["decode"](IDS[:, t:t + 1], cache, t + 1)[:, 0], full[:, t], rtol=1e-11,
                                   atol=1e-11)
    assert cache.layer_ids == [0, 1, 2] and cache.seq_len(1) == 7
    # the Attention layer's slot holds its keys: (batch, 7, kv_heads, head_dim)
    assert cache.view(1)[0].shape == (2, 7, KV_HEADS, HEAD_DIM)


def test_cache_slots_are_numbered_across_kv_cache_and_attention_layers(tmp_path):
    from builder.recipe import instantiate
    import schemas

    path = tmp_path / "r.yaml"
    path.write_text(recipe(mixed=True))
    module, _ = instantiate(schemas.load_recipe(path))
    ids = {name: mod.layer_id for name, mod in (("first", module.first.kv), ("attn", module.attn.self_attn),
                                                ("last", module.last.kv))}
    assert ids == {"first": 0, "attn": 1, "last": 2}


ON = "kv (KVCacheLayer) on 'q', (batch, seq, 4, 4) float64; 'k', (batch, seq, 2, 4) float64; 'v', " \
     "(batch, seq, 2, 4) float64"


@pytest.mark.parametrize("kv_call,kv_heads,message", [
    ("kv(q, k, v, cache=cache)", None, "KVCache: give cache and total_seq_len together"),
    (KV_CALL.format(""), 3, "KVCache: k must be (batch, seq, num_kv_heads=3, head_dim=4), got (batch, seq, 2, 4)"),
    ('kv(q, k, v, cache=cache, total_seq_len=total_seq_len, causal_mask="TopLeft")', None,
     "KVCache: causal_mask must be None or 'BottomRight'"),
    ("kv(q, k, v, cache=cache, total_seq_len=total_seq_len, window_size=2)", None,
     "a sliding window (window_size=2) needs a causal_mask"),
])
def test_kv_cache_errors_name_the_layer_at_the_call(run_cli, kv_call, kv_heads, message):
    text = recipe(kv_call)
    if kv_heads is not None:   # the KVCache layer expects 3 heads, the written-out k has 2
        text = text.replace("kv: {type: KVCache, num_kv_heads: ${kv_heads}", f"kv: {{type: KVCache, num_kv_heads: "
                                                                              f"{kv_heads}")
    rc, err, _, path = run_cli(text)
    assert rc == 2, err
    line = text.splitlines().index("      o = " + kv_call) + 1
    assert re.search(rf"^{re.escape(path)}:{line}:11: blocks\.Block\.forward: .*{re.escape(ON)}: .*"
                     rf"{re.escape(message)}", err, re.M), err


def test_a_string_reaches_a_layer_only_where_its_signature_takes_one(run_cli):
    """``causal_mask="BottomRight"`` passes (a ``str`` parameter of ``KVCacheLayer.forward``); a string for the
    mask is refused before the layer sees it."""
    call = 'kv(q, k, v, cache=cache, total_seq_len=total_seq_len, attn_mask="bias")'
    rc, err, _, path = run_cli(recipe(call))
    line = recipe(call).splitlines().index("      o = " + call) + 1
    assert rc == 2 and re.search(rf"^{re.escape(path)}:{line}:11: .*kv\(\) \(KVCacheLayer\) takes tensors, got str",
                                 err, re.M), err


def test_kv_cache_fields_are_validated(run_cli):
    rc, err, _, path = run_cli(recipe().replace("head_dim: ${head_dim}}", "head_dim: 0}", 1))
    assert rc == 2 and re.search(rf"^{re.escape(path)}:\d+:\d+: .*kv\.head_dim", err, re.M), err


def test_kv_cache_layer_module():
    layer = nn.KVCacheLayer(4, 8, tensor_parallel_shards=2)
    assert (layer.num_kv_heads, layer.local_num_kv_heads, layer.head_dim, layer.layer_id) == (4, 2, 8, None)
    with pytest.raises(ValueError, match="KVCache: head_dim must be a positive int, got 0"):
        nn.KVCacheLayer(2, 0)
    with pytest.raises(nn.tensor_parallel.ShardError):
        nn.KVCacheLayer(3, 8, tensor_parallel_shards=2)


@pytest.mark.parametrize("q_shape,dtype,error,match", [
    ([2, 3, 3, 4], "float32", ValueError, r"q must be \(batch, seq, num_heads, head_dim=4\) with num_heads a static "
                                          r"multiple of num_kv_heads=2, got \(2, 3, 3, 4\)"),
    ([2, 3, 4, 8], "float32", ValueError, "q must be"),
    ([2, 5, 4, 4], "float32", ValueError, r"the sequence length of q \(2, 5, 4, 4\) differs from that of k"),
    ([2, 3, 4, 4], "float64", TypeError, "q, k and v must have one float dtype, got float64, float32 and float32"),
])
def test_kv_cache_layer_checks_its_query(q_shape, dtype, error, match):
    class M(nn.Module):
        def __init__(self):
            self.kv = nn.KVCacheLayer(2, 4)

        def attend(self, q, k, v):
            return self.kv(q, k, v)

    kv = spec.Tensor([2, 3, 2, 4], "float32")
    with pytest.raises(error, match=f"KVCache: {match}"):
        M().export_tvm(spec={"attend": {"q": spec.Tensor(q_shape, dtype), "k": kv, "v": kv}})

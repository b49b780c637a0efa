"""nn.Attention, nn.op.rotary_embedding and the runtime KV cache from the Python API (issue 14).

Small float64 layers against a numpy reference written here (scaled dot-product attention, Vaswani et
al. 2017; grouped-query attention, Ainslie et al. 2023; rotary embeddings with HF's rotate_half), then
a 2-layer Llama built from nn modules with HF transformers' weights and outputs (tests/data/llama_*:
LlamaForCausalLM logits, and greedy generation with its cache), and builder.generation.greedy_generate.
"""
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from builder import compile as build
from builder import nn
from builder.generation import MAX_NEW_TOKENS, greedy_generate
from builder.ir import relax as rx
from builder.ir.parser import parse
from builder.nn import spec
from runtime import ContiguousKVCache, VirtualMachine

DATA = Path(__file__).resolve().parents[1] / "data"
RNG = np.random.default_rng(2014)
TIGHT = dict(rtol=1e-10, atol=1e-12)
#: with rotary embeddings cos / sin are float32 (ours against numpy's: a few ulp)
ROPE = dict(rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# numpy reference


def rope_ref(t, positions, theta):
    """HF Llama's apply_rotary_pos_emb on t (b, s, heads, d), positions (s,) or (b, s): inv_freq, the
    angles, cos and sin in float32 (as HF's LlamaRotaryEmbedding), the rotation in t's dtype."""
    d = t.shape[-1]
    f32 = np.float32
    inv_freq = f32(1) / f32(theta) ** (np.arange(0, d, 2).astype(f32) / f32(d))
    ang = np.asarray(positions).astype(f32)[..., None] * inv_freq
    ang = np.concatenate([ang, ang], axis=-1)[..., None, :]          # (.., s, 1, d)
    rotated = np.concatenate([-t[..., d // 2:], t[..., : d // 2]], axis=-1)
    return t * np.cos(ang).astype(t.dtype) + rotated * np.sin(ang).astype(t.dtype)


def attention_ref(x, w, heads, kv_heads, head_dim, theta=None, causal=False, keep=None, additive=None,
                  positions=None):
    """Self-attention of x (b, s, hidden) with the weights ``w`` (HF names), in float64."""
    b, s, _ = x.shape

    def linear(name, inp):
        y = inp @ w[f"{name}.weight"].T
        return y + w[f"{name}.bias"] if f"{name}.bias" in w else y

    q = linear("q_proj", x).reshape(b, s, heads, head_dim)
    k = linear("k_proj", x).reshape(b, s, kv_heads, head_dim)
    v = linear("v_proj", x).reshape(b, s, kv_heads, head_dim)
    if theta is not None:
        pos = np.arange(s) if positions is None else positions
        q, k = rope_ref(q, pos, theta), rope_ref(k, pos, theta)
    k = np.repeat(k, heads // kv_heads, axis=2)                       # query head h uses kv head h // rep
    v = np.repeat(v, heads // kv_heads, axis=2)
    scores = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(head_dim)
    allowed = np.ones((b, heads, s, s), dtype=bool)
    if causal:
        allowed &= np.tril(np.ones((s, s), dtype=bool))
    if keep is not None:
        allowed &= np.asarray(keep).astype(bool)[:, None, None, :]
    if additive is not None:
        scores = scores + additive
        allowed &= np.isfinite(np.broadcast_to(additive, scores.shape))
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    e = np.where(allowed, np.exp(scores - np.where(np.isfinite(top), top, 0)), 0.0)
    den = e.sum(axis=-1, keepdims=True)
    p = np.divide(e, den, out=np.zeros_like(e), where=den > 0)       # fully masked rows: zeros
    out = np.einsum("bhij,bjhd->bihd", p, v).reshape(b, s, heads * head_dim)
    return linear("o_proj", out)


def random_weights(module, dtype="float64"):
    w = {name: RNG.standard_normal(p.shape).astype(dtype) * 0.3 for name, p in module.named_parameters()}
    module.load_state_dict(w)
    return w


def x_of(*shape):
    return RNG.standard_normal(shape).astype("float64")


# ---------------------------------------------------------------------------------------------
# Attention alone


def test_children_and_parameter_names_follow_hf_llama():
    attn = nn.Attention(64, 8, num_kv_heads=2, head_dim=16, rope_theta=10000.0, causal=True)
    shapes = {n: tuple(p.shape) for n, p in attn.named_parameters()}
    assert shapes == {"q_proj.weight": (128, 64), "k_proj.weight": (32, 64), "v_proj.weight": (32, 64),
                      "o_proj.weight": (64, 128)}
    biased = nn.Attention(12, 3, bias=True, out_bias=False)
    assert [n for n, _ in biased.named_parameters()] == [
        "q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias",
        "o_proj.weight"]
    assert biased.head_dim == 4 and biased.num_kv_heads == 3 and biased.layer_id is None
    assert len(list(nn.Attention(12, 3, bias=True).named_parameters())) == 8   # out_bias follows bias
    whisper = nn.Attention(12, 3, bias=True, key_bias=False)   # HF Whisper: no k_proj bias
    assert [n for n, _ in whisper.named_parameters() if n.endswith("bias")] == [
        "q_proj.bias", "v_proj.bias", "o_proj.bias"]
    assert "k_proj.bias" in dict(nn.Attention(12, 3, key_bias=True).named_parameters())


def test_multi_head_bidirectional_with_symbolic_batch_and_seq():
    attn = nn.Attention(16, 4, bias=True, dtype="float64")
    w = random_weights(attn)
    f = attn.jit(spec={"forward": {"x": spec.Tensor(["batch", "seq", 16], "float64")}})
    for shape in [(2, 5, 16), (3, 1, 16), (1, 7, 16)]:
        x = x_of(*shape)
        np.testing.assert_allclose(f["forward"](x), attention_ref(x, w, 4, 4, 4), **TIGHT)


def test_grouped_query_causal_with_rope_default_and_explicit_positions():
    attn = nn.Attention(24, 6, num_kv_heads=2, head_dim=8, rope_theta=500.0, causal=True, dtype="float64")
    w = random_weights(attn)
    f = attn.jit(spec={"forward": {"x": spec.Tensor(["batch", "seq", 24], "float64")}})
    x = x_of(2, 6, 24)
    np.testing.assert_allclose(f["forward"](x), attention_ref(x, w, 6, 2, 8, theta=500.0, causal=True),
                               **ROPE)
    # positions per sequence (batch, seq), e.g. a left-padded batch, and shared (seq,)
    g = attn.jit(spec={"forward": {"x": spec.Tensor(["batch", "seq", 24], "float64"),
                                   "positions": spec.Tensor(["batch", "seq"], "int64")}})
    pos = np.array([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]], dtype=np.int64)
    np.testing.assert_allclose(g["forward"](x, pos),
                               attention_ref(x, w, 6, 2, 8, theta=500.0, causal=True, positions=pos),
                               **ROPE)
    h = attn.jit(spec={"forward": {"x": spec.Tensor([2, "seq", 24], "float64"),
                                   "positions": spec.Tensor(["seq"], "int32")}})
    np.testing.assert_allclose(h["forward"](x, pos[1].astype("int32")),
                               attention_ref(x, w, 6, 2, 8, theta=500.0, causal=True, positions=pos[1]),
                               **ROPE)


def test_rope_alone_is_hf_rotate_half_and_keeps_float32_angles():
    class Rope(nn.Module):
        def forward(self, x, positions):
            return nn.op.rotary_embedding(x, positions, 10000.0)

    x64 = x_of(2, 5, 3, 8)
    pos = np.array([3, 4, 5, 6, 40], dtype=np.int64)
    f = Rope().jit(spec={"forward": {"x": spec.Tensor([2, "seq", 3, 8], "float64"),
                                     "positions": spec.Tensor(["seq"], "int64")}})
    np.testing.assert_allclose(f["forward"](x64, pos), rope_ref(x64, pos, 10000.0), **ROPE)
    # float32: HF's float32 inv_freq and angles, cos / sin cast to float32
    x32 = x64.astype("float32")
    g = Rope().jit(spec={"forward": {"x": spec.Tensor([2, "seq", 3, 8], "float32"),
                                     "positions": spec.Tensor(["seq"], "int64")}})
    inv32 = (np.float32(1) / np.float32(10000.0) ** (np.arange(0, 8, 2).astype("float32") / np.float32(8)))
    ang = pos.astype("float32")[:, None] * inv32
    ang = np.concatenate([ang, ang], -1)[:, None, :]
    rotated = np.concatenate([-x32[..., 4:], x32[..., :4]], -1)
    want = x32 * np.cos(ang).astype("float32") + rotated * np.sin(ang).astype("float32")
    np.testing.assert_allclose(g["forward"](x32, pos), want, rtol=2e-6, atol=2e-6)


def test_rope_rotation_is_one_kernel_with_the_ops_roundings():
    """``R.nn.rope`` (the rotation) is one kernel, printed and parsed back; in float16 it rounds
    where the ops it stands for round (x * cos, rotate_half(x) * sin and their sum, each to float16);
    positions (batch, seq) broadcast per batch row; the table ops stay separate kernels."""
    from builder.ir import print_irmodule
    from builder.transform import default_pipeline

    class Rope(nn.Module):
        def forward(self, x, positions):
            return nn.op.rotary_embedding(x, positions, 10000.0)

    sp = {"forward": {"x": spec.Tensor(["b", "seq", 3, 8], "float16"),
                      "positions": spec.Tensor(["b", "seq"], "int64")}}
    mod, _ = Rope().export_tvm(spec=sp)
    text = mod.script()
    assert "R.nn.rope(x, " in text and "R.split" not in text and "R.negative" not in text
    assert print_irmodule(parse(text)) == text
    kernels = [n for n, f in default_pipeline()(mod).functions.items() if not isinstance(f, rx.Function)]
    assert sum(1 for n in kernels if "rope" in n) == 1, kernels
    x = x_of(2, 5, 3, 8).astype(np.float16)
    pos = np.array([[0, 1, 2, 3, 4], [9, 10, 11, 12, 40]], dtype=np.int64)
    f32 = np.float32
    inv = f32(1) / f32(10000.0) ** (np.arange(0, 8, 2).astype(f32) / f32(8))
    ang = pos.astype(f32)[..., None] * inv
    ang = np.concatenate([ang, ang], -1)[:, :, None, :]
    cos, sin = np.cos(ang).astype(np.float16), np.sin(ang).astype(np.float16)
    rotated = np.concatenate([-x[..., 4:], x[..., :4]], -1)
    want = (x * cos).astype(np.float16) + (rotated * sin).astype(np.float16)    # numpy rounds each op
    got = Rope().jit(spec=sp)["forward"](x, pos)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(f32), want.astype(f32), rtol=1e-3, atol=1e-3)


def test_rope_op_checks_its_arguments():
    from builder.ir.struct_info import TensorStructInfo

    def call(xs, cs, ss, dt="float32", cdt="float32"):
        x = rx.Var("x", TensorStructInfo(xs, dt))
        return rx.Call(rx.Op.get("nn.rope"), [x, rx.Var("c", TensorStructInfo(cs, cdt)),
                                              rx.Var("s", TensorStructInfo(ss, cdt))])

    assert [int(d) for d in call((2, 5, 3, 8), (5, 1, 8), (5, 1, 8)).struct_info.shape] == [2, 5, 3, 8]
    with pytest.raises(ValueError, match="last dim of x .* must be a static even int"):
        call((2, 5, 3, 7), (5, 1, 7), (5, 1, 7))
    with pytest.raises(ValueError, match=r"shapes \(2, 5, 3, 8\) and \(6, 1, 8\) do not broadcast"):
        call((2, 5, 3, 8), (6, 1, 8), (5, 1, 8))
    with pytest.raises(ValueError, match="sin .* does not broadcast to x"):
        call((2, 5, 3, 8), (5, 1, 8), (2, 2, 5, 3, 8))
    with pytest.raises(TypeError, match="x must be a float tensor"):
        call((2, 5, 3, 8), (5, 1, 8), (5, 1, 8), dt="int32", cdt="int32")
    with pytest.raises(TypeError):
        call((2, 5, 3, 8), (5, 1, 8), (5, 1, 8), cdt="float16")


@pytest.mark.parametrize("mask_dtype", ["bool", "int64", "int32"])
@pytest.mark.parametrize("causal", [False, True])
def test_padding_mask_hides_padded_keys(mask_dtype, causal):
    attn = nn.Attention(16, 2, num_kv_heads=1, rope_theta=None if not causal else 100.0, causal=causal,
                        dtype="float64")
    w = random_weights(attn)
    f = attn.jit(spec={"forward": {"x": spec.Tensor(["batch", "seq", 16], "float64"),
                                   "attention_mask": spec.Tensor(["batch", "seq"], mask_dtype)}})
    x = x_of(3, 5, 16)
    keep = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 1, 1, 1]]).astype(mask_dtype)
    got = f["forward"](x, keep)
    want = attention_ref(x, w, 2, 1, 8, theta=100.0 if causal else None, causal=causal, keep=keep)
    np.testing.assert_allclose(got, want, **(ROPE if causal else TIGHT))
    if causal:   # left padding: the first two queries of row 2 see no key at all -> o_proj(0) = 0
        np.testing.assert_array_equal(got[2, :2], 0.0)


class PackedAttention(nn.Module):
    """Attention over the real tokens only: unpad, attend with ``token_indices``, pad back."""

    def __init__(self, **kwargs):
        self.attn = nn.Attention(**kwargs)

    def forward(self, x, attention_mask):
        tokens, idx = nn.op.unpad_input(x, attention_mask)
        out = self.attn(tokens, attention_mask=attention_mask, token_indices=idx)
        return nn.op.pad_input(out, idx, x.shape[0], x.shape[1])


@pytest.mark.parametrize("causal", [False, True])
def test_packed_tokens_attend_as_the_padded_batch(causal):
    """x packed to its real tokens (unpad_input) and attended with token_indices gives the padded
    reference at every token (GQA, biases, RoPE with causal), zeros at the padding; a sequence of padding
    only and a batch without padding included, on symbolic batch / seq."""
    m = PackedAttention(hidden_size=24, num_heads=6, num_kv_heads=2, bias=True, causal=causal,
                        rope_theta=100.0 if causal else None, dtype="float64")
    ref_w = random_weights(m.attn)
    f = m.jit(spec={"forward": {"x": spec.Tensor(["batch", "seq", 24], "float64"),
                                "attention_mask": spec.Tensor(["batch", "seq"], "int64")}})
    for keep in (np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 1, 1, 0]]),
                 np.ones((2, 3), np.int64)):
        x = x_of(*keep.shape, 24)
        got = f["forward"](x, keep.astype(np.int64))
        want = attention_ref(x, ref_w, 6, 2, 4, theta=100.0 if causal else None, causal=causal, keep=keep)
        real = keep.astype(bool)
        np.testing.assert_allclose(got[real], want[real], **(ROPE if causal else TIGHT))
        np.testing.assert_array_equal(got[~real], 0.0)


def test_packed_tokens_keep_the_projection_and_rope_options():
    """scale, qk_norm, rotary_dim and fused_qkv act on packed tokens as on the padded batch with its padding
    mask (that path is checked against numpy in tests/pipeline/test_attention_options.py); a window, a cap
    or a position bias is refused with token_indices."""
    opts = dict(hidden_size=24, num_heads=4, num_kv_heads=2, head_dim=6, causal=True, rope_theta=100.0,
                dtype="float64", scale=0.3, qk_norm=True, rotary_dim=4, fused_qkv=True, bias=True)
    m = PackedAttention(**opts)

    class Padded(nn.Module):
        def __init__(self):
            self.attn = nn.Attention(**opts)

        def forward(self, x, attention_mask):
            return self.attn(x, attention_mask=attention_mask)

    p = Padded()
    w = random_weights(m.attn)
    p.attn.load_state_dict(w)
    sp = {"forward": {"x": spec.Tensor(["batch", "seq", 24], "float64"),
                      "attention_mask": spec.Tensor(["batch", "seq"], "int64")}}
    f, g = m.jit(spec=sp), p.jit(spec=sp)
    keep = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    x = x_of(2, 5, 24)
    real = keep.astype(bool)
    np.testing.assert_allclose(f["forward"](x, keep)[real], g["forward"](x, keep)[real], **TIGHT)
    for bad in (dict(sliding_window=2), dict(logit_softcap=3.0)):
        b = PackedAttention(hidden_size=8, num_heads=2, causal=True, **bad)
        with pytest.raises(ValueError, match="does not go with sliding_window or logit_softcap"):
            b.export_tvm(spec={"forward": {"x": spec.Tensor([1, 3, 8], "float32"),
                                           "attention_mask": spec.Tensor([1, 3], "int64")}})


def test_packed_tokens_need_a_padding_mask_and_no_cache():
    class Bad(nn.Module):
        def __init__(self):
            self.attn = nn.Attention(8, 2)
            self.attn.layer_id = 0

        def no_mask(self, x, idx):
            return self.attn(x, token_indices=idx)

        def padded_x(self, x, idx, attention_mask):
            return self.attn(x, attention_mask=attention_mask, token_indices=idx)

        def with_cache(self, x, idx, attention_mask, cache, total_seq_len):
            return self.attn(x, attention_mask=attention_mask, token_indices=idx, cache=cache,
                             total_seq_len=total_seq_len)

    idx, mask = spec.Tensor(["n"], "int64"), spec.Tensor([2, 3], "int64")
    for method, args, match in [
        ("no_mask", {"x": spec.Tensor(["n", 8], "float32"), "idx": idx}, "needs the padding mask"),
        ("padded_x", {"x": spec.Tensor([2, 3, 8], "float32"), "idx": idx, "attention_mask": mask},
         "packed tokens"),
        ("with_cache", {"x": spec.Tensor(["n", 8], "float32"), "idx": idx, "attention_mask": mask,
                        "cache": spec.Object(), "total_seq_len": spec.Int()}, "does not go with a KV cache"),
    ]:
        with pytest.raises(ValueError, match=match):
            Bad().export_tvm(spec={method: args})


def test_float_additive_mask_broadcasts_to_batch_heads_query_key():
    attn = nn.Attention(12, 3, dtype="float64")
    w = random_weights(attn)
    f = attn.jit(spec={"forward": {"x": spec.Tensor([2, 4, 12], "float64"),
                                   "attention_mask": spec.Tensor([2, 1, 4, 4], "float64")}})
    x = x_of(2, 4, 12)
    additive = RNG.standard_normal((2, 1, 4, 4))
    additive[0, 0, 1, 2] = -np.inf
    np.testing.assert_allclose(f["forward"](x, additive), attention_ref(x, w, 3, 3, 4, additive=additive),
                               **TIGHT)


class CachedAttention(nn.Module):
    def __init__(self, causal=True):
        self.attn = nn.Attention(24, 4, num_kv_heads=2, head_dim=6, rope_theta=1000.0, causal=causal,
                                 dtype="float64")
        self.attn.layer_id = 0

    def step(self, x, cache, total_seq_len):
        return self.attn(x, cache=cache, total_seq_len=total_seq_len)

    def masked_step(self, x, attention_mask, cache, total_seq_len):
        return self.attn(x, attention_mask=attention_mask, cache=cache, total_seq_len=total_seq_len)


def test_cache_path_prefill_chunk_and_decode_equal_one_causal_pass():
    m = CachedAttention()
    w = {k.removeprefix("attn."): v for k, v in random_weights(m).items()}
    f = m.jit(spec={"step": {"x": spec.Tensor(["batch", "seq", 24], "float64"), "cache": spec.Object(),
                             "total_seq_len": spec.Int()},
                    "masked_step": {"x": spec.Tensor(["batch", "seq", 24], "float64"),
                                    "attention_mask": spec.Tensor(["batch", "total_seq_len"], "bool"),
                                    "cache": spec.Object(), "total_seq_len": spec.Int()}})
    x = x_of(2, 8, 24)
    want = attention_ref(x, w, 4, 2, 6, theta=1000.0, causal=True)
    cache = ContiguousKVCache()
    outs, total = [], 0
    for n in (5, 2, 1):   # prefill, a second prefill chunk on the filled cache, a decode step
        total += n
        outs.append(f["step"](x[:, total - n: total], cache, total))
    np.testing.assert_allclose(np.concatenate(outs, axis=1), want, **ROPE)
    assert cache.seq_len(0) == 8 and cache.layer_ids == [0]
    # a padding mask over every key held (batch, total_seq_len)
    keep = np.ones((2, 8), dtype=bool)
    keep[1, 1:3] = False
    want = attention_ref(x, w, 4, 2, 6, theta=1000.0, causal=True, keep=keep)
    cache = ContiguousKVCache()
    first = f["masked_step"](x[:, :6], keep[:, :6], cache, 6)
    second = f["masked_step"](x[:, 6:], keep, cache, 8)
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), want, **ROPE)
    with pytest.raises(ValueError, match="layer 0: the layer holds 8 tokens, 1 are appended, so it would hold 9, "
                                         "but total_seq_len is 8"):
        f["step"](x[:, :1], cache, 8)


def test_cache_path_without_causal_mask_attends_to_every_key_held():
    m = CachedAttention(causal=False)
    w = {k.removeprefix("attn."): v for k, v in random_weights(m).items()}
    f = m.jit(spec={"step": {"x": spec.Tensor([1, "seq", 24], "float64"), "cache": spec.Object(),
                             "total_seq_len": spec.Int()}})
    x = x_of(1, 5, 24)
    cache = ContiguousKVCache()
    f["step"](x[:, :3], cache, 3)
    last = f["step"](x[:, 3:], cache, 5)
    # the last two tokens see all 5 keys: the rows of a bidirectional pass over the 5 tokens
    np.testing.assert_allclose(last, attention_ref(x, w, 4, 2, 6, theta=1000.0)[:, 3:], **ROPE)


def test_export_text_of_the_cache_path():
    mod, params = CachedAttention().export_tvm(spec={"step": {
        "x": spec.Tensor(["batch", "seq", 24], "float64"), "cache": spec.Object(), "total_seq_len": spec.Int()}})
    text = mod.script()
    assert ('def step(x: R.Tensor(("batch", "seq", 24), dtype="float64"), cache: R.Object, '
            'total_seq_len: R.Shape(["total_seq_len_1"]), attn_q_proj_weight: ') in text
    assert ('R.call_pure_packed("vm.builtin.kv_cache_positions", cache, R.prim_value(batch), R.prim_value(seq), '
            'R.prim_value(total_seq_len_1), sinfo_args=(R.Tensor((batch, seq), dtype="int64"),))') in text
    # the keys are appended and read in place: the pools, block table and lengths come back (dims bound then,
    # declared at the top), no padded copy and no mask of its padding
    assert ('R.call_packed("vm.builtin.kv_cache_append", cache, R.prim_value(0), k_rope, reshape2, '
            'R.prim_value(total_seq_len_1), sinfo_args=R.Tuple(R.Tensor((num_blocks, block_size, 2, 6), '
            'dtype="float64"), R.Tensor((num_blocks, block_size, 2, 6), dtype="float64"), R.Tensor((batch, '
            'max_blocks), dtype="int32"), R.Tensor((batch,), dtype="int32")))') in text
    assert "        num_blocks = T.int64()\n" in text
    assert ('R.nn.paged_attention(q_rope, kv_cache_0, kv_cache_1, kv_cache_2, kv_cache_3, scale=None, '
            'causal_mask="BottomRight", window_size=None)') in text
    assert "kv_cache_update" not in text and "kv_cache_attention_mask" not in text
    assert parse(text).script() == text          # the printed module parses back
    assert [n for n, _ in params] == ["attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight",
                                      "attn.o_proj.weight"]


def test_errors_name_what_is_wrong():
    for kwargs, match in [
        (dict(hidden_size=0, num_heads=2), "hidden_size must be a positive int"),
        (dict(hidden_size=16, num_heads=4, num_kv_heads=3), r"num_heads \(4\) must be a multiple of num_kv_heads"),
        (dict(hidden_size=10, num_heads=4), "not divisible by num_heads"),
        (dict(hidden_size=16, num_heads=4, head_dim=5, rope_theta=10.0), "even head_dim"),
        (dict(hidden_size=16, num_heads=4, rope_theta=-1.0), "rope_theta must be a positive finite number"),
    ]:
        with pytest.raises(ValueError, match=match):
            nn.Attention(**kwargs)

    class Bad(nn.Module):
        def __init__(self):
            self.attn = nn.Attention(8, 2, causal=True)

        def no_layer_id(self, x, cache, total_seq_len):
            return self.attn(x, cache=cache, total_seq_len=total_seq_len)

        def cache_only(self, x, cache):
            return self.attn(x, cache=cache)

        def positions_without_rope(self, x, positions):
            return self.attn(x, positions=positions)

        def mask_3d(self, x, attention_mask):
            return self.attn(x, attention_mask=attention_mask)

        def wrong_hidden(self, x):
            return self.attn(x)

    x = spec.Tensor([1, 3, 8], "float32")
    for method, args, error, match in [
        ("no_layer_id", {"cache": spec.Object(), "total_seq_len": spec.Int()}, ValueError, "needs the layer's layer_id"),
        ("cache_only", {"cache": spec.Object()}, ValueError, "give cache and total_seq_len together"),
        ("positions_without_rope", {"positions": spec.Tensor([3], "int64")}, ValueError, "has no rope_theta"),
        ("mask_3d", {"attention_mask": spec.Tensor([1, 3, 3], "bool")}, ValueError, "padding mask"),
        ("wrong_hidden", {}, ValueError, "must be hidden_size 8"),
    ]:
        xs = spec.Tensor([1, 3, 6], "float32") if method == "wrong_hidden" else x
        with pytest.raises(error, match=match):
            Bad().export_tvm(spec={method: {"x": xs, **args}})


def test_op_errors():
    class M(nn.Module):
        def rope_float_positions(self, x, p):
            return nn.op.rotary_embedding(x, p, 10.0)

        def update_with_a_tensor_as_cache(self, x, total_seq_len):
            return nn.op.kv_cache_append(x, 0, x, x, total_seq_len)

        def update_negative_layer(self, x, cache, total_seq_len):
            return nn.op.kv_cache_append(cache, -1, x, x, total_seq_len)

    x = spec.Tensor([1, 3, 2, 4], "float32")
    with pytest.raises(TypeError, match="positions must be an integer tensor"):
        M().export_tvm(spec={"rope_float_positions": {"x": x, "p": spec.Tensor([3], "float32")}})
    with pytest.raises(TypeError, match="cache must be an nn.Object"):
        M().export_tvm(spec={"update_with_a_tensor_as_cache": {"x": x, "total_seq_len": spec.Int()}})
    with pytest.raises(ValueError, match="layer_id must be >= 0"):
        M().export_tvm(spec={"update_negative_layer": {"x": x, "cache": spec.Object(), "total_seq_len": spec.Int()}})


# ---------------------------------------------------------------------------------------------
# a 2-layer Llama with HF's weights (config: tests/data, /work/shared/reference/hf/llama_config.json)

HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, LAYERS, VOCAB, EPS, THETA = 256, 688, 8, 4, 32, 2, 1000, 1e-5, 10000.0


class LlamaMLP(nn.Module):
    def __init__(self):
        self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, x):
        return self.down_proj(nn.op.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self):
        self.self_attn = nn.Attention(HIDDEN, HEADS, KV_HEADS, HEAD_DIM, rope_theta=THETA, causal=True)
        self.mlp = LlamaMLP()
        self.input_layernorm = nn.RMSNorm(HIDDEN, -1, EPS, bias=False)
        self.post_attention_layernorm = nn.RMSNorm(HIDDEN, -1, EPS, bias=False)

    def forward(self, x, cache=None, total_seq_len=None):
        x = x + self.self_attn(self.input_layernorm(x), cache=cache, total_seq_len=total_seq_len)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self):
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(LAYERS)])
        self.norm = nn.RMSNorm(HIDDEN, -1, EPS, bias=False)


class LlamaForCausalLM(nn.Module):
    def __init__(self):
        self.model = LlamaModel()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        for i, layer in enumerate(self.model.layers):
            layer.self_attn.layer_id = i

    def forward(self, input_ids, cache=None, total_seq_len=None):
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, cache, total_seq_len)
        return self.lm_head(self.model.norm(x))

    def prefill(self, input_ids, cache, total_seq_len):
        return self.forward(input_ids, cache, total_seq_len)

    def decode(self, input_ids, cache, total_seq_len):
        return self.forward(input_ids, cache, total_seq_len)


LLAMA_SPEC = {
    "forward": {"input_ids": spec.Tensor(["batch", "seq"], "int64")},
    "prefill": {"input_ids": spec.Tensor(["batch", "seq"], "int64"), "cache": spec.Object(),
                "total_seq_len": spec.Int()},
    "decode": {"input_ids": spec.Tensor(["batch", 1], "int64"), "cache": spec.Object(), "total_seq_len": spec.Int()},
}


@pytest.fixture(scope="module")
def llama():
    model = LlamaForCausalLM()
    weights = load_file(DATA / "llama_causal_lm.safetensors")
    model.load_state_dict(weights)          # strict: HF's names are the module tree's
    mod, params = model.export_tvm(spec=LLAMA_SPEC)
    vm = VirtualMachine(build(mod))
    values = [p.data for _, p in params]

    def run(name):
        return lambda *args: vm[name](*args, *values)

    return mod, params, run


def test_llama_parameters_are_hf_names_and_prefill_takes_ids_cache_length(llama):
    mod, params, _ = llama
    assert {n for n, _ in params} == set(load_file(DATA / "llama_causal_lm.safetensors"))
    assert [n for n, _ in params][:3] == ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                                          "model.layers.0.self_attn.k_proj.weight"]
    text = mod.script()
    assert ('def prefill(input_ids: R.Tensor(("batch", "seq"), dtype="int64"), cache: R.Object, '
            'total_seq_len: R.Shape(["total_seq_len_1"]), model_embed_tokens_weight: ') in text
    assert ('def decode(input_ids: R.Tensor(("batch", 1), dtype="int64"), cache: R.Object, '
            'total_seq_len: R.Shape(["total_seq_len_1"]), model_embed_tokens_weight: ') in text


def test_llama_logits_match_hf(llama):
    _, _, run = llama
    ref = np.load(DATA / "llama_causal_lm.npz")
    logits = run("forward")(ref["input_ids"])
    assert logits.shape == (1, 16, VOCAB) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, ref["logits"], rtol=0, atol=1e-4)
    cached = run("prefill")(ref["input_ids"], ContiguousKVCache(), 16)   # the same through the cache path
    np.testing.assert_allclose(cached, ref["logits"], rtol=0, atol=1e-4)


def test_llama_greedy_generation_with_the_cache_matches_hf(llama):
    _, _, run = llama
    ref = np.load(DATA / "llama_generate.npz")
    caches = []

    def new_cache():
        caches.append(ContiguousKVCache())
        return caches[-1]

    ids, logits = greedy_generate(run("prefill"), run("decode"), ref["prompt_ids"], 24, new_cache=new_cache,
                                  return_logits=True)
    np.testing.assert_array_equal(ids, ref["generated_ids"])
    np.testing.assert_allclose(logits, ref["step_logits"], rtol=0, atol=1e-4)
    assert len(caches) == 1 and caches[0].seq_len(0) == 9 + 23 and caches[0].layer_ids == [0, 1]


def test_llama_two_chunk_prefill_equals_one_prefill(llama):
    _, _, run = llama
    prompt = np.load(DATA / "llama_generate.npz")["prompt_ids"]
    one = run("prefill")(prompt, ContiguousKVCache(), 9)
    cache = ContiguousKVCache()
    first = run("prefill")(prompt[:, :4], cache, 4)
    second = run("prefill")(prompt[:, 4:], cache, 9)
    np.testing.assert_allclose(second[:, -1], one[:, -1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), one, rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# greedy_generate on a numpy "model": the next token is (last token * 3 + position) % 11


def toy_model(calls):
    def step(ids, cache, total_seq_len):
        calls.append((ids.copy(), total_seq_len, cache))
        last = ids[:, -1]
        logits = np.zeros((ids.shape[0], ids.shape[1], 11), dtype=np.float32)
        logits[np.arange(ids.shape[0]), -1, (last * 3 + total_seq_len) % 11] = 1.0
        return logits

    return step


def test_greedy_generate_feeds_back_the_argmax_with_growing_lengths():
    calls = []
    step = toy_model(calls)
    prompt = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)
    ids, logits = greedy_generate(step, step, prompt, 4, new_cache=lambda: "the cache", return_logits=True)
    want, last = [], np.array([3, 6])
    for total in (3, 4, 5, 6):
        last = (last * 3 + total) % 11
        want.append(last)
    np.testing.assert_array_equal(ids, np.stack(want, axis=1))
    assert ids.dtype == np.int64 and logits.shape == (2, 4, 11) and logits.dtype == np.float32
    np.testing.assert_array_equal(logits.argmax(-1), ids)
    assert [c[1] for c in calls] == [3, 4, 5, 6] and all(c[2] == "the cache" for c in calls)
    assert calls[0][0].dtype == np.int64 and calls[0][0].shape == (2, 3)
    assert [c[0].shape for c in calls[1:]] == [(2, 1)] * 3
    np.testing.assert_array_equal(calls[2][0][:, 0], ids[:, 1])
    assert greedy_generate(step, step, prompt, 1).shape == (2, 1)


def test_greedy_generate_validates_its_arguments():
    step = toy_model([])
    prompt = np.array([[1, 2]], dtype=np.int64)
    for bad in (0, -1, MAX_NEW_TOKENS + 1, True, 2.0):
        with pytest.raises(ValueError, match="max_new_tokens must be an int"):
            greedy_generate(step, step, prompt, bad)
    with pytest.raises(ValueError, match="2-D"):
        greedy_generate(step, step, prompt[0], 2)
    with pytest.raises(ValueError, match="non-empty"):
        greedy_generate(step, step, prompt[:, :0], 2)
    with pytest.raises(TypeError, match="integer numpy array"):
        greedy_generate(step, step, prompt.astype("float32"), 2)
    with pytest.raises(TypeError, match="integer numpy array"):
        greedy_generate(step, step, [[1, 2]], 2)
    with pytest.raises(TypeError, match="decode must be callable"):
        greedy_generate(step, None, prompt, 2)
    with pytest.raises(ValueError, match=r"prefill returned logits of shape \(2, 2, 11\), expected \(1, 2 or 1"):
        greedy_generate(lambda i, c, n: np.zeros((2, 2, 11), "float32"), step, prompt, 2)
    with pytest.raises(ValueError, match="decode \\(step 1\\) returned 5 logits per token, the prefill returned 11"):
        greedy_generate(step, lambda i, c, n: np.zeros((1, 1, 5), "float32"), prompt, 3)
    with pytest.raises(ValueError, match="prefill returned NaN logits"):
        greedy_generate(lambda i, c, n: np.full((1, 2, 3), np.nan, "float32"), step, prompt, 2)
    with pytest.raises(ValueError, match="must return float logits"):
        greedy_generate(lambda i, c, n: np.zeros((1, 2, 3), "int64"), step, prompt, 2)


def test_rope_scaled_inv_freq_follows_the_formulas():
    """llama3 scaling against the formula in float64 (long wavelengths / factor, short ones kept, the rest
    interpolated), linear scaling, and the errors of bad scalings."""
    from builder.nn import op

    inv = (1.0 / 500.0 ** (np.arange(0, 64, 2) / 64)).astype(np.float32)
    sc = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
    got = op.rope_scaled_inv_freq(inv, sc)
    w = 2 * np.pi / inv.astype(np.float64)
    s = (64 / w - 1.0) / 3.0
    want = np.where(w > 64, inv / 8.0, np.where(w < 16, inv, (1 - s) * inv / 8.0 + s * inv))
    assert (w > 64).any() and (w < 16).any() and ((w >= 16) & (w <= 64)).any()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(op.rope_scaled_inv_freq(inv, {"rope_type": "linear", "factor": 4.0}), inv / 4, rtol=1e-7)
    for bad, msg in (({"rope_type": "yarn", "factor": 2.0}, "rope_type must be one of"),
                     ({"rope_type": "llama3", "factor": 2.0}, "needs"),
                     ({"rope_type": "linear", "factor": -1.0}, "positive finite"),
                     ({**sc, "high_freq_factor": 0.5}, "must exceed")):
        with pytest.raises(ValueError, match=msg):
            op.rope_scaled_inv_freq(inv, bad)
    with pytest.raises(ValueError, match="rope_scaling needs rope_theta"):
        nn.Attention(16, 2, rope_scaling={"rope_type": "linear", "factor": 2.0})

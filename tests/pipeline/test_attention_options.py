"""The options of the recipe ``Attention`` layer that HF families use (issue 42), each through a recipe on
symbolic (batch, seq), in float64 against a numpy reference written here (scaled dot-product attention,
Vaswani et al. 2017; HF transformers' conventions named per option), and over the KV cache: a prefill and
decode steps equal the whole forward, two prefill chunks equal one prefill.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import builder
from runtime import ContiguousKVCache

RNG = np.random.default_rng(4242)
HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 32, 4, 2, 8
TIGHT = dict(rtol=1e-9, atol=1e-10)
#: rotary cos / sin are float32 (HF's LlamaRotaryEmbedding), so RoPE results agree to a few float32 ulp
ROPE = dict(rtol=2e-6, atol=2e-6)


def _recipe(tmp_path, options: dict, call: str = "", inputs: str = "", overrides=(), weights=None,
            draw: bool = True) -> builder.CompiledModel:
    """A one-layer recipe ``attn`` (Attention with ``options``) with forward / prefill / decode, float64,
    weights drawn here (std 0.4, so the softmax is far from uniform); the model's parameters are set to them."""
    layer = dict(type="Attention", hidden_size=HIDDEN, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                 causal=True)
    layer.update(options)
    x = f"{{shape: [batch, seq, {HIDDEN}], dtype: \"${{dtype}}\"}}"
    text = f"""name: attnopt
vars: {{dtype: float64}}
model:
  layers:
    attn: {json.dumps(layer)}
functions:
  forward:
    inputs: {{x: {x}{inputs}}}
    forward: |
      return attn(x{call})
  prefill:
    inputs: {{x: {x}{inputs}, cache: {{type: kv_cache}}, total_seq_len: {{type: int}}}}
    forward: |
      return attn(x{call}, cache=cache, total_seq_len=total_seq_len)
dtype: ${{dtype}}
"""
    path = tmp_path / "attn.yaml"
    path.write_text(text)
    m = builder.build(path, list(overrides), weights=weights)
    for name, p in list(m.params.items()) if draw else ():
        m.params[name] = RNG.standard_normal(p.shape) * 0.4 + (1.0 if name.endswith("norm.weight") else 0.0)
    return m


def _rope(t, pos, theta, rotary_dim=None):
    """HF's apply_rotary_pos_emb (rotate_half) on the first ``rotary_dim`` dims of t (b, s, h, d), the rest
    passed through (GPT-NeoX's ``rotary_pct``); angles in float32 as HF's rotary embedding."""
    d = t.shape[-1] if rotary_dim is None else rotary_dim
    f32 = np.float32
    inv = f32(1) / f32(theta) ** (np.arange(0, d, 2).astype(f32) / f32(d))
    ang = np.asarray(pos).astype(f32)[:, None] * inv
    ang = np.concatenate([ang, ang], axis=-1)[None, :, None, :]
    r, rest = t[..., :d], t[..., d:]
    rot = np.concatenate([-r[..., d // 2:], r[..., : d // 2]], axis=-1)
    return np.concatenate([r * np.cos(ang).astype(t.dtype) + rot * np.sin(ang).astype(t.dtype), rest], axis=-1)


def reference(x, w, causal=True, scale=None, sliding_window=None, rope_theta=None, qk_norm=False,
              qk_norm_eps=1e-6, logit_softcap=None, rotary_dim=None, fused_qkv=False, position_bias=None, **_):
    """The layer in float64 numpy; ``w`` the model's parameters (``attn.`` names)."""
    b, s, _ = x.shape
    w = {k.removeprefix("attn."): v for k, v in w.items()}

    def linear(name, inp):
        y = inp @ w[f"{name}.weight"].T
        return y + w[f"{name}.bias"] if f"{name}.bias" in w else y

    if fused_qkv:   # Phi-3's qkv_proj: q rows, then k, then v
        qkv = linear("qkv_proj", x)
        q, k, v = np.split(qkv, [HEADS * HEAD_DIM, (HEADS + KV_HEADS) * HEAD_DIM], axis=-1)
    else:
        q, k, v = linear("q_proj", x), linear("k_proj", x), linear("v_proj", x)
    q, k, v = (q.reshape(b, s, HEADS, HEAD_DIM), k.reshape(b, s, KV_HEADS, HEAD_DIM),
               v.reshape(b, s, KV_HEADS, HEAD_DIM))
    if qk_norm:     # HF Qwen3: RMSNorm over head_dim per head, after the projection, before RoPE
        def rms(t, g):
            return t / np.sqrt(np.mean(t * t, axis=-1, keepdims=True) + qk_norm_eps) * g
        q, k = rms(q, w["q_norm.weight"]), rms(k, w["k_norm.weight"])
    if rope_theta is not None:
        q, k = _rope(q, np.arange(s), rope_theta, rotary_dim), _rope(k, np.arange(s), rope_theta, rotary_dim)
    k, v = np.repeat(k, HEADS // KV_HEADS, axis=2), np.repeat(v, HEADS // KV_HEADS, axis=2)
    sc = 1 / np.sqrt(HEAD_DIM) if scale is None else scale
    scores = np.einsum("bihd,bjhd->bhij", q, k) * sc
    if logit_softcap is not None:
        scores = logit_softcap * np.tanh(scores / logit_softcap)
    if position_bias is not None:
        scores = scores + position_bias
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    keep = j <= i if causal else np.ones((s, s), bool)
    if sliding_window is not None:   # HF masking_utils.sliding_window_overlay: kv_idx > q_idx - W
        keep &= j > i - sliding_window
    scores = np.where(keep, scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    out = np.einsum("bhij,bjhd->bihd", p, v).reshape(b, s, HEADS * HEAD_DIM)
    return linear("o_proj", out)


def check_forward_and_cache(m, options, tol, extra=()):
    """forward on two shapes against the reference; prefill 5 + prefill 2 + decode 1 equal the forward of 8
    tokens; a prefill in chunks of 3 + 5 equals one prefill of 8 (its last token's row)."""
    for shape in [(2, 8, HIDDEN), (1, 3, HIDDEN)]:
        x = RNG.standard_normal(shape)
        args = [a(shape[1]) for a in extra]
        np.testing.assert_allclose(m["forward"](x, *args), reference(x, m.params, **options,
                                                                     **_extra_ref(options, args)), **tol)
    x = RNG.standard_normal((2, 8, HIDDEN))
    full = m["forward"](x, *[a(8) for a in extra])
    cache, outs, total = ContiguousKVCache(), [], 0
    for n in (5, 2, 1):
        total += n
        outs.append(m["prefill"](x[:, total - n: total], *[_rows(a, total - n, total) for a in extra], cache, total))
    np.testing.assert_allclose(np.concatenate(outs, axis=1), full, **tol)
    cache = ContiguousKVCache()
    m["prefill"](x[:, :3], *[_rows(a, 0, 3) for a in extra], cache, 3)
    two = m["prefill"](x[:, 3:], *[_rows(a, 3, 8) for a in extra], cache, 8)
    np.testing.assert_allclose(two, full[:, 3:], **tol)


def _extra_ref(options, args):
    return {"position_bias": args[0]} if args else {}


def _rows(make, start, stop):
    """The call-time extra input of the new queries ``start..stop`` against every key held (``0..stop``)."""
    return make(stop)[..., start:stop, :stop]


# --- sliding_window --------------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [1, 3])
def test_sliding_window_sees_its_own_token_and_the_window_minus_one_before(tmp_path, window):
    options = dict(sliding_window=window, rope_theta=100.0)
    m = _recipe(tmp_path, options)
    check_forward_and_cache(m, options, ROPE)
    # the window restricts: without it the result differs (a window of 8 over 8 tokens does not)
    x = RNG.standard_normal((1, 8, HIDDEN))
    assert not np.allclose(reference(x, m.params, **options), reference(x, m.params, rope_theta=100.0))
    np.testing.assert_allclose(reference(x, m.params, sliding_window=8), reference(x, m.params), **TIGHT)


def test_sliding_window_needs_causal(tmp_path):
    with pytest.raises(Exception, match="sliding_window needs causal"):
        _recipe(tmp_path, dict(sliding_window=2, causal=False))


# --- scale -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.0, 0.37])
def test_scale_multiplies_the_scores(tmp_path, scale):
    options = dict(scale=scale, rope_theta=100.0)   # T5: 1.0; Gemma: query_pre_attn_scalar ** -0.5
    m = _recipe(tmp_path, options)
    check_forward_and_cache(m, options, ROPE)
    x = RNG.standard_normal((1, 4, HIDDEN))
    assert not np.allclose(reference(x, m.params, **options), reference(x, m.params, rope_theta=100.0))


def test_scale_must_be_positive(tmp_path):
    with pytest.raises(Exception, match="scale"):
        _recipe(tmp_path, dict(scale=0.0))


# --- logit_softcap ---------------------------------------------------------------------------------------


def test_logit_softcap_caps_the_scaled_scores_before_the_mask(tmp_path):
    options = dict(logit_softcap=0.8, rope_theta=100.0, sliding_window=4)   # Gemma 2's pair of options
    m = _recipe(tmp_path, options)
    check_forward_and_cache(m, options, ROPE)
    x = RNG.standard_normal((1, 6, HIDDEN))
    assert not np.allclose(reference(x, m.params, **options),
                           reference(x, m.params, rope_theta=100.0, sliding_window=4), atol=1e-3)


# --- qk_norm ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qk_norm", [True, "rms"])
def test_qk_norm_normalizes_each_head_before_rope(tmp_path, qk_norm):
    options = dict(qk_norm=qk_norm, qk_norm_eps=1e-3, rope_theta=100.0)
    m = _recipe(tmp_path, options)
    names = [n for n in m.params]
    assert names[-2:] == ["attn.q_norm.weight", "attn.k_norm.weight"]      # HF Qwen3's order and names
    assert m.params["attn.q_norm.weight"].shape == (HEAD_DIM,)
    check_forward_and_cache(m, dict(options, qk_norm=True), ROPE)
    x = RNG.standard_normal((1, 4, HIDDEN))
    assert not np.allclose(reference(x, m.params, qk_norm=True, rope_theta=100.0),
                           reference(x, m.params, rope_theta=100.0))


# --- rotary_dim ------------------------------------------------------------------------------------------


def test_rotary_dim_rotates_the_first_dims_of_each_head_only(tmp_path):
    options = dict(rotary_dim=4, rope_theta=50.0)   # GPT-NeoX rotary_pct / Phi-2 partial_rotary_factor: 4 of 8
    m = _recipe(tmp_path, options)
    check_forward_and_cache(m, options, ROPE)
    x = RNG.standard_normal((1, 5, HIDDEN))
    assert not np.allclose(reference(x, m.params, **options), reference(x, m.params, rope_theta=50.0))


@pytest.mark.parametrize("options", [dict(rotary_dim=3, rope_theta=10.0), dict(rotary_dim=10, rope_theta=10.0),
                                     dict(rotary_dim=4)])
def test_rotary_dim_must_be_even_within_the_head_with_rope(tmp_path, options):
    with pytest.raises(Exception, match="rotary_dim"):
        _recipe(tmp_path, options)


# --- fused_qkv -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [False, True])
def test_fused_qkv_is_one_linear_of_q_then_k_then_v_rows(tmp_path, bias):
    options = dict(fused_qkv=True, bias=bias, rope_theta=100.0)   # HF Phi-3's qkv_proj
    m = _recipe(tmp_path, options)
    shapes = {n: p.shape for n, p in m.params.items()}
    width = (HEADS + 2 * KV_HEADS) * HEAD_DIM
    assert shapes == {"attn.qkv_proj.weight": (width, HIDDEN), "attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
                      **({"attn.qkv_proj.bias": (width,), "attn.o_proj.bias": (HIDDEN,)} if bias else {})}
    check_forward_and_cache(m, options, ROPE)


def test_fused_qkv_refuses_tensor_parallel_shards(tmp_path):
    from builder import nn

    with pytest.raises(nn.tensor_parallel.ShardError, match="fused_qkv does not split across 2 workers") as info:
        nn.Attention(16, 4, fused_qkv=True, tensor_parallel_shards=2)
    assert info.value.field == "fused_qkv"
    assert nn.Attention(16, 4, fused_qkv=True, tensor_parallel_shards=2, tensor_parallel=False).fused_qkv


# --- position_bias ---------------------------------------------------------------------------------------


def _bias(total):
    """A deterministic additive bias (1, HEADS, total, total) (ALiBi-like slopes plus a ripple), so that the
    rows of a chunk are the rows of the whole."""
    i, j = np.arange(total)[:, None], np.arange(total)[None, :]
    slopes = (0.5 ** np.arange(1, HEADS + 1))[:, None, None]
    return (-slopes * np.abs(i - j) + 0.3 * np.sin(i + 2 * j))[None]


def test_position_bias_is_added_to_the_scaled_scores(tmp_path):
    options = dict(logit_softcap=2.0, sliding_window=5)
    bias_in = f", b: {{shape: [1, {HEADS}, seq, total_seq_len], dtype: float64}}"
    m = _recipe(tmp_path, options, call=", position_bias=b", inputs=bias_in)
    check_forward_and_cache(m, options, TIGHT, extra=(_bias,))
    x = RNG.standard_normal((1, 6, HIDDEN))
    assert not np.allclose(reference(x, m.params, position_bias=_bias(6), **options),
                           reference(x, m.params, **options))


# --- float32 kernels and q4f16_1 -------------------------------------------------------------------------


def _attention_kernels(m) -> set:
    return {k["kernel"] for n, k in m.exe.kernels.items() if "attention" in n}


@pytest.mark.parametrize("options", [
    dict(fused_qkv=True, bias=True, qk_norm=True, rotary_dim=4, rope_theta=100.0, scale=0.3),
    dict(sliding_window=3, logit_softcap=5.0, rope_theta=100.0)])
def test_float32_kernels_and_q4f16_1_keep_the_options(tmp_path, options):
    """In float32 the attention kernel takes scale / qk_norm / rotary_dim / fused_qkv (they are outside it), a
    sliding window and a cap (in the kernel); the q4f16_1 build of the same weights (its
    projections quantized Linears, fused qkv_proj included) stays near the float32 output, and its prefill +
    decode over the cache equal its forward."""
    from builder.codegen import Target
    from builder.codegen.kernels import SimdInfo

    f32 = _recipe(tmp_path, options, overrides=["dtype=float32"])
    for name, p in list(f32.params.items()):
        f32.params[name] = p.astype(np.float32)
    x = RNG.standard_normal((2, 7, HIDDEN))
    np.testing.assert_allclose(f32["forward"](x.astype(np.float32)), reference(x, f32.params, **options),
                               rtol=2e-4, atol=2e-4)
    host = Target.host()
    kinds = _attention_kernels(f32)
    if SimdInfo.from_target(host.triple, host.features).usable:
        assert kinds and all(k.startswith("attention/") for k in kinds), kinds
    path = tmp_path / "w.safetensors"
    f32.save_params(path)
    q4 = _recipe(tmp_path, options, overrides=["quantization=q4f16_1"], weights=path, draw=False)
    assert any(n.endswith("q_weight") for n in q4.params)
    assert ("attn.qkv_proj.q_weight" in q4.params) == bool(options.get("fused_qkv"))
    y = q4["forward"](x.astype(np.float16)).astype(np.float32)
    ref = reference(x, f32.params, **options)
    assert np.isfinite(y).all() and np.abs(y - ref).max() <= 0.25 * np.abs(ref).max()   # 4-bit weights
    cache = ContiguousKVCache()
    steps = [q4["prefill"](x[:, :5].astype(np.float16), cache, 5)] + [
        q4["prefill"](x[:, t:t + 1].astype(np.float16), cache, t + 1) for t in (5, 6)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1).astype(np.float32), y, atol=2e-2 * np.abs(y).max())

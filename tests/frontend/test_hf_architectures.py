"""Tiny random Hugging Face models of architectures the other tests do not cover, through
``torch.export`` and ``from_exported_program``, against PyTorch: each brings ops of its own (GPT-2's
Conv1D-as-addmm and tanh GELU, RoBERTa's ``gather`` of token types, T5's relative position buckets and
in-place ``add_``, wav2vec2's weight-normed grouped Conv1d, ViT / ConvNeXt / Swin / SegFormer's patch
convolutions, depthwise convolutions, window shifts and upsampling, Qwen2's GQA)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch (pip install torch)")
T = pytest.importorskip("transformers", reason="the HF model tests need transformers")

import runtime
from builder import compile as build
from builder.frontend import from_exported_program


def _text(vocab=100, lo=0):
    return lambda g: {"input_ids": torch.randint(lo, vocab, (2, 7), generator=g), "use_cache": False}


def _image(size=32):
    return lambda g: {"pixel_values": torch.randn(2, 3, size, size, generator=g)}


CASES = {
    "gpt2": (lambda: T.GPT2Model(T.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64)),
             _text()),
    "roberta": (lambda: T.RobertaModel(T.RobertaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                                       intermediate_size=64, vocab_size=100)),
                lambda g: {"input_ids": torch.randint(3, 100, (2, 7), generator=g)}),
    "t5": (lambda: T.T5EncoderModel(T.T5Config(num_layers=2, d_model=32, num_heads=4, d_kv=8, d_ff=64,
                                               vocab_size=100)),
           lambda g: {"input_ids": torch.randint(0, 100, (2, 7), generator=g)}),
    "wav2vec2": (lambda: T.Wav2Vec2Model(T.Wav2Vec2Config(
        num_hidden_layers=1, hidden_size=32, num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16),
        conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)),
        lambda g: {"input_values": torch.randn(2, 400, generator=g)}),
    "convnext": (lambda: T.ConvNextModel(T.ConvNextConfig(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1],
                                                          image_size=32)), _image()),
    "swin": (lambda: T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                              num_heads=[2, 2], window_size=4)), _image()),
    "segformer": (lambda: T.SegformerModel(T.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
        patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])), _image()),
    "qwen2": (lambda: T.Qwen2Model(T.Qwen2Config(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                                 num_key_value_heads=2, intermediate_size=64, vocab_size=100)),
              _text()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hf_architecture_matches_pytorch(name):
    make, inputs = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    kw = inputs(torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(**kw)
    want = out.last_hidden_state.numpy()
    mod = from_exported_program(torch.export.export(model, (), kw))
    got = runtime.VirtualMachine(build(mod))["main"](*[v.numpy() for v in kw.values() if hasattr(v, "numpy")])
    got = got[0] if isinstance(got, (tuple, list)) else got
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * max(1.0, float(np.abs(want).max())))

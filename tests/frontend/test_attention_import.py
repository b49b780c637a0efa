"""Attention written out by the models we import (HF eager attention exported to ONNX, HF GPT-2 / Llama
eager through ``torch.export``) runs as one attention kernel per layer (``RewriteAttention``): no softmax
or score kernels left, the values of onnxruntime / PyTorch."""
import numpy as np
import pytest

import runtime
from builder import compile as build

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def families(exe) -> dict:
    return {name: k["kernel"] for name, k in exe.kernels.items()}


def assert_attention_kernels(exe, layers: int) -> None:
    fam = families(exe)
    att = [n for n, k in fam.items() if k.startswith("attention/")]
    assert att and not any(n.startswith("softmax") for n in fam), fam
    # one attention kernel per layer (identical layers share a kernel: count the calls' names instead)
    assert len(att) <= layers, fam


@pytest.mark.filterwarnings("ignore")
def test_onnx_bert_eager_attention_is_one_kernel(tiny_bert_onnx, bert_feeds):
    """The tiny BERT (eager attention, a padding mask) exported to ONNX: an attention kernel, no softmax
    kernel; onnxruntime's hidden states."""
    import onnxruntime as ort

    from builder.frontend import from_onnx

    exe = build(from_onnx(str(tiny_bert_onnx)))
    assert_attention_kernels(exe, 2)
    vm = runtime.VirtualMachine(exe)
    got = vm["main"](*bert_feeds.values())
    want = ort.InferenceSession(str(tiny_bert_onnx)).run(None, bert_feeds)[0]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=2e-6)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_torch_export_eager_attention_is_one_kernel(arch):
    """HF GPT-2 (causal mask as an additive mask) and Llama (RoPE, GQA repeated to every head) with eager
    attention through ``torch.export``: an attention kernel, no softmax kernel; PyTorch's logits."""
    from builder.frontend import from_exported_program

    torch.manual_seed(1)
    if arch == "gpt2":
        cfg = transformers.GPT2Config(n_embd=64, n_head=4, n_layer=2, vocab_size=97, attn_implementation="eager")
        model = transformers.GPT2LMHeadModel(cfg).eval()
    else:
        cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                       intermediate_size=96, num_hidden_layers=2, vocab_size=97,
                                       attn_implementation="eager")
        model = transformers.LlamaForCausalLM(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).logits

    ids = torch.randint(0, 97, (2, 11))
    exe = build(from_exported_program(torch.export.export(Logits(), (ids,))))
    assert_attention_kernels(exe, 2)
    got = runtime.VirtualMachine(exe)["main"](ids.numpy())
    with torch.no_grad():
        want = Logits()(ids).numpy()
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore")
def test_onnx_bert_sdpa_attention_is_one_kernel(tiny_bert_onnx_of, bert_feeds):
    """The tiny BERT with PyTorch's ``scaled_dot_product_attention`` (HF's default) exported to ONNX, which
    writes it out (q and k scaled by ``sqrt(scale)`` each, ``where(isnan(p), 0, p)``): an attention kernel, no
    softmax and no transpose kernels; onnxruntime's hidden states."""
    import onnxruntime as ort

    from builder.frontend import from_onnx

    path = tiny_bert_onnx_of("sdpa")
    exe = build(from_onnx(str(path)))
    assert_attention_kernels(exe, 2)
    assert not any(n.startswith("transpose") for n in families(exe)), families(exe)
    got = runtime.VirtualMachine(exe)["main"](*bert_feeds.values())
    want = ort.InferenceSession(str(path)).run(None, bert_feeds)[0]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=2e-6)


@pytest.mark.filterwarnings("ignore")
def test_torch_default_onnx_export_with_dynamic_shapes(tmp_path):
    """A tiny HF Llama exported by torch's default ONNX exporter (``dynamo=True``, the torch.export-based one:
    its weights in an external data file beside the model, the attention mask gathered with GatherND over the
    symbolic batch and sequence) imports from its path; PyTorch's logits at two batch x sequence sizes, the
    first row left-padded (the logits of its padded positions are left out)."""
    pytest.importorskip("onnxscript", reason="torch's default ONNX exporter needs onnxscript")
    from builder.frontend import from_onnx

    torch.manual_seed(2)
    cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=96, num_hidden_layers=2, vocab_size=97)
    model = transformers.LlamaForCausalLM(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids, mask):
            return self.m(input_ids=ids, attention_mask=mask, use_cache=False).logits

    ids, mask = torch.randint(0, 97, (2, 7)), torch.ones(2, 7, dtype=torch.int64)
    batch, seq = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("seq", min=2, max=64)
    path = tmp_path / "llama.onnx"
    torch.onnx.export(Logits(), (ids, mask), str(path), dynamo=True, input_names=["ids", "mask"],
                      dynamic_shapes={"ids": {0: batch, 1: seq}, "mask": {0: batch, 1: seq}})
    main = runtime.VirtualMachine(build(from_onnx(path)))["main"]
    for b, s in ((2, 7), (3, 12)):
        ids = torch.randint(0, 97, (b, s))
        mask = torch.ones(b, s, dtype=torch.int64)
        mask[0, : s // 3] = 0        # left padding in the first row
        with torch.no_grad():
            want = Logits()(ids, mask).numpy()
        got = np.asarray(main(ids.numpy(), mask.numpy()))
        real = mask.numpy().astype(bool)     # (a padded query sees no key: its logits are no one's to compare)
        np.testing.assert_allclose(got[real], want[real], rtol=1e-4, atol=1e-4)

"""Fixtures the importer tests share."""
import contextlib
import io

import numpy as np
import pytest


@pytest.fixture(scope="session")
def tiny_bert_onnx_of(tmp_path_factory):
    """``make(attn_implementation)``: the path of a tiny random HF BERT (2 layers, hidden 64, 4 heads, with
    HF's ``"eager"`` or ``"sdpa"`` attention; ``input_ids``, ``attention_mask``, ``token_type_ids`` -> ``y`` the
    last hidden state, symbolic batch and sequence) exported by torch's TorchScript ONNX exporter at opset 17
    (which writes SDPA out as matmuls and a softmax), made once per attention implementation."""
    torch = pytest.importorskip("torch", reason="the model is exported from torch")
    transformers = pytest.importorskip("transformers", reason="the BERT comes from transformers")
    made = {}

    def make(attn_implementation: str = "eager"):
        if attn_implementation in made:
            return made[attn_implementation]
        torch.manual_seed(0)
        bert = transformers.BertModel(transformers.BertConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=100,
            attn_implementation=attn_implementation)).eval()

        class Wrap(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = bert

            def forward(self, ids, mask, types):
                return self.m(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state

        path = tmp_path_factory.mktemp("bert") / f"bert_{attn_implementation}.onnx"
        ids, mask = torch.randint(3, 100, (2, 7)), torch.ones(2, 7, dtype=torch.long)
        names = ["input_ids", "attention_mask", "token_type_ids"]
        with contextlib.redirect_stderr(io.StringIO()):
            torch.onnx.export(Wrap(), (ids, mask, torch.zeros_like(ids)), str(path), dynamo=False, opset_version=17,
                              input_names=names, output_names=["y"],
                              dynamic_axes={n: {0: "b", 1: "s"} for n in names})
        made[attn_implementation] = path
        return path

    return make


@pytest.fixture(scope="session")
def tiny_bert_onnx(tiny_bert_onnx_of):
    """The eager-attention :func:`tiny_bert_onnx_of` (onnxruntime's optimizer fuses this one fully:
    Attention, EmbedLayerNormalization)."""
    return tiny_bert_onnx_of("eager")


@pytest.fixture
def bert_feeds():
    """Token ids, a padding mask (the second sentence shorter) and token types for :func:`tiny_bert_onnx`."""
    rng = np.random.default_rng(4)
    ids = rng.integers(3, 100, (3, 9)).astype(np.int64)
    mask = np.ones((3, 9), np.int64)
    mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": (rng.random((3, 9)) > 0.5).astype(np.int64)}

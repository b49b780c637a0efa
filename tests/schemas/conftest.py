"""Shared recipe texts for the schemas tests."""

import pytest

LLAMA_MLP = """\
name: llama_mlp
description: LlamaMLP (gate/up/down projections, SiLU gate), as in the TVM Relax nn exporter examples
vars: {hidden_size: 4096, intermediate_size: 11008, dtype: float16}
model:
  layers:
    gate_proj: {type: Linear, in_features: ${hidden_size}, out_features: ${intermediate_size}, bias: false, dtype: ${dtype}}
    up_proj:   {type: Linear, in_features: ${hidden_size}, out_features: ${intermediate_size}, bias: false, dtype: ${dtype}}
    down_proj: {type: Linear, in_features: ${intermediate_size}, out_features: ${hidden_size}, bias: false, dtype: ${dtype}}
  forward: |
    gate = gate_proj(x)
    up = up_proj(x)
    return down_proj(silu(gate) * up)
functions:
  forward:
    x: {shape: [batch_size, ${hidden_size}], dtype: ${dtype}}
dtype: ${dtype}
quantization: none
weights:
  prefix: model.layers.0.mlp.
"""

# A minimal valid recipe in block style; tests append or edit lines of it.
MINIMAL = """\
name: tiny
model:
  layers:
    fc:
      type: Linear
      in_features: 4
      out_features: 2
  forward: fc(x)
functions:
  forward:
    x:
      shape: [batch_size, 4]
      dtype: float32
"""


@pytest.fixture
def llama_mlp_path(tmp_path):
    """The example recipe written to a file."""
    path = tmp_path / "llama_mlp.yaml"
    path.write_text(LLAMA_MLP)
    return path


@pytest.fixture
def llama_mlp_text():
    """The example recipe text (recipes/llama_mlp.yaml)."""
    return LLAMA_MLP


@pytest.fixture
def minimal_text():
    """A minimal valid recipe in block style."""
    return MINIMAL

"""from_exported_program (issue 16): HF BertModel (all-MiniLM-L6-v2, real weights) and a small HF
LlamaForCausalLM through torch.export with dynamic batch / sequence dims (torch.export.Dim), checked
against PyTorch; the imported matmuls reach the same linear kernels as recipes."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch (pip install torch)")
transformers = pytest.importorskip("transformers", reason="the HF model tests need transformers")

import runtime
from builder import compile as build
from builder.frontend import UnsupportedNodeError, from_exported_program
from builder.ir import relax as rx


@pytest.fixture(scope="module")
def minilm():
    from builder.text import minilm_assets

    try:
        folder = minilm_assets()
    except (ModuleNotFoundError, FileNotFoundError) as e:
        pytest.skip(f"all-MiniLM-L6-v2 files: {e}")
    model = transformers.BertModel.from_pretrained(str(folder)).eval()
    batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=512)
    ids = torch.randint(0, 1000, (2, 8))
    ones = torch.ones(2, 8, dtype=torch.int64)
    dyn = {0: batch, 1: seq}
    ep = torch.export.export(model, (ids,), {"attention_mask": ones, "token_type_ids": ones * 0},
                             dynamic_shapes={"input_ids": dyn, "attention_mask": dyn, "token_type_ids": dyn})
    mod = from_exported_program(ep)
    exe = build(mod)
    return model, mod, exe


def test_minilm_signature_weights_and_dims(minilm):
    _, mod, exe = minilm
    main = mod["main"]      # (not printed: the printer writes the 22M weights out)
    assert [(p.name_hint, [str(d) for d in p.struct_info.shape], p.struct_info.dtype) for p in main.params] == [
        (name, ["batch", "seq"], "int64") for name in ("input_ids", "attention_mask", "token_type_ids")]
    consts = {b.var.name_hint: b.value for blk in main.body.blocks for b in blk.bindings
              if isinstance(b.value, rx.Constant)}
    assert len(consts) == 104      # the 103 parameters (pooler included) + the position_ids buffer
    w = consts["encoder_layer_0_attention_self_query_weight"]
    assert w.data.shape == (384, 384) and w.dtype == "float32"
    assert consts["embeddings_position_ids"].dtype == "int64"
    assert exe.get_function_params("main") == ["input_ids", "attention_mask", "token_type_ids"]


def test_minilm_matches_pytorch_at_two_sizes(minilm):
    model, _, exe = minilm
    vm = runtime.VirtualMachine(exe)
    rng = np.random.default_rng(0)
    for batch, seq in ((2, 8), (3, 13)):
        ids = rng.integers(0, 30522, (batch, seq)).astype(np.int64)
        mask = np.ones((batch, seq), np.int64)
        mask[0, -3:] = 0
        types = np.zeros((batch, seq), np.int64)
        types[:, seq // 2:] = 1
        with torch.no_grad():
            want = model(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                         token_type_ids=torch.from_numpy(types))
        hidden, pooled = vm["main"](ids, mask, types)
        assert hidden.shape == (batch, seq, 384) and pooled.shape == (batch, 384)
        np.testing.assert_allclose(hidden, want.last_hidden_state.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(pooled, want.pooler_output.numpy(), rtol=1e-4, atol=1e-4)


def test_minilm_matmuls_compile_to_the_linear_kernels(minilm):
    _, _, exe = minilm
    matmuls = {name: k["kernel"] for name, k in exe.kernels.items() if "matmul" in name}
    # q / k / v / output (+ the residual add), intermediate (+ GELU), the pooler (+ tanh); the weights are
    # constants, tiled at build time (a kernel reading them in row tiles is named ``..._tiled``)
    names = {n.removesuffix("_tiled") for n in matmuls}
    assert {"fused_matmul_add", "fused_matmul_add_gelu", "fused_matmul_add_tanh"} <= names, matmuls
    assert any(kind.endswith("+tiles") for kind in matmuls.values()), matmuls
    assert all(kind.startswith("linear/") for kind in matmuls.values()), matmuls
    assert sum(1 for k in exe.kernels.values() if k["kernel"].startswith("linear/")) == len(matmuls)


@pytest.fixture(scope="module")
def llama():
    config = transformers.LlamaConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4,
                                      num_hidden_layers=2, vocab_size=1000, intermediate_size=512,
                                      max_position_embeddings=256, use_cache=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    dims = {0: torch.export.Dim("batch", min=1, max=16), 1: torch.export.Dim("seq", min=2, max=128)}
    ep = torch.export.export(model, (torch.randint(0, 1000, (2, 8)),), {"use_cache": False},
                             dynamic_shapes={"input_ids": dims, "use_cache": None})
    return model, build(from_exported_program(ep))


def test_llama_causal_lm_matches_pytorch_at_two_sizes(llama):
    model, exe = llama
    assert exe.get_function_params("main") == ["input_ids"]
    kinds = {name: k["kernel"] for name, k in exe.kernels.items() if "matmul" in name}
    assert "fused_matmul_silu_multiply" in {n.removesuffix("_tiled") for n in kinds}, kinds
    assert all(v.startswith("linear/") for v in kinds.values()), kinds
    vm = runtime.VirtualMachine(exe)
    rng = np.random.default_rng(1)
    for batch, seq in ((2, 8), (1, 17)):
        ids = rng.integers(0, 1000, (batch, seq)).astype(np.int64)
        with torch.no_grad():
            want = model(torch.from_numpy(ids), use_cache=False).logits.numpy()
        got = vm["main"](ids)
        assert got.shape == (batch, seq, 1000)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_an_unsupported_aten_op_names_the_node_and_the_source_line():
    """``linalg_inv`` has no translation; PyTorch's decomposition of it cannot be translated either: the error
    names the op as exported, its node and its source line."""
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.linalg.inv(x)

    ep = torch.export.export(M(), (torch.eye(3),))
    with pytest.raises(UnsupportedNodeError) as info:
        from_exported_program(ep)
    msg = str(info.value)
    assert "call_function aten.linalg_inv" in msg and "test_exported_program.py" in msg
    assert "return torch.linalg.inv(x)" in msg and msg.endswith("has no translation")


def test_small_program_with_symbolic_size_arithmetic():
    class M(torch.nn.Module):
        def forward(self, x):
            b, s, h = x.shape
            y = x.reshape(b * s, h).t().contiguous()
            z = torch.nn.functional.silu(y.view(h, b, s)).permute(1, 2, 0)
            return torch.cat([z, x], dim=-1)[:, -1:, :] / s

    dims = {0: torch.export.Dim("b"), 1: torch.export.Dim("s")}
    ep = torch.export.export(M(), (torch.randn(2, 3, 4),), dynamic_shapes={"x": dims})
    mod = from_exported_program(ep)
    assert 'def main(x: R.Tensor(("b", "s", 4), dtype="float32"))' in mod.script()
    vm = runtime.VirtualMachine(build(mod))
    for shape in ((2, 3, 4), (5, 7, 4)):
        x = torch.randn(*shape)
        np.testing.assert_allclose(vm["main"](x.numpy()), M()(x).numpy(), rtol=1e-5, atol=1e-6)

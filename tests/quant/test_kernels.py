"""Compiled quantized layers against numpy applied to the dequantized weights, and the shape of
the generated code: the dequantization is fused into the matmul / take kernels, so no PrimFunc has
a float buffer of the full weight shape."""
import numpy as np
import pytest

from builder.compile import compile as compile_module
from builder import nn
from builder.ir import relax as rx
from builder.ir import tir
from builder.quant import (
    GroupQuantization, PerChannelQuantization, QuantizedLinear, QuantizeMapping, dequantize_weight, quantize_mutator,
)
from runtime import VirtualMachine
from runtime.native import bfloat16_bits_to_float32, float32_to_bfloat16_bits


class Net(nn.Module):
    def __init__(self, k_in, n_out, bias, dtype, out_dtype=None):
        self.fc = nn.Linear(k_in, n_out, bias=bias, dtype=dtype, out_dtype=out_dtype)

    def forward(self, x):
        return self.fc(x)


def _buffers(func: tir.PrimFunc) -> list:
    found = list(func.params)

    def visit(s):
        block = getattr(s, "block", None)
        found.extend(getattr(block, "alloc_buffers", ()) if block is not None else ())
        found.extend(getattr(s, "alloc_buffers", ()))
        if isinstance(s, tir.Allocate):
            found.append(s.buffer)

    tir.walk_stmt(func.body, visit)
    return found


def assert_no_float_weight_buffer(exe, shape):
    for name, func in exe.legalized.functions.items():
        if isinstance(func, rx.Function):
            continue
        for buf in _buffers(func):
            dims = tuple(int(d) if hasattr(d, "value") or isinstance(d, int) else None for d in
                         (getattr(d, "value", d) for d in buf.shape))
            assert not (buf.dtype.startswith(("float", "bfloat")) and dims == tuple(shape)), (
                f"PrimFunc {name} has a float buffer {buf.name} of the full weight shape {shape}")


def run_quantized(spec, k_in, n_out, bias=False, dtype="float32", out_dtype=None, batch=3, seed=0):
    """Quantize a Linear, compile it, run it; returns (y, x, dequantized weight, bias, exe, params)."""
    rng = np.random.default_rng(seed)
    net = Net(k_in, n_out, bias, dtype, out_dtype)
    mapping = QuantizeMapping()
    net = quantize_mutator(spec, mapping).visit("", net)
    assert isinstance(net.fc, QuantizedLinear)
    irmod, params = net.export_tvm({"forward": {"x": nn.spec.Tensor(["n", k_in], dtype)}})
    exe = compile_module(irmod)
    w = rng.standard_normal((n_out, k_in)).astype(np.float32) * 0.1
    q_weight, q_scale = mapping.map_func["fc.weight"](w)
    values = {"fc.q_weight": q_weight, "fc.q_scale": q_scale}
    b = rng.standard_normal(n_out).astype(np.float32)
    bdtype = out_dtype or dtype
    values["fc.bias"] = float32_to_bfloat16_bits(b) if bdtype == "bfloat16" else b.astype(bdtype)
    x = rng.standard_normal((batch, k_in)).astype(np.float32)
    xin = float32_to_bfloat16_bits(x) if dtype == "bfloat16" else x.astype(dtype)
    y = VirtualMachine(exe)["forward"](xin, *[values[n] for n, _ in params])
    if y.dtype == np.uint16:
        y = bfloat16_bits_to_float32(y)
    wd = dequantize_weight(q_weight, q_scale, net.fc.layout).astype(np.float64)
    xd = bfloat16_bits_to_float32(xin) if dtype == "bfloat16" else xin.astype(np.float32)
    bd = bfloat16_bits_to_float32(values["fc.bias"]) if bdtype == "bfloat16" else values["fc.bias"]
    ref = xd.astype(np.float64) @ wd.T + (bd.astype(np.float64) if bias else 0.0)
    return y, ref, exe


@pytest.mark.parametrize("spec,k_in,n_out", [
    (GroupQuantization(bits=4, group_size=32, model_dtype="float32"), 64, 24),   # split reduction (words x 8)
    (GroupQuantization(bits=4, group_size=32, model_dtype="float32"), 36, 20),   # padded, single reduction loop
    (GroupQuantization(bits=8, group_size=16, model_dtype="float32"), 40, 17),   # 8-bit, padded 40 -> 48
    (GroupQuantization(bits=4, group_size=64, storage_dtype="uint16", model_dtype="float32"), 100, 9),
    (PerChannelQuantization(model_dtype="float32"), 37, 11),
])
def test_quantized_linear_matches_numpy_on_dequantized_weights(spec, k_in, n_out):
    y, ref, exe = run_quantized(spec, k_in, n_out, bias=True)
    assert y.dtype == np.float32 and y.shape == ref.shape
    # float32 accumulation of exactly dequantized weights: only float32 rounding remains
    assert np.abs(y - ref).max() <= 2e-6 * np.abs(ref).max()
    assert_no_float_weight_buffer(exe, (n_out, k_in))
    kernels = [n for n, f in exe.legalized.functions.items() if not isinstance(f, rx.Function)]
    assert not any(k == "dequantize" or k.startswith("transpose") for k in kernels), kernels


def test_legalization_fuses_the_dequantize_into_the_matmul():
    """Kernel selection and LegalizeOps alone (no FuseOps) compile
    ``matmul(x, permute_dims(group_dequantize(q, s)))`` into one ``matmul`` kernel whose
    reduction unpacks ``q`` (no dequantize / transpose kernel), marked for the quantized GEMV / GEMM."""
    from builder.transform import LegalizeOps, SelectKernels

    net = quantize_mutator(GroupQuantization(model_dtype="float32")).visit("", Net(64, 24, False, "float32"))
    irmod, _ = net.export_tvm({"forward": {"x": nn.spec.Tensor(["n", 64], "float32")}})
    legal = LegalizeOps()(SelectKernels()(irmod))
    kernels = {n: f for n, f in legal.functions.items() if not isinstance(f, rx.Function)}
    assert list(kernels) == ["matmul"]
    text = tir.script(kernels["matmul"])
    assert "T.reads(x[i0_1, k], fc_q_weight[i1_1, k // 8], fc_q_scale[i1_1, k // 32])" in text
    assert '"mb.kernel": {"x": 0, "out": 3, "weights": [{"q": 1, "scale": 2, "bits": 4' in text
    assert all(not (b.dtype == "float32" and [getattr(d, "value", d) for d in b.shape] == [24, 64])
               for b in _buffers(kernels["matmul"]))


@pytest.mark.parametrize("dtype,tol", [("float16", 2e-3), ("bfloat16", 1.6e-2)])
def test_16_bit_models_accumulate_in_float32(dtype, tol):
    spec = GroupQuantization(bits=4, group_size=32, model_dtype=dtype)
    y, ref, exe = run_quantized(spec, 96, 40, dtype=dtype, batch=5)
    # only the final rounding of each output to the 16-bit dtype (2^-11 / 2^-8 relative)
    assert np.abs(y - ref).max() <= tol * np.abs(ref).max()
    assert_no_float_weight_buffer(exe, (40, 96))


def test_out_dtype_keeps_the_bias_dtype():
    spec = GroupQuantization(bits=8, group_size=32, model_dtype="float16")
    y, ref, _ = run_quantized(spec, 64, 16, bias=True, dtype="float16", out_dtype="float32")
    assert y.dtype == np.float32
    # float32 sums; where the CPU has AVX2's integer multiply-adds the 8-bit tiles take float16 x in int16
    # per group (plan variant x16: at most 2**-16 of the group's largest |x| off per value)
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


class Lookup(nn.Module):
    def __init__(self):
        self.embed = nn.Embedding(30, 40, dtype="float32")
        self.raw = nn.Embedding(30, 40, dtype="float32")
        self.raw.no_quantization = True  # MLC's opt-out attribute: kept in float

    def forward(self, ids):
        return self.embed(ids)


def test_quantized_embedding_gathers_and_dequantizes_rows_in_one_kernel():
    spec = GroupQuantization(bits=4, group_size=16, model_dtype="float32")
    mapping = QuantizeMapping()
    net = quantize_mutator(spec, mapping).visit("", Lookup())
    irmod, params = net.export_tvm({"forward": {"ids": nn.spec.Tensor(["n", 2], "int32")}})
    text = irmod.script()
    assert "R.group_dequantize(embed_q_weight, embed_q_scale, bits=4, group_size=16, zero_point=7, in_features=40)" in text
    assert "R.take(dequantize" in text
    exe = compile_module(irmod)
    assert_no_float_weight_buffer(exe, (30, 40))
    w = np.random.default_rng(1).standard_normal((30, 40)).astype(np.float32)
    q_weight, q_scale = mapping.map_func["embed.weight"](w)
    ids = np.array([[0, 29], [7, 7], [3, 12]], np.int32)
    assert [n for n, _ in params] == ["embed.q_weight", "embed.q_scale", "raw.weight"]
    assert mapping.quantized == ["embed.weight"]
    values = {"embed.q_weight": q_weight, "embed.q_scale": q_scale, "raw.weight": w}
    vm = VirtualMachine(exe)
    y = vm["forward"](ids, *[values[n] for n, _ in params])
    wd = dequantize_weight(q_weight, q_scale, net.embed.layout)
    np.testing.assert_array_equal(y, wd[ids])
    # a token id outside the table is an error, as for the float Embedding (not a stray read)
    for bad in (30, -1):
        with pytest.raises(ValueError, match=r"dequantize_take: index out of range: expected 0 <= index < 30"):
            vm["forward"](np.array([[0, bad]], np.int32), *[values[n] for n, _ in params])


class Dequant(nn.Module):
    def __init__(self):
        self.q = nn.Parameter((6, 6), "uint32")
        self.s = nn.Parameter((6, 3), "float32")

    def forward(self, x):
        w = nn.op.group_dequantize(self.q, self.s, bits=4, group_size=16, zero_point=7, in_features=40)
        return nn.op.add(w, x)


def test_unfused_dequantize_is_a_kernel_of_its_own():
    irmod, _ = Dequant().export_tvm({"forward": {"x": nn.spec.Tensor([6, 40], "float32")}})
    exe = compile_module(irmod)
    assert "dequantize" in exe.legalized.functions
    rng = np.random.default_rng(2)
    q = rng.integers(0, 2 ** 32, (6, 6), dtype=np.uint64).astype(np.uint32)
    s = rng.random((6, 3)).astype(np.float32)
    x = np.zeros((6, 40), np.float32)
    y = VirtualMachine(exe)["forward"](x, q, s)
    from builder.quant import QuantFormat, QuantLayout
    layout = QuantLayout(40, QuantFormat(4, 16, "uint32", "float32", 7))
    np.testing.assert_array_equal(y, dequantize_weight(q, s, layout))


def test_graph_op_checks_the_layout():
    class Bad(nn.Module):
        def __init__(self):
            self.q = nn.Parameter((6, 4), "uint32")
            self.s = nn.Parameter((6, 3), "float32")

        def forward(self, x):
            return nn.op.group_dequantize(self.q, self.s, bits=4, group_size=16, zero_point=7, in_features=40)

    with pytest.raises(ValueError, match=r"q_weight \(6, 4\) has 4 words per row, but in_features=40 padded to "
                                         r"groups of 16 needs 6"):
        Bad().export_tvm({"forward": {"x": nn.spec.Tensor([1], "float32")}})


class TiledDequant(nn.Module):
    """``group_dequantize`` of row-tiled parameters, consumed by a gather and by an add (neither is
    the row-tiled matmul kernel: the generic loops read the tiles)."""

    def __init__(self, q_shape=(2, 6, 16), s_shape=(2, 3, 16)):
        self.q = nn.Parameter(q_shape, "uint32")
        self.s = nn.Parameter(s_shape, "float32")

    def forward(self, x, ids):
        w = nn.op.group_dequantize(self.q, self.s, bits=4, group_size=16, zero_point=7, in_features=40,
                                   activation_quantization="int8", row_tile=16)
        return nn.op.add(w, x), nn.op.take(w, ids, axis=0)


def test_row_tiled_dequantize_and_gather():
    """``row_tile=16``: the struct info has the rows of all tiles (2 x 16), printing and parsing
    keep the attribute, and the unfused dequantize and the quantized gather read word ``w`` of row
    ``n`` at ``[n // 16, w, n % 16]`` (numpy's dequantization of the row-major words as reference)."""
    from builder.ir.parser import parse
    from builder.quant import QuantFormat, QuantLayout
    from builder.quant.packing import tile_rows

    irmod, _ = TiledDequant().export_tvm({"forward": {"x": nn.spec.Tensor([32, 40], "float32"),
                                                      "ids": nn.spec.Tensor([3], "int32")}})
    text = irmod.script()
    assert 'in_features=40, activation_quantization="int8", row_tile=16)' in text
    assert 'R.Tensor((32, 40), dtype="float32") = R.group_dequantize' in text
    assert parse(text).script() == text
    exe = compile_module(irmod)
    rng = np.random.default_rng(5)
    q = rng.integers(0, 2 ** 32, (32, 6), dtype=np.uint64).astype(np.uint32)
    s = rng.random((32, 3)).astype(np.float32)
    want = dequantize_weight(q, s, QuantLayout(40, QuantFormat(4, 16, "uint32", "float32", 7)))
    ids = np.array([0, 17, 31], np.int32)
    y, rows = VirtualMachine(exe)["forward"](np.zeros((32, 40), np.float32), ids, tile_rows(q, 16), tile_rows(s, 16))
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(rows, want[ids])


@pytest.mark.parametrize("q_shape,s_shape,match", [
    ((32, 6), (32, 3), r"with row_tile=16 q_weight and q_scale must be 3-D tiles"),
    ((2, 6, 8), (2, 3, 8), r"must end in tiles of 16 rows"),
    ((2, 5, 16), (2, 3, 16), r"has 5 words per row, but in_features=40 padded to groups of 16 needs 6"),
    ((2, 6, 16), (3, 3, 16), r"have different numbers of rows"),
])
def test_row_tiled_layout_is_checked(q_shape, s_shape, match):
    with pytest.raises(ValueError, match=match):
        TiledDequant(q_shape, s_shape).export_tvm({"forward": {"x": nn.spec.Tensor([32, 40], "float32"),
                                                               "ids": nn.spec.Tensor([3], "int32")}})


def test_row_tile_must_be_a_known_size():
    class Bad(nn.Module):
        def __init__(self):
            self.q = nn.Parameter((4, 6, 8), "uint32")
            self.s = nn.Parameter((4, 3, 8), "float32")

        def forward(self, x):
            return nn.op.group_dequantize(self.q, self.s, bits=4, group_size=16, zero_point=7, in_features=40,
                                          row_tile=8)

    with pytest.raises(ValueError, match=r"row_tile must be one of \(0, 16\), got 8"):
        Bad().export_tvm({"forward": {"x": nn.spec.Tensor([1], "float32")}})


def test_kernel_spec_reads_group_weights_with_and_without_row_tile():
    """A printed ``mb.kernel`` group weight names ``row_tile``; one printed before it existed (no
    such field) reads as the row layout, and a misspelt field is still refused."""
    from builder.ir.kernel import GroupWeight, spec_from_attr

    base = {"x": 0, "out": 3, "acc": ["acc"], "kind": "linear"}
    w = {"q": 1, "scale": 2, "bits": 4, "group_size": 32, "zero_point": 7, "in_features": 64,
         "activation": "int8", "format": "group"}
    assert spec_from_attr({**base, "weights": [w]}).weights == (GroupWeight(1, 2, 4, 32, 7, 64, "int8", 0),)
    assert spec_from_attr({**base, "weights": [{**w, "row_tile": 16}]}).weights[0].row_tile == 16
    with pytest.raises(ValueError, match="takes the fields"):
        spec_from_attr({**base, "weights": [{**w, "row_tiles": 16}]})

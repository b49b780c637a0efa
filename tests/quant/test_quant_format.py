"""QuantFormat (builder/ir/quant_format.py), the one quantization contract: the op attributes it is
written to and read from (unknown ones refused, by name), the storage-bits table, the registered
formats the presets declare, GroupWeight carrying the attributes verbatim through kernel selection,
and the numpy float64 reference against numbers worked out by hand."""
import numpy as np
import pytest

import schemas
from builder import nn
from builder.ir.kernel import GroupWeight, spec_from_attr
from builder.ir.op.quantize import QUANT_STORAGE_BITS
from builder.ir.quant_format import (
    ATTR_NAMES, QUANT_FORMATS, STORAGE_BITS, QuantFormat, get_quant_format, register_quant_format,
    unregister_quant_format,
)
from builder.quant import PRESETS, QuantLayout, spec_format
from builder.quant.config import STORAGE_BITS as QUANT_BITS

_CODES = tuple(float(v) for v in np.linspace(-1.0, 1.0, 16))


@pytest.fixture
def codebook4():
    fmt = register_quant_format(QuantFormat(4, 8, "uint32", "float32", codebook=_CODES, name="lin4"))
    yield fmt
    unregister_quant_format("lin4")


def test_one_storage_bits_table():
    assert QUANT_STORAGE_BITS is STORAGE_BITS and QUANT_BITS is STORAGE_BITS
    assert schemas.STORAGE_BITS == STORAGE_BITS      # the schemas' copy, until it points here


@pytest.mark.parametrize("name", ["q4f16_1", "q4f32_1", "q4bf16_1", "q8f16_1", "q8f32_1", "q8f16_pc", "q8f32_pc"])
def test_presets_declare_the_registered_formats(name):
    """Each preset's spec gives the registered format, and a layout's attributes are the format's."""
    assert spec_format(PRESETS[name]) == QUANT_FORMATS[name]
    layout = QuantLayout.of(PRESETS[name], 96, 48)
    assert layout.format == QUANT_FORMATS[name].for_weight(96, 48)
    assert QuantLayout.of(name, 96, 48) == layout


@pytest.mark.parametrize("name", sorted(QUANT_FORMATS))
@pytest.mark.parametrize("k,rows", [(96, 48), (100, 16), (64, None), (40, 7)])
def test_attrs_round_trip(name, k, rows):
    """``from_attrs(to_attrs(f))`` is ``f`` for every built-in format of a weight, and the attributes
    come in the printed order with the defaults left out."""
    fmt = QUANT_FORMATS[name].for_weight(k, rows)
    attrs = fmt.to_attrs(k)
    assert list(attrs) == [a for a in ATTR_NAMES if a in attrs]
    assert QuantFormat.from_attrs(attrs, fmt.storage_dtype, fmt.scale_dtype) == fmt
    assert ("row_tile" in attrs) == (fmt.row_tile == 16)
    assert "activation_quantization" not in attrs


def test_per_channel_and_row_tiles_resolve_per_weight():
    pc = QUANT_FORMATS["q8f32_pc"]
    assert pc.group_size == 0 and pc.for_weight(40).group_size == 40
    assert pc.to_attrs(40) == {"bits": 8, "group_size": 40, "zero_point": 0, "in_features": 40}
    q4 = QUANT_FORMATS["q4f16_1"]
    assert q4.for_weight(64, 32).row_tile == 16 and q4.for_weight(64, 24).row_tile == 0
    assert q4.for_weight(64).row_tile == 0      # an Embedding's rows are never tiled
    assert q4.elements_per_word == 8 and q4.words(40) == 8 and q4.groups(40) == 2


def test_from_attrs_refuses_what_it_does_not_know():
    base = {"bits": 4, "group_size": 32, "zero_point": 7, "in_features": 64}
    with pytest.raises(ValueError, match=r"op: unknown quantization attribute\(s\) 'asymmetric', 'offset'"):
        QuantFormat.from_attrs({**base, "asymmetric": 1, "offset": 2}, "uint32", "float16", "op")
    with pytest.raises(ValueError, match=r"missing attribute 'zero_point'"):
        QuantFormat.from_attrs({k: v for k, v in base.items() if k != "zero_point"}, "uint32", "float16")
    with pytest.raises(ValueError, match=r"codebook 'nf3' is not a registered codebook format"):
        QuantFormat.from_attrs({**base, "zero_point": 0, "codebook": "nf3"}, "uint32", "float16")
    with pytest.raises(ValueError, match=r"codebook 'q4f16_1' is not a registered codebook format"):
        QuantFormat.from_attrs({**base, "zero_point": 0, "codebook": "q4f16_1"}, "uint32", "float16")
    with pytest.raises(ValueError, match=r"cannot store 3-bit values in uint32"):
        QuantFormat.from_attrs({**base, "bits": 3}, "uint32", "float16")
    with pytest.raises(TypeError, match=r"q_weight dtype must be one of"):
        QuantFormat.from_attrs(base, "int32", "float16")
    with pytest.raises(TypeError, match=r"q_scale must be floating point"):
        QuantFormat.from_attrs(base, "uint32", "int32")


def test_a_codebook_format_is_checked_and_named(codebook4):
    with pytest.raises(ValueError, match=r"a codebook must be a tuple of 16 finite floats"):
        QuantFormat(4, 8, codebook=_CODES[:8], name="short")
    with pytest.raises(ValueError, match=r"a codebook format has no zero point"):
        QuantFormat(4, 8, zero_point=7, codebook=_CODES, name="zp")
    with pytest.raises(ValueError, match=r"needs a name"):
        QuantFormat(4, 8, codebook=_CODES).to_attrs(16)
    with pytest.raises(ValueError, match=r"registered already"):
        register_quant_format(QuantFormat(4, 16, codebook=_CODES, name="lin4"))
    attrs = codebook4.to_attrs(24)
    assert attrs == {"bits": 4, "group_size": 8, "zero_point": 0, "in_features": 24, "codebook": "lin4"}
    assert QuantFormat.from_attrs(attrs, "uint32", "float32") == codebook4
    assert get_quant_format("lin4") is codebook4


def test_the_graph_op_refuses_an_unknown_attribute():
    from builder.nn.core import wrap_nested
    from builder.nn.op.common import op_call

    class Bad(nn.Module):
        def __init__(self):
            self.q = nn.Parameter((6, 5), "uint32")
            self.s = nn.Parameter((6, 5), "float32")

        def forward(self, x):
            return wrap_nested(op_call("group_dequantize", [self.q._expr, self.s._expr], bits=4, group_size=8,
                                       zero_point=7, in_features=40, asymmetric=1), "w")

    with pytest.raises(ValueError, match=r"R.group_dequantize: unknown quantization attribute\(s\) 'asymmetric'"):
        Bad().export_tvm({"forward": {"x": nn.spec.Tensor([1], "float32")}})


def test_dequantize_reference_by_hand():
    """4-bit values, two per uint8 word (the first in the low bits), zero point 7, groups of 2."""
    fmt = QuantFormat(4, 2, "uint8", "float32", 7)
    q = np.array([[0x21, 0xF0]], np.uint8)            # values 1, 2, 0, 15
    s = np.array([[0.5, 2.0]], np.float32)
    np.testing.assert_array_equal(fmt.dequantize_reference(q, s, 4), [[-3.0, -2.5, -14.0, 16.0]])
    np.testing.assert_array_equal(fmt.dequantize_reference(q, s, 3), [[-3.0, -2.5, -14.0]])   # padding dropped
    # bfloat16 scales as their bits (0x3F00 = 0.5, 0x4000 = 2.0); int8 per-channel values are signed
    bf = QuantFormat(4, 2, "uint8", "bfloat16", 7)
    np.testing.assert_array_equal(bf.dequantize_reference(q, np.array([[0x3F00, 0x4000]], np.uint16), 4),
                                  [[-3.0, -2.5, -14.0, 16.0]])
    pc = QuantFormat(8, 3, "int8", "float32", 0)
    np.testing.assert_array_equal(pc.dequantize_reference(np.array([[-2, 0, 5]], np.int8),
                                                          np.array([[0.25]], np.float32), 3), [[-0.5, 0.0, 1.25]])


def test_dequantize_reference_of_a_codebook_and_of_row_tiles(codebook4):
    words = np.zeros((32, 2), np.uint32)
    words[:, 0] = 0x76543210                           # values 0..7, then 15 x 8
    words[:, 1] = 0xFFFFFFFF
    s = np.full((32, 2), 2.0, np.float32)
    want = np.array(_CODES[:8] + (_CODES[15],) * 8, np.float32).astype(np.float64) * 2.0   # float32 entries
    got = codebook4.dequantize_reference(words, s, 16)
    np.testing.assert_array_equal(got, np.broadcast_to(want, (32, 16)))
    tiled = codebook4.for_weight(16, 32)
    assert tiled.row_tile == 16
    t = lambda a: np.ascontiguousarray(a.reshape(2, 16, -1).transpose(0, 2, 1))
    np.testing.assert_array_equal(tiled.dequantize_reference(t(words), t(s), 16), got)


def test_group_weight_carries_every_attribute(codebook4):
    """Kernel selection's weight keeps the op's attributes (a codebook too) and prints / parses them; a
    weight without extra attributes prints as it always has."""
    from builder.ir.tir.printer import _fmt_attr

    attrs = codebook4.for_weight(64, 32).to_attrs(64)
    w = GroupWeight.of_attrs(1, 2, attrs)
    assert w.extra_attrs == (("codebook", "lin4"),) and w.op_attrs == attrs
    assert w.quant_format("uint32", "float32") == codebook4.for_weight(64, 32)
    assert GroupWeight.of_format(1, 2, codebook4, 64).op_attrs == codebook4.to_attrs(64)
    base = {"x": 0, "out": 3, "acc": ["acc"], "kind": "linear"}
    printed = _fmt_attr(w)
    assert printed.endswith('"format": "group", "extra_attrs": [["codebook", "lin4"]]}')
    import ast
    parsed = ast.literal_eval(printed)
    assert spec_from_attr({**base, "weights": [parsed]}).weights == (w,)
    plain = GroupWeight(1, 2, 4, 32, 7, 64, "int8", 16)
    assert "extra_attrs" not in _fmt_attr(plain)
    assert plain.op_attrs == {"bits": 4, "group_size": 32, "zero_point": 7, "in_features": 64,
                              "activation_quantization": "int8", "row_tile": 16}


class _Lookup(nn.Module):
    """A quantized Embedding's gather and the unfused dequantize (an add consumes it) of one weight."""

    def __init__(self, fmt):
        from builder.quant import QuantizedEmbedding

        self.emb = QuantizedEmbedding(16, 64, fmt)

    def forward(self, ids, x):
        from builder.quant.modules import dequantize

        w = dequantize(self.emb.layout, self.emb.q_weight, self.emb.q_scale)
        return self.emb(ids), nn.op.add(w, x)


def test_a_codebook_gather_and_dequantize_run_on_its_values(codebook4):
    """The other two kernels of a quantized weight (``dequantize_take``, ``T_dequantize``) read the format
    from the op's attributes as well: the codebook's values, against the float64 reference."""
    from builder.compile import compile as compile_module
    from builder.quant import quantize_weight
    from runtime import VirtualMachine

    model = _Lookup(codebook4)
    irmod, _ = model.export_tvm({"forward": {"ids": nn.spec.Tensor([3], "int32"),
                                             "x": nn.spec.Tensor([16, 64], "float32")}})
    exe = compile_module(irmod)
    assert {"dequantize_take", "dequantize"} <= set(exe.legalized.functions)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 64)).astype(np.float32)
    q, s = quantize_weight(w, model.emb.layout)
    want = codebook4.for_weight(64).dequantize_reference(q, s, 64)
    assert np.abs(want - w).max() <= 0.5 * (2 / 15) * np.abs(w).max() * 1.001     # the nearest of 16 codes
    ids = np.array([0, 9, 15], np.int32)
    rows, full = VirtualMachine(exe)["forward"](ids, np.zeros((16, 64), np.float32), q, s)
    np.testing.assert_array_equal(rows, want[ids].astype(np.float32))
    np.testing.assert_array_equal(full, want.astype(np.float32))

"""Correctness of the row-tiled 4-bit (and 8-bit) weight kernels (never timed;
``builder/codegen/kernels/linear/tiles.py``): int8-activation and float kernels on AVX-512 and AVX2,
their prefetches, NaN, block sizes and zero points, and the fallback without AVX2; checked against
float64 references."""
from __future__ import annotations

import numpy as np
import pytest

from builder import te
from builder.codegen import Target, emit_llvm_ir
from builder.codegen.kernels import SimdInfo
from builder.codegen.kernels.linear import TUNING
from builder.ir.kernel import KERNEL_ATTR, GroupWeight
from builder.te import topi

from helpers.linear_kernels import epilogue as _epilogue
from helpers.linear_cases import HOST, HOST_SIMD
from helpers.linear_cases import as_f32 as _as_f32
from helpers.linear_cases import np_dtype as _np_dtype
from helpers.linear_cases import tol as _tol
from helpers.linear_cases import build_kernel as _build
from helpers.linear_cases import quant_case as _quant_case
from helpers.linear_cases import int8_activation_reference as _int8_activation_reference
from helpers.linear_cases import group_weights as _group_weights
from helpers.linear_cases import x86_target as _x86_target

pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/helpers/fixtures.py


def _tiled(a: np.ndarray) -> np.ndarray:
    from builder.quant.packing import tile_rows

    return tile_rows(a, 16)


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="the row-tiled int8 kernel needs AVX2")
@pytest.mark.parametrize("K,gs,sdt,xdt", [
    (4192, 32, "float16", "float32"),    # 131 groups: a 32-column float tail
    (640, 64, "float32", "float32"),
    (640, 128, "bfloat16", "bfloat16"),  # groups span two 64-column steps
    (200, 16, "float32", "float16"),     # 4 groups per step, 8-column tail
    (72, 8, "float32", "float32"),
    (96, 32, "float32", "float32"),      # one step, 32 float columns
    (1280, 256, "float16", "float32"),
])
@pytest.mark.parametrize("vnni", [False, True])
@pytest.mark.parametrize("bits", [4, 8])
def test_row_tiled_int8_kernel(K, gs, sdt, xdt, vnni, bits, monkeypatch, target=None, label=True):
    """``row_tile=16`` 4- and 8-bit weights with int8 activations run the row-tiled kernel at
    every batch size (blocks of 4 / 8 input rows and their remainders, three tiles): the same
    float64 emulation of the quantization as the row-major int8 kernels (a group of zeros
    included; every byte value 0-255 of the 8-bit words), and really the int8 path (about 0.5%
    from the float result). ``vnni``: ``vpdpbusd`` (emulated where the host lacks it; without
    it 8-bit weights take x's int8 values as int16 pairs and ``vpmaddwd``); ``target``: build for it instead of the
    host."""
    if vnni:
        monkeypatch.setenv("MB_SIMD_EMULATE", "vnni")
    lib = None
    N = 48
    for M in (1, 3, 8, 9, 17):
        f, odt, X, Q, S, _ = _quant_case(M, N, K, bits, gs, 2 ** (bits - 1) - 1, "uint32", sdt, xdt, seed=M + K,
                                         activation="int8", row_tile=16)
        if M >= 3:
            X[1, :gs] = 0
        if lib is None:
            kernel, lib = _build(f, target)
            if label:
                assert kernel == f"linear/{HOST_SIMD.name}" + ("+vnni" if vnni or HOST_SIMD.vnni else "") + "+tiles"
        y = np.empty((M, N), _np_dtype(odt))
        lib["f"](X, _tiled(Q), _tiled(S), y)
        xf = _as_f32(X, xdt)
        W = _group_weights(Q, S, "uint32", sdt, gs, K, bits)
        want = _int8_activation_reference(xf, W, gs)
        tol = _tol(odt) if odt != "float32" else 2e-5
        np.testing.assert_allclose(_as_f32(y, odt), want, rtol=tol, atol=tol * np.abs(want).max())
        exact = xf.astype(np.float64) @ W.T.astype(np.float64)
        rel = float(np.linalg.norm(_as_f32(y, odt) - exact) / np.linalg.norm(exact))
        if K >= 128:
            assert 1e-3 < rel < 2e-2, rel


@pytest.mark.skipif(not HOST_SIMD.int8_dot or "+fma" not in HOST.features, reason="needs AVX2")
@pytest.mark.parametrize("shape", ["avx2", "avx512"])
@pytest.mark.parametrize("vnni", [False, True])
@pytest.mark.parametrize("K,gs,sdt,xdt", [(640, 32, "float16", "float32"), (200, 16, "bfloat16", "bfloat16")])
@pytest.mark.parametrize("bits", [4, 8])
def test_row_tiled_int8_kernel_on_avx2(K, gs, sdt, xdt, vnni, shape, bits, monkeypatch):
    """The row-tiled kernel built for an AVX2 target without VNNI (4-bit weights: ``vpmaddubsw``
    pairs summed in int16 over 4 words, then ``vpmaddwd``; 8-bit ones: x's int8 values as int16
    pairs, two ``vpmaddwd`` per word; or ``vpdpbusd`` emulated): tiles as two vectors of 8 rows (``avx2``) or one
    16-lane vector split into 256-bit halves (``MB_SIMD_SHAPE=avx512``)."""
    if shape == "avx512":
        monkeypatch.setenv("MB_SIMD_SHAPE", "avx512")
    target = _x86_target("haswell", "+avx2,+fma,+f16c,+avx")
    simd = SimdInfo.from_target(target.triple, target.features)
    assert simd.int8_dot and not simd.vnni and not simd.int8_512
    test_row_tiled_int8_kernel(K, gs, sdt, xdt, vnni, bits, monkeypatch, target=target, label=False)


@pytest.mark.parametrize("K,gs,sdt,xdt", [
    (4192, 32, "float16", "float32"),
    (640, 128, "bfloat16", "bfloat16"),
    (200, 16, "float32", "float16"),
    (100, 32, "float32", "float32"),     # a partial last group (and word)
    (72, 8, "float16", "float32"),
])
@pytest.mark.parametrize("cap", [None, "no-permps", "avx2", "sse"])
@pytest.mark.parametrize("bits", [4, 8])
def test_row_tiled_float_kernel(K, gs, sdt, xdt, cap, bits, monkeypatch):
    """Row-tiled 4- and 8-bit weights with float activations: the float tiles up to
    ``tile_max_rows`` input rows (blocks and their remainders), the float GEMM on panels packed
    from the tiles above; exact float results against float64 (a partial last group included), on
    the host's vectors (on AVX-512 hosts with and without the ``vpermps`` decoding of 4-bit values,
    ``tile_permps``) and on 8 and 4 lanes (``MB_SIMD``; 2 and 4 vectors per tile). The zero point is
    the presets' ``max_int`` (7, 127)."""
    if bits == 8 and cap == "no-permps":
        pytest.skip("vpermps decodes 4-bit values only")
    monkeypatch.setitem(TUNING, "tile_x16", 0)   # the float tiles for float16 / bfloat16 x too (the x16 tests below)
    if cap == "no-permps":
        monkeypatch.setitem(TUNING, "tile_permps", 0)
    elif cap is not None:
        monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)
        monkeypatch.setenv("MB_SIMD", cap)
    host = Target.host()   # (the cap applies to the host's target: HOST was made under the run's own MB_SIMD)
    simd = SimdInfo.from_target(host.triple, host.features)
    lib = None
    N = 48
    for M in (1, 3, 5, 8, 9, 13, 16, 17, 40):
        f, odt, X, Q, S, ref = _quant_case(M, N, K, bits, gs, 2 ** (bits - 1) - 1, "uint32", sdt, xdt,
                                           seed=M + K, row_tile=16)
        if lib is None:
            kernel, lib = _build(f)
            assert kernel == (f"linear/{simd.name}+tiles" if simd.usable else kernel), kernel
        y = np.empty((M, N), _np_dtype(odt))
        lib["f"](X, _tiled(Q), _tiled(S), y)
        tol = _tol(odt, xdt)
        np.testing.assert_allclose(_as_f32(y, odt), ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_row_tiled_float_kernel_decodes_with_vpermps_on_avx512(own_features):
    """On an AVX-512 target (any host: only the IR is built) the float tiles decode each column
    with one ``vpermps`` of the 16-entry table ``q - zero_point``; on an AVX2 one with a mask and
    a conversion."""
    from builder.codegen import emit_llvm_ir

    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 only")
    f, *_ = _quant_case(2, 32, 256, 4, 32, 7, "uint32", "float16", "float32", row_tile=16)
    for cpu, feats, want in (("znver4", "+avx512f,+avx512bw,+avx512vl,+avx2,+fma,+f16c", True),
                             ("haswell", "+avx2,+fma,+f16c,+avx", False)):
        text, meta = emit_llvm_ir({"f": f}, _x86_target(cpu, feats))
        assert meta["f"]["kernel"].endswith("+tiles")
        assert ("llvm.x86.avx512.permvar.sf.512" in text) == want, cpu


def test_row_tiled_int8_kernel_prefetches_weights_and_scales(monkeypatch, own_features):
    """The int8 tiles prefetch each 64-byte word of the weights (``prefetch_q``) and, once per group,
    the scales' stream (``prefetch_scales``): built for a Zen 4 target, the tile helper holds one
    prefetch more with the scales' on."""
    from builder.codegen import emit_llvm_ir

    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 only")
    target = _x86_target("znver4", "+avx512f,+avx512bw,+avx512vl,+avx512vnni,+avx2,+fma,+f16c")
    counts = []
    for dist in (0, 2048):
        monkeypatch.setitem(TUNING, "prefetch_scales", dist)
        f, *_ = _quant_case(2, 32, 256, 4, 32, 7, "uint32", "float16", "float32", activation="int8", row_tile=16)
        text, meta = emit_llvm_ir({"f": f}, target)
        assert meta["f"]["kernel"] == "linear/avx512+vnni+tiles"
        helper = text[text.index('define internal void @"mb.tile.'):]
        helper = helper[:helper.index("\n}")]
        counts.append(helper.count('call void @"llvm.prefetch'))
    assert counts[0] == 4 and counts[1] == 5, counts   # 4 words of 64 bytes per group of 32 columns


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="the row-tiled int8 kernel needs AVX2")
def test_row_tiled_int8_kernel_nan_and_block_size(monkeypatch):
    """A NaN in a row of x makes that row's outputs NaN and leaves the other rows exact; blocks of
    3 input rows (``tile_rows_x_i8``), tiles as two 8-lane vectors (``tile_lanes_i8``) and x
    quantized by every thread however small (``xprep_min_values``) give the same outputs as the
    defaults."""
    libs, outs = [], []
    for tune in ({}, {"tile_rows_x_i8": 3}, {"tile_lanes_i8": 8}, {"xprep_min_values": 1, "parallel_min_macs": 0}):
        for key, value in tune.items():
            monkeypatch.setitem(TUNING, key, value)
        f, odt, X, Q, S, ref = _quant_case(7, 32, 256, 4, 32, 7, "uint32", "float32", "float32", seed=3,
                                           activation="int8", row_tile=16)
        libs.append(_build(f)[1])
        outs.append(np.empty((7, 32), np.float32))
        libs[-1]["f"](X, _tiled(Q), _tiled(S), outs[-1])
    y = outs[0]
    for other in outs[1:]:
        np.testing.assert_allclose(other, y, rtol=1e-6, atol=1e-6 * np.abs(y).max())
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())
    X[2, 100] = np.nan
    libs[0]["f"](X, _tiled(Q), _tiled(S), y)
    assert np.isnan(y[2]).all() and not np.isnan(np.delete(y, 2, axis=0)).any()


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="the row-tiled int8 kernel needs AVX2")
@pytest.mark.parametrize("zp", [0, 8])
def test_row_tiled_int8_kernel_zero_points(zp):
    """Other zero points than q4's 7: none (the integer sums start at 0) and 8 (ORT's MatMulNBits
    default); the float64 emulation of the quantization with ``(q - zero_point) * scale``."""
    for M in (1, 9):
        f, odt, X, Q, S, ref = _quant_case(M, 32, 320, 4, 32, zp, "uint32", "float32", "float32", seed=M,
                                           activation="int8", row_tile=16)
        kernel, lib = _build(f)
        assert kernel.endswith("+tiles")
        y = np.empty((M, 32), np.float32)
        lib["f"](X, _tiled(Q), _tiled(S), y)
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.skipif(not HOST_SIMD.usable, reason="needs the vector kernels")
def test_row_tiled_8_bit_int8_activations_need_groups_of_8():
    """8-bit row tiles with ``activation_quantization=int8`` and groups of 4 (x's quantization
    reads 8 values at a time) run the float tiles: float results, no ``vnni`` variant."""
    from builder.codegen.kernels.linear import int8_gemv_supported

    assert int8_gemv_supported("uint32", 8, 32, 256, row_tile=16)
    assert not int8_gemv_supported("uint32", 8, 4, 256, row_tile=16)
    assert not int8_gemv_supported("uint32", 8, 32, 256)          # row-major 8-bit: float activations
    f, odt, X, Q, S, _ = _quant_case(3, 32, 72, 8, 4, 127, "uint32", "float32", "float32", activation="int8",
                                     row_tile=16)
    kernel, lib = _build(f)
    assert kernel == f"linear/{HOST_SIMD.name}+tiles", kernel
    y = np.empty((3, 32), np.float32)
    lib["f"](X, _tiled(Q), _tiled(S), y)
    W = _group_weights(Q, S, "uint32", "float32", 4, 72, 8)
    ref = X.astype(np.float64) @ W.T.astype(np.float64)
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


def test_row_tiled_weights_of_one_kernel_share_the_zero_point():
    """Two row-tiled weights in one kernel (gate / up) share x's int32 table of ``-zero_point *
    sum q`` and one decoding: weights with different zero points or bits are left to the generic
    loops, with the reason."""
    from builder.codegen.kernels.linear import plan_linear

    x = te.placeholder((te.var("b"), 64), "float32", name="x")
    for (b0, z0), (b1, z1), ok in (((4, 7), (4, 7), True), ((4, 7), (4, 8), False), ((4, 7), (8, 7), False),
                                   ((8, 127), (8, 127), True)):
        ts = [te.placeholder(shape, dt, name=n) for n, shape, dt in (
            ("q0", (2, 64 * b0 // 32, 16), "uint32"), ("s0", (2, 2, 16), "float32"),
            ("q1", (2, 64 * b1 // 32, 16), "uint32"), ("s1", (2, 2, 16), "float32"))]
        spec = []
        out = topi.linear_kernel(x, *ts, weights=[GroupWeight(1, 2, b0, 32, z0, 64, "int8", 16),
                                                  GroupWeight(3, 4, b1, 32, z1, 64, "int8", 16)],
                                 epilogue=_epilogue(("multiply", ("linear", 0), ("linear", 1))), spec=spec)
        f = te.create_prim_func([x, *ts, out])
        f.attrs[KERNEL_ATTR] = spec[0]
        plan = plan_linear(f, SimdInfo("avx2", 8, 16, int8_dot=True))
        if ok:
            assert not isinstance(plan, str) and plan.variant == "tiles", plan
        else:
            assert plan == ("row-tiled weights with different bits, zero points, group sizes or activations in "
                            "one kernel")


@pytest.mark.parametrize("cap,kernel", [("avx", "linear/avx+tiles"), ("scalar", "loops (linear: no vector unit")])
def test_row_tiled_int8_weights_without_avx2(cap, kernel, monkeypatch):
    """Without AVX2 (``MB_SIMD=avx``) row-tiled weights with int8 activations run the float tiles
    (float activations, as every int8-activation weight there), without vectors the generic loops,
    which read the tiles too: exact float results, at batch sizes of both paths."""
    monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)
    monkeypatch.setenv("MB_SIMD", cap)
    lib = None
    for M in (3, 20):
        f, odt, X, Q, S, _ = _quant_case(M, 32, 100, 4, 32, 7, "uint32", "float16", "float32", seed=9 + M,
                                         activation="int8", row_tile=16)
        if lib is None:
            label, lib = _build(f)
            assert label.startswith(kernel), label
        y = np.empty((M, 32), np.float32)
        lib["f"](X, _tiled(Q), _tiled(S), y)
        W = _group_weights(Q, S, "uint32", "float16", 32, 100)
        exact = _as_f32(X, "float32").astype(np.float64) @ W.T.astype(np.float64)
        np.testing.assert_allclose(y, exact, rtol=2e-5, atol=2e-5 * np.abs(exact).max())


def test_row_tiles_pair_the_halves_of_a_tile_with_8_lanes(monkeypatch, own_features):
    """With 8 lanes (an AVX2 target: a Haswell, a Zen 3) the tile helpers of 1 and 2 input rows with int8
    activations (without VNNI) take both 8-row halves of a tile as 16-lane vectors (``tile_pair_rows_i8``),
    the others (3, 4 and the block of 8 rows) two calls of 8 rows; with float activations every helper
    does (``tile_pair_rows_f32`` = 4: blocks of 4 rows, helpers of 1-4); with AVX-VNNI, or the pairing
    off, none do (float blocks of 8 rows again). Where the host runs AVX2, paired and unpaired give the same outputs: bit for
    bit with int8 activations (the same integer sums and float operations per row), up to float32 rounding
    with float ones (``tile_chains_f32`` chains shared by two vectors), and both match the float64 reference."""
    import re

    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 only")
    avx2 = _x86_target("haswell", "+avx2,+fma,+f16c,+avx")
    vnni = _x86_target("alderlake", "+avx2,+fma,+f16c,+avx,+avxvnni")
    helper = re.compile(r'define internal void @"mb\.tile\.[^"]*\.v(\d+)\.t(\d+)[."]')

    def lanes(f, target) -> dict:
        text, meta = emit_llvm_ir({"f": f}, target)
        assert meta["f"]["kernel"].endswith("+tiles"), meta["f"]["kernel"]
        return {int(t): int(v) for v, t in helper.findall(text)}

    for act, want in (("int8", {1: 16, 2: 16, 3: 8, 4: 8, 8: 8}), ("none", {1: 16, 2: 16, 3: 16, 4: 16})):
        f, *_ = _quant_case(2, 32, 256, 4, 32, 8, "uint32", "float16", "float32", activation=act, row_tile=16)
        assert lanes(f, avx2) == want, act
        if act == "int8":
            assert set(lanes(f, vnni).values()) == {8}
    monkeypatch.setitem(TUNING, "tile_pair_rows_i8", 0)
    monkeypatch.setitem(TUNING, "tile_pair_rows_f32", 0)
    for act in ("int8", "none"):
        f, *_ = _quant_case(2, 32, 256, 4, 32, 8, "uint32", "float16", "float32", activation=act, row_tile=16)
        assert lanes(f, avx2) == {t: 8 for t in (1, 2, 3, 4, 8)}, act
    if not HOST_SIMD.int8_dot:
        return
    for bits, act in ((4, "int8"), (8, "int8"), (4, "none"), (8, "none")):
        outs = []
        for pair in (0, 2):
            monkeypatch.setitem(TUNING, "tile_pair_rows_i8", pair)
            monkeypatch.setitem(TUNING, "tile_pair_rows_f32", pair)
            lib = None
            for M in (1, 2, 3, 9):
                f, odt, X, Q, S, ref = _quant_case(M, 48, 4192, bits, 32, 2 ** (bits - 1), "uint32", "float16",
                                                   "float32", seed=M, activation=act, row_tile=16)
                if lib is None:
                    lib = _build(f, avx2)[1]
                y = np.empty((M, 48), np.float32)
                lib["f"](X, _tiled(Q), _tiled(S), y)
                tol = 2e-5 if act == "int8" else _tol("float16", "float32")
                np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * np.abs(ref).max(), err_msg=f"{bits} {act}")
                outs.append(y)
        for a, c in zip(outs[:4], outs[4:]):
            if act == "int8":
                np.testing.assert_array_equal(a, c)
            else:   # two FMA chains per group where there were four: the same products, summed in another order
                np.testing.assert_allclose(a, c, rtol=1e-6, atol=1e-6 * np.abs(c).max())


def test_row_tiles_read_two_tiles_in_lockstep_at_one_row(monkeypatch, own_features):
    """4-bit weights with int8 activations on an AVX2 target without VNNI (a Haswell, a Zen 3), where the
    helper of 1 input row takes a whole tile: that row reads ``tile_streams`` = 2 tiles per helper call
    (``.s2``), a last odd tile of a task by itself; not with 8-bit weights, AVX-VNNI or ``tile_streams`` 1.
    Where the host runs AVX2 the outputs are bit for bit those of one tile per call (the same integer sums
    and float operations per tile) for 5 tiles in one task and 13 split over tasks of 1 and 2, with a zero
    point (7, as :func:`_group_weights` takes), float16 scales and a float tail, and match the float64
    emulation of the int8 path."""
    import re

    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 only")
    avx2 = _x86_target("haswell", "+avx2,+fma,+f16c,+avx")
    vnni = _x86_target("alderlake", "+avx2,+fma,+f16c,+avx,+avxvnni")
    helper = re.compile(r'define internal void @"(mb\.tile\.[^"]*)"')

    def streams(bits: int, target) -> set:
        f, *_ = _quant_case(1, 32, 256, bits, 32, 8, "uint32", "float16", "float32", activation="int8",
                            row_tile=16)
        text, meta = emit_llvm_ir({"f": f}, target)
        assert meta["f"]["kernel"].endswith("+tiles"), meta["f"]["kernel"]
        return {k for k in helper.findall(text) if ".s2" in k}

    found = streams(4, avx2)
    assert found and all(".t1." in k for k in found), found
    assert not streams(8, avx2) and not streams(4, vnni)
    with monkeypatch.context() as m:
        m.setitem(TUNING, "tile_streams", 1)
        assert not streams(4, avx2)
    if not HOST_SIMD.int8_dot:
        return
    K, gs = 1056, 32                                      # a 32-column float tail
    for N, min_macs in ((80, None), (208, 0)):            # 5 tiles in one task; 13 in 8 tasks of 1-2
        if min_macs is not None:
            monkeypatch.setitem(TUNING, "parallel_min_macs", min_macs)
        outs = []
        for n in (1, 2):
            monkeypatch.setitem(TUNING, "tile_streams", n)
            f, odt, X, Q, S, _ = _quant_case(1, N, K, 4, gs, 7, "uint32", "float16", "float32", seed=N,
                                             activation="int8", row_tile=16)
            y = np.empty((1, N), np.float32)
            _build(f, avx2)[1]["f"](X, _tiled(Q), _tiled(S), y)
            W = _group_weights(Q, S, "uint32", "float16", gs, K, 4)
            want = _int8_activation_reference(_as_f32(X, "float32"), W, gs)
            np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5 * np.abs(want).max(), err_msg=f"N={N}")
            outs.append(y)
        np.testing.assert_array_equal(outs[0], outs[1], err_msg=f"N={N}")


def _x16_target(cap: str | None, monkeypatch):
    """The target of the int16-activation tests: the host's own (None), the host's features at 8 lanes
    (``avx2``: ``vpdpwssd`` on 256 bits where the host has VNNI), or a Haswell (``haswell``: AVX2 without
    VNNI, what a Zen 3 runs: ``vpmaddwd`` and an add)."""
    monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)
    if cap == "haswell":
        return _x86_target("haswell", "+avx2,+fma,+f16c,+avx")
    if cap is not None:
        monkeypatch.setenv("MB_SIMD", cap)
    return Target.host()


def _x16_check(y, X, Q, S, gs: int, K: int, xdt: str, exact_bound: float = 1e-4, bits: int = 4) -> None:
    """``y`` (float32) against the float64 emulation of x in int16 (:func:`_int8_activation_reference` with
    ``qmax = 32767``: the integer sums are exact, only the float epilogue rounds), and against the exact
    product: closer than float16's rounding of the inputs would allow (``exact_bound``), and not exact (the
    int16 path really ran) where 64 or more columns are int16."""
    xf = _as_f32(X, xdt)
    W = _group_weights(Q, S, "uint32", "float32", gs, K, bits)
    want = _int8_activation_reference(xf, W, gs, 32767)
    np.testing.assert_allclose(y, want, rtol=3e-6, atol=3e-6 * np.abs(want).max())
    exact = xf.astype(np.float64) @ W.T.astype(np.float64)
    rel = float(np.linalg.norm(y - exact) / np.linalg.norm(exact))
    assert rel < exact_bound, rel
    if (K // gs) * gs >= 64:
        assert rel > 1e-8, rel


@pytest.mark.skipif(not HOST_SIMD.int8_dot or "+fma" not in HOST.features, reason="needs AVX2")
@pytest.mark.parametrize("K,gs,xdt", [
    (320, 32, "float16"),
    (200, 16, "bfloat16"),     # 3 steps of 64, an 8-column float tail
    (100, 32, "float16"),      # one step, 36 float columns (a partial last group)
    (72, 8, "float16"),
    (640, 128, "bfloat16"),
    (1280, 256, "float16"),    # the largest group: int32 sums of 256 products
])
@pytest.mark.parametrize("cap", [None, "avx2", "haswell"])
@pytest.mark.parametrize("bits", [4, 8])
def test_row_tiled_x16_kernel(K, gs, xdt, cap, bits, monkeypatch):
    """4- and 8-bit row tiles with float16 / bfloat16 x take x in int16 per group (plan variant ``x16``) at
    every batch size (blocks of rows and their remainders, three tiles; no float GEMM above
    ``tile_max_rows``), on the host's vectors and on AVX2 with and without VNNI: the float64 emulation of
    that quantization to float32 rounding, within float16's input rounding of the exact product."""
    target = _x16_target(cap, monkeypatch)
    simd = SimdInfo.from_target(target.triple, target.features)
    lib = None
    for M in (1, 3, 5, 8, 9, 13, 16, 40, 67):
        f, odt, X, Q, S, _ = _quant_case(M, 48, K, bits, gs, 2 ** (bits - 1) - 1, "uint32", "float32", xdt,
                                         seed=M + K, row_tile=16)
        if lib is None:
            kernel, lib = _build(f, None if cap is None or cap == "avx2" else target)
            assert kernel == f"linear/{simd.name}+x16+tiles", kernel
        assert odt == "float32"
        y = np.empty((M, 48), np.float32)
        lib["f"](X, _tiled(Q), _tiled(S), y)
        _x16_check(y, X, Q, S, gs, K, xdt, bits=bits)


@pytest.mark.skipif(not HOST_SIMD.int8_dot or "+fma" not in HOST.features, reason="needs AVX2")
@pytest.mark.parametrize("cap", [None, "avx2", "haswell"])
@pytest.mark.parametrize("bits,zp", [(4, 0), (4, 7), (4, 15), (8, 0), (8, 128), (8, 255)])
def test_row_tiled_x16_kernel_extreme_values(cap, bits, zp, monkeypatch):
    """The int32 sums at their bounds: groups of 256 columns of x at ``+-max`` (``q = +-32767``) against
    weights all 15 (255), all 0 and alternating, with zero points 0, 7 and 15 (0, 128 and 255) -- exact
    against the float64 emulation (a group's sum up to ``256 * 255 * 32767``, just inside int32); a NaN in
    a row of x makes that row's outputs NaN and leaves the other rows as they were."""
    target = _x16_target(cap, monkeypatch)
    K, gs, N, M = 512, 256, 48, 6
    f, odt, X, Q, S, _ = _quant_case(M, N, K, bits, gs, zp, "uint32", "float32", "float16", row_tile=16)
    kernel, lib = _build(f, None if cap is None or cap == "avx2" else target)
    assert "+x16+tiles" in kernel, kernel
    Q[:16] = 0xFFFFFFFF                       # every value 15 (255)
    Q[16:32] = 0
    Q[32:] = 0xF0F0F0F0 if bits == 4 else 0xFF00FF00   # 0, 15, 0, 15, ... (0, 255, ...)
    X = np.empty((M, K), np.float16)
    X[0], X[1] = 1.0, -1.0                    # q = +-32767 everywhere
    X[2, :gs], X[2, gs:] = 60000.0, -60000.0  # the largest float16 magnitudes of one sign per group
    X[3] = np.where(np.arange(K) % 2, 2.0, -2.0)
    # the columns one int16 pair holds (p and p + 4; 8-bit: p and p + 2) of opposite sign
    X[4] = np.where(np.arange(K) % (16 // bits * 2) < 16 // bits, -0.5, 0.5)
    X[5] = 1.0
    X[5, 7] = 1e-4                            # a value far below the group's largest: rounds to 0
    y = np.empty((M, N), np.float32)
    lib["f"](X, _tiled(Q), _tiled(S), y)
    xf = X.astype(np.float32)
    top = 2 ** bits - 1
    vals = np.stack([(Q.astype(np.uint64) >> np.uint64(bits * j)) & np.uint64(top) for j in range(32 // bits)],
                    -1).reshape(N, -1)
    W = ((vals.astype(np.float64) - zp) * np.repeat(S.astype(np.float64), gs, axis=1))[:, :K]
    want = _int8_activation_reference(xf, W, gs, 32767)

    def close(rows):    # each row against its own magnitude (row 2 is 60000 times the others)
        for i in rows:
            np.testing.assert_allclose(y[i], want[i], rtol=2e-6, atol=2e-6 * np.abs(want[i]).max())

    close(range(M))
    X[3, 300] = np.nan
    lib["f"](X, _tiled(Q), _tiled(S), y)
    assert np.isnan(y[3]).all() and not np.isnan(np.delete(y, 3, axis=0)).any()
    close([i for i in range(M) if i != 3])


@pytest.mark.skipif(not HOST_SIMD.int8_dot or "+fma" not in HOST.features, reason="needs AVX2")
@pytest.mark.parametrize("cap", [None, "haswell", "haswell+vnni_emulated"])
@pytest.mark.parametrize("zp", [0, 128, 255])
def test_row_tiled_8_bit_int8_kernel_extreme_values(cap, zp, monkeypatch):
    """8-bit row tiles with int8 x at their bounds: groups of 256 columns of x at ``q = +-127`` against
    weights all 255, all 0 and alternating 0 / 255, zero points 0, 128 and 255, at 1, 2 and 6 input rows
    (the helpers of both halves and of one), exact against the float64 emulation -- on the host
    (``vpdpbusd`` where it has VNNI), on a Haswell (AVX2 without VNNI: x's int8 values stored as int16
    pairs, two ``vpmaddwd`` per word; ``vpmaddubsw`` would saturate at ``2 * 255 * 127``) and with
    ``vpdpbusd`` emulated there."""
    target = None
    if cap is not None:
        target = _x86_target("haswell", "+avx2,+fma,+f16c,+avx")
        if cap.endswith("vnni_emulated"):
            monkeypatch.setenv("MB_SIMD_EMULATE", "vnni")
    K, gs, N = 512, 256, 48
    X = np.empty((6, K), np.float32)
    X[0], X[1] = 1.0, -1.0                          # q = +-127 everywhere
    X[2] = np.where(np.arange(K) % 2, 3.0, -3.0)
    X[3] = np.where(np.arange(K) % 4 < 2, -0.5, 0.5)  # even and odd byte pairs of opposite sign
    X[4, :gs], X[4, gs:] = 1e30, -1e30
    X[5] = np.where(np.arange(K) % 3 == 0, 2.0, -1.0)
    lib = None
    for M in (1, 2, 6):
        f, odt, _, Q, S, _ = _quant_case(M, N, K, 8, gs, zp, "uint32", "float32", "float32",
                                         activation="int8", row_tile=16)
        if lib is None:
            kernel, lib = _build(f, target)
            assert kernel.endswith("+tiles"), kernel
        Q[:16] = 0xFFFFFFFF                             # every value 255
        Q[16:32] = 0
        Q[32:] = 0xFF00FF00                             # 0, 255, 0, 255, ...
        y = np.empty((M, N), np.float32)
        lib["f"](X[:M], _tiled(Q), _tiled(S), y)
        vals = np.stack([(Q.astype(np.uint64) >> np.uint64(8 * j)) & np.uint64(255) for j in range(4)], -1)
        W = ((vals.reshape(N, -1).astype(np.float64) - zp) * np.repeat(S.astype(np.float64), gs, axis=1))[:, :K]
        want = _int8_activation_reference(X[:M], W, gs)
        for i in range(M):      # each row against its own magnitude (row 4 is 1e30 times the others)
            np.testing.assert_allclose(y[i], want[i], rtol=2e-6, atol=2e-6 * np.abs(want[i]).max())


def test_row_tiled_x16_variant_needs_reduced_precision_x_and_integer_tiles(monkeypatch):
    """Who takes x in int16 (plan variant ``x16``): 4-bit row tiles with float16 / bfloat16 x on AVX2 / AVX-512
    with integer multiply-adds, 8-bit ones too; float32 x only at a ``matmul_precision`` below ``highest``;
    not int8-activation weights (those take int8), not 4-lane vectors or a CPU without AVX2's integer
    multiply-adds, not a zero point outside 0 .. 15 (0 .. 255 for 8-bit weights), not with ``tile_x16 = 0``."""
    from builder.codegen.kernels.linear import plan_linear

    def variant(xdt="float16", bits=4, act="none", simd=SimdInfo("avx2", 8, 16, int8_dot=True), gs=32, zp=None):
        zp = 2 ** (bits - 1) - 1 if zp is None else zp
        f, *_ = _quant_case(2, 32, 256, bits, gs, zp, "uint32", "float16", xdt, activation=act, row_tile=16)
        plan = plan_linear(f, simd)
        assert not isinstance(plan, str), plan
        return plan.variant

    avx512 = SimdInfo("avx512", 16, 32, int8_dot=True, int8_512=True)
    assert variant() == "x16+tiles"
    assert variant("bfloat16") == variant(simd=avx512) == "x16+tiles"
    assert variant("float32") == "tiles"
    assert variant("float32", simd=SimdInfo("avx2", 8, 16, int8_dot=True, matmul_precision="high")) == "x16+tiles"
    assert variant(bits=8) == variant("bfloat16", bits=8, simd=avx512) == "x16+tiles"
    assert variant(bits=8, zp=0) == variant(bits=8, zp=255) == "x16+tiles"
    assert variant(bits=8, zp=256) == variant(bits=8, zp=-1) == "tiles"
    assert variant("float32", bits=8) == "tiles"
    assert variant(act="int8") == "tiles"
    assert variant(act="int8", simd=SimdInfo("avx2", 8, 16, int8_dot=True, vnni=True)) == "vnni+tiles"
    assert variant(simd=SimdInfo("sse", 4, 16, int8_dot=True)) == "tiles"
    assert variant(simd=SimdInfo("avx", 8, 16)) == "tiles"
    assert variant(gs=24) == "tiles"                        # groups that do not tile x's 64-column steps
    assert variant(zp=0) == variant(zp=15) == "x16+tiles"
    assert variant(zp=16) == variant(zp=-1) == "tiles"      # past the int32 sums' bound
    monkeypatch.setitem(TUNING, "tile_x16", 0)
    assert variant() == "tiles"


@pytest.mark.skipif(not HOST_SIMD.int8_dot or "+fma" not in HOST.features, reason="needs AVX2")
def test_row_tiled_x16_kernel_float32_x_at_high_precision():
    """float32 x at ``matmul_precision=high`` (the recipe field) takes the int16 x too, and the kernel notes
    no fallback to float32 (it computes at the reduced precision asked); at ``highest`` the float tiles,
    exact to float32 rounding."""
    from builder.codegen import build

    for prec in ("high", "highest"):
        f, odt, X, Q, S, _ = _quant_case(5, 32, 320, 4, 32, 7, "uint32", "float32", "float32", seed=4, row_tile=16)
        kernel, lib = _build(f, Target.host(prec))
        assert ("+x16" in kernel) == (prec == "high"), kernel
        assert "notes" not in build({"f": f}, Target.host(prec)).functions["f"]
        y = np.empty((5, 32), np.float32)
        lib["f"](X, _tiled(Q), _tiled(S), y)
        if prec == "high":
            _x16_check(y, X, Q, S, 32, 320, "float32")
        else:
            W = _group_weights(Q, S, "uint32", "float32", 32, 320)
            exact = X.astype(np.float64) @ W.T.astype(np.float64)
            np.testing.assert_allclose(y, exact, rtol=2e-5, atol=2e-5 * np.abs(exact).max())


@pytest.mark.skipif(not HOST_SIMD.int8_dot or "+fma" not in HOST.features, reason="needs AVX2")
def test_row_tiled_x16_kernel_prepares_x_on_every_thread(monkeypatch):
    """x's int16 rows made by every thread, each its share of the rows (``xprep_min_values`` = 1), and the
    tiles split over threads however small (``parallel_min_macs`` = 0) give the outputs of one thread bit
    for bit: the same integer sums and float operations per output."""
    outs = []
    for tune in ({}, {"xprep_min_values": 1, "parallel_min_macs": 0}):
        for key, value in tune.items():
            monkeypatch.setitem(TUNING, key, value)
        f, odt, X, Q, S, _ = _quant_case(7, 64, 512, 4, 64, 7, "uint32", "float32", "float16", seed=5, row_tile=16)
        kernel, lib = _build(f)
        assert "+x16" in kernel, kernel
        outs.append(np.empty((7, 64), np.float32))
        lib["f"](X, _tiled(Q), _tiled(S), outs[-1])
    np.testing.assert_array_equal(outs[0], outs[1])
    _x16_check(outs[0], X, Q, S, 64, 512, "float16")


def test_row_tiled_x16_kernel_beside_the_amx_gemm(monkeypatch, own_features):
    """On an AMX target (IR only, any host; ``MB_SIMD_EMULATE=amx`` stands for the OS's grant) float32 x at
    ``matmul_precision=high`` with 4-bit tiles takes the int16 tiles below the AMX GEMM's rows and the AMX
    GEMM from ``amx3_min_rows``: one kernel holding both, no float GEMM's micro-kernels."""
    import re

    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 only")
    monkeypatch.setenv("MB_SIMD_EMULATE", "amx")
    f, *_ = _quant_case(2, 32, 256, 4, 32, 7, "uint32", "float32", "float32", row_tile=16)
    target = Target(HOST.triple, "sapphirerapids", "+avx512f,+avx512bw,+avx512vl,+avx512vnni,+avx512bf16,"
                    "+amx-tile,+amx-bf16,+avx2,+fma,+f16c", matmul_precision="high")
    text, meta = emit_llvm_ir({"f": f}, target)
    assert meta["f"]["kernel"] == "linear/avx512+x16+tiles+amx3", meta["f"]["kernel"]
    assert "notes" not in meta["f"]
    names = set(re.findall(r'define [^@]*@"([^"]+)"', text))
    assert any(".x16" in n for n in names) and "f.gemm_amx" in names, sorted(names)
    assert not any(n.startswith("mb.micro.") for n in names), sorted(names)   # the float GEMM's micro-kernels


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="the row-tiled int8 kernel needs AVX2")
def test_row_tiled_int8_kernel_takes_zero_points_its_int32_sums_hold():
    """The int8 tiles' sums of a group start at ``-zero_point * sum q`` in int32: a zero point past
    ``TILE_ZERO_POINT_BOUND`` in magnitude (any integer passes the recipe schema) runs the float tiles, exact,
    where the int8 kernel's sums would wrap; one at the bound takes the int8 path and matches its emulation."""
    from builder.codegen.kernels.linear import int8_gemv_supported
    from builder.codegen.kernels.linear.int8_rows import TILE_ZERO_POINT_BOUND

    assert int8_gemv_supported("uint32", 4, 32, 320, 16, -TILE_ZERO_POINT_BOUND)
    assert not int8_gemv_supported("uint32", 4, 32, 320, 16, TILE_ZERO_POINT_BOUND + 1)
    assert int8_gemv_supported("uint32", 4, 32, 320, 0, 10 ** 6)   # the row-major GEMV: the zero point in float
    for zp, int8 in ((TILE_ZERO_POINT_BOUND, True), (10 ** 6, False)):
        f, odt, X, Q, S, _ = _quant_case(3, 32, 320, 4, 32, zp, "uint32", "float32", "float32", seed=2,
                                         activation="int8", row_tile=16)
        X[0] = 1.0     # q = 127 everywhere: sum q = 32 * 127 per group (10**6 times it would wrap int32)
        kernel, lib = _build(f)
        assert kernel == f"linear/{HOST_SIMD.name}" + ("+vnni" if int8 and HOST_SIMD.vnni else "") + "+tiles", kernel
        y = np.empty((3, 32), np.float32)
        lib["f"](X, _tiled(Q), _tiled(S), y)
        W = ((np.stack([(Q.astype(np.uint64) >> np.uint64(4 * j)) & np.uint64(15) for j in range(8)], -1)
              .reshape(32, -1).astype(np.float64) - zp) * np.repeat(S.astype(np.float64), 32, axis=1))[:, :320]
        # int8 x: the emulation of its quantization; float x: the exact product of the dequantized weights
        ref = _int8_activation_reference(X, W.astype(np.float32), 32) if int8 else X.astype(np.float64) @ W.T
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())

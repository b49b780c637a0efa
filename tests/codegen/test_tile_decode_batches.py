"""The row-tiled kernels at every decode batch size 1-16 (issue 44: a decode step of B sequences is one
linear call of B rows), on the host's own vectors and on an explicit AVX2 target (``haswell``: 8 lanes, 16
registers, no VNNI; what a Zen 3 runs), with float and int8 activations, 4- and 8-bit weights: each row
count is one block or a sum of the helpers' row counts (float tiles with 8 lanes: blocks of 4 rows of
whole tiles, ``tile_pair_rows_f32``; int8: blocks of 8, helpers of 1-4 and 8), and every row of every
count must match numpy's float64 product of the dequantized weights (int8 activations: of x quantized as
the kernels do, :func:`helpers.linear_cases.int8_activation_reference`). One build per case; the rows of
each count are different random values, and row ``M - 1`` of a count is checked like row 0, so a
block or helper that dropped, repeated or misplaced a row fails."""
from __future__ import annotations

import numpy as np
import pytest

from builder.codegen import Target
from builder.codegen.kernels import SimdInfo
from builder.quant.packing import tile_rows

from helpers.linear_cases import HOST, build_kernel, int8_activation_reference
from helpers.linear_cases import quant_case, x86_target

pytestmark = pytest.mark.usefixtures("private_object_cache", "own_features")   # tests/helpers/fixtures.py

_AVX2 = ("haswell", "+avx2,+fma,+f16c,+avx")
N, K, GS = 48, 320, 32     # three tiles; K: five 64-column steps


def _targets():
    out = [pytest.param(None, id="host")]
    if HOST.triple.startswith("x86_64"):
        out.append(pytest.param(_AVX2, id="avx2"))
    return out


@pytest.mark.parametrize("target", _targets())
@pytest.mark.parametrize("act", ["none", "int8"])
@pytest.mark.parametrize("bits", [4, 8])
def test_every_decode_batch_size(target, act, bits):
    host_features = {f[1:] for f in HOST.features.split(",") if f.startswith("+")}
    if target is not None and not {"avx2", "fma", "f16c"} <= host_features:
        pytest.skip("this host cannot run AVX2 code")
    # the host's own target, made here: the own_features fixture has cleared the SIMD hooks HOST was made under
    tgt = x86_target(*target) if target else Target.host()
    simd = SimdInfo.from_target(tgt.triple, tgt.features)
    if not simd.usable:
        pytest.skip(f"no vector unit ({simd.name})")
    zp = 2 ** (bits - 1)
    f, _, _, Q, S, _ = quant_case(1, N, K, bits, GS, zp, "uint32", "float16", "float32", activation=act,
                                  row_tile=16)
    kernel, lib = build_kernel(f, tgt)
    assert kernel.endswith("+tiles"), kernel
    int8 = act == "int8" and simd.int8_dot
    assert ("+vnni" in kernel) == (int8 and simd.vnni), kernel
    # the dequantized weights as the kernels see them (zero point 2 ** (bits - 1): the q4 / q8 presets')
    vals = np.stack([(Q.astype(np.uint64) >> np.uint64(bits * j)) & np.uint64(2 ** bits - 1)
                     for j in range(32 // bits)], axis=-1).reshape(N, -1)
    W = ((vals.astype(np.float64) - zp) * np.repeat(S.astype(np.float64), GS, axis=1))[:, :K]
    Qt, St = tile_rows(Q, 16), tile_rows(S, 16)
    rng = np.random.default_rng(bits * 10 + (act == "int8"))
    for M in range(1, 17):
        X = rng.standard_normal((M, K)).astype(np.float32)
        X[M - 1] *= 4   # the last row of the count on another scale
        want = int8_activation_reference(X, W.astype(np.float32), GS) if int8 else X.astype(np.float64) @ W.T
        y = np.full((M, N), np.nan, np.float32)
        lib["f"](X, Qt, St, y)
        tol = 2e-5 if int8 else 1e-5
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol * np.abs(want).max(), err_msg=f"{kernel} M={M}")

"""The kernels' fallbacks in words: what a kernel computes differently from what the model asked is recorded in
its metadata (``"notes"``, :func:`builder.codegen.kernels.linear.plan._fallback_notes`) and ``build`` prints
it under the kernel report (:func:`builder.summary.kernel_notes`): ``matmul_precision=high`` / ``medium``
without AMX tiles (float32 products), int8 activations without AVX2's integer multiply-adds (float
activations). The results are those of the fallback: float32 within float32's error of float64."""
from __future__ import annotations

import numpy as np
import pytest

from builder.codegen import Target, build
from builder.codegen.kernels.linear.plan import NO_AMX, NO_INT8_DOT
from builder.summary import kernel_notes
from runtime import host as runtime_host

from helpers.linear_kernels import linear_func

pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/codegen/conftest.py

HOOKS = ("MB_SIMD_SHAPE", "MB_SIMD_EMULATE", "MB_SIMD", "MB_SIMD_OFF")


@pytest.fixture
def no_amx(monkeypatch):
    """A host whose OS grants no AMX tiles (whatever this one does), without the testing hooks."""
    for hook in HOOKS:
        monkeypatch.delenv(hook, raising=False)
    monkeypatch.setattr(runtime_host, "_AMX", False)


@pytest.mark.parametrize("precision", ["high", "medium"])
def test_precision_without_tiles_is_said_and_computes_float32(no_amx, precision):
    """A float32 linear at ``high`` / ``medium`` on a host without tiles: the kernel's notes say it computes
    in float32, and it does (within float32's error of float64, 100x tighter than bf16x3's); at
    ``highest`` nothing is noted."""
    N, K, M = 70, 100, 64
    f, _ = linear_func(K, N, "float32", "float32", ("linear", 0))
    lib = build({"f": f}, Target.host(matmul_precision=precision))
    assert "amx" not in lib.functions["f"]["kernel"]
    assert lib.functions["f"]["notes"] == [NO_AMX.format(precision=precision)]
    assert kernel_notes(lib.functions) == [f"note: {NO_AMX.format(precision=precision)} (1 kernel)"]
    assert "notes" not in build({"f": f}, Target.host()).functions["f"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((N, K), dtype=np.float32)
    y = np.full((M, N), np.nan, np.float32)
    lib.load()["f"](x, w, y)
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    assert np.abs(y - ref).max() / np.abs(ref).max() < 2e-7 * 10


def test_tiles_and_bfloat16_are_no_fallback(monkeypatch):
    """Where the tiles are taken (emulated here) nothing is noted, and bfloat16 x with bfloat16 weights
    (exact products at every precision) is no fallback of the precision either."""
    monkeypatch.setenv("MB_SIMD_SHAPE", "avx512")
    monkeypatch.setenv("MB_SIMD_EMULATE", "amx")
    f, _ = linear_func(100, 70, "float32", "float32", ("linear", 0))
    meta = build({"f": f}, Target.host(matmul_precision="high")).functions["f"]
    assert meta["kernel"].endswith("+amx3") and "notes" not in meta
    monkeypatch.delenv("MB_SIMD_EMULATE")
    monkeypatch.setattr(runtime_host, "_AMX", False)
    g, _ = linear_func(64, 70, "bfloat16", "bfloat16", ("linear", 0), out_dtype="float32")
    assert "notes" not in build({"g": g}, Target.host(matmul_precision="high")).functions["g"]


def test_kernel_notes_counts_and_ignores_malformed():
    """One line per distinct note with its count, in first-seen order; metadata without notes or with
    malformed ones adds nothing."""
    kernels = {"a": {"notes": ["x", "y"]}, "b": {"notes": ["x"]}, "c": {}, "d": {"notes": "x"},
               "e": {"notes": [3]}, "f": "junk"}
    assert kernel_notes(kernels) == ["note: x (2 kernels)", "note: y (1 kernel)"]


def test_build_prints_the_fallbacks(no_amx, monkeypatch, capsys):
    """``build``'s kernel report: ``matmul_precision=high`` on a host without tiles, and int8 activations
    where the CPU has no AVX2 (``MB_SIMD=avx``), each said in a ``note:`` line; the default build says
    nothing."""
    from builder.cli import main

    small = ["recipes/llama_mlp.yaml", "dtype=float32", "hidden_size=64", "intermediate_size=96", "--no-ir"]
    assert main(small + ["matmul_precision=high"]) == 0
    out = capsys.readouterr().out
    assert f"note: {NO_AMX.format(precision='high')} (2 kernels)" in " ".join(out.split())
    assert main(small) == 0
    assert "note:" not in capsys.readouterr().out
    monkeypatch.setenv("MB_SIMD", "avx")
    assert main(small + ["quantization=q4f32_1", "quantization.activation_quantization=int8"]) == 0
    assert f"note: {NO_INT8_DOT} (2 kernels)" in " ".join(capsys.readouterr().out.split())

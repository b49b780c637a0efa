"""The GEMM on AMX tiles (``builder.codegen.kernels.linear.amx``): bfloat16 products of bfloat16 models,
float32 matmuls at PyTorch's ``high`` (bf16x3) and ``medium`` precisions, against float64 numpy. Every
case runs on any host through ``MB_SIMD_EMULATE=amx`` (the micro-kernel as float32 loops over the same
tiles, with the 16-lane kernel shape); on a host whose OS grants the tiles the native kernels run too."""
from __future__ import annotations

import numpy as np
import pytest

from builder.codegen import Target, build, emit_llvm_ir
from builder.codegen.kernels import SimdInfo
from builder.codegen.kernels.linear import TUNING
from runtime import Executable, VirtualMachine, threadpool
from runtime import host as runtime_host
from runtime.native import bfloat16_bits_to_float32, float32_to_bfloat16_bits

from helpers.linear_kernels import check_gated as _check_gated
from helpers.linear_kernels import linear_func as _linear_func
from helpers.linear_kernels import transposed_bias_func

HOST = Target.host()
NATIVE = runtime_host.amx_permitted()

pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/codegen/conftest.py


@pytest.fixture(params=["emulated"] + (["native"] if NATIVE else []))
def amx(request, monkeypatch):
    """The kernels' AMX: ``emulated`` (any host: generic IR, no tile instruction, so the executable asks
    for no tile state) or ``native`` (a host whose OS grants the tiles)."""
    if request.param == "emulated":
        monkeypatch.setenv("MB_SIMD_SHAPE", "avx512")
        monkeypatch.setenv("MB_SIMD_EMULATE", "amx,avx512bf16")   # (bfloat16 GEMVs on hosts without it)
        return request.param
    for hook in ("MB_SIMD_SHAPE", "MB_SIMD_EMULATE", "MB_SIMD", "MB_SIMD_OFF"):   # the host's own tiles
        monkeypatch.delenv(hook, raising=False)
    return request.param


def _lib(f, precision: str):
    lib = build({"f": f}, Target.host(matmul_precision=precision))
    return lib.functions["f"]["kernel"], lib.target.get("amx", False), lib.load()


def _rel_err(y, ref) -> float:
    return float(np.abs(y - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("threads", [1, 2])
def test_float32_high_and_medium_precision(amx, threads, monkeypatch):
    """float32 x and weights: ``high`` (bf16x3) within 2e-5 of float64 relative to the largest output
    (float32's own GEMM is within about 1e-6), ``medium`` (bfloat16 operands) within 2e-2 and at least 30
    times less accurate than ``high``; rows that are not multiples of the 32 of a micro-kernel call, a
    partial panel (N = 70), K = 100 (three blocks of 32 columns and a partial tile);
    ``highest`` keeps the float32 kernels, and so does ``high`` below ``amx3_min_rows`` (64) rows, where
    its larger packing costs more than the tiles save."""
    monkeypatch.setitem(TUNING, "amx_b_bytes", 1)   # blocks of 32 columns
    N, K = 70, 100
    f, _ = _linear_func(K, N, "float32", "float32", ("linear", 0))
    libs = {p: _lib(f, p) for p in ("highest", "high", "medium")}
    tiles = amx == "native"   # the executable records (and its loader asks for) the tiles it runs
    assert libs["high"][0] == "linear/avx512+amx3" and libs["high"][1] is tiles
    assert libs["medium"][0] == "linear/avx512+amx" and libs["medium"][1] is tiles
    assert "amx" not in libs["highest"][0] and libs["highest"][1] is False
    old = threadpool.set_num_threads(threads)
    try:
        for M in (17, 33, 57, 64, 95):
            rng = np.random.default_rng(M)
            x = rng.standard_normal((M, K), dtype=np.float32)
            w = rng.standard_normal((N, K), dtype=np.float32)
            ref = x.astype(np.float64) @ w.T.astype(np.float64)
            errs = {}
            for p, (_, _, lib) in libs.items():
                y = np.full((M, N), np.nan, np.float32)
                lib["f"](x, w, y)
                errs[p] = _rel_err(y, ref)
            assert errs["highest"] < 2e-6
            assert errs["high"] < (2e-5 if M >= TUNING["amx3_min_rows"] else 2e-6)
            assert errs["medium"] < 2e-2
            assert errs["high"] * 30 < errs["medium"]
    finally:
        threadpool.set_num_threads(old)


def test_gated_epilogue_two_weights_and_row_chunks(amx, monkeypatch):
    """Two weights (SwiGLU's gate and up), a bias and a residual in the epilogue, at ``high``; and x
    larger than ``gemm_chunk_bytes``, which splits the rows into chunks (multiples of 32 rows, the
    last one shorter) that each run through every panel."""
    monkeypatch.setitem(TUNING, "gemm_chunk_bytes", 64000)
    epi = ("add", ("multiply", ("silu", ("add", ("linear", 0), ("tensor", 2))), ("linear", 1)), ("tensor", 3))
    N, K = 70, 100
    f, _ = _linear_func(K, N, "float32", "float32", epi, nweights=2,
                        extra=[("bias", (N,), "float32"), ("resid", ("lead", N), "float32")])
    kernel, _, lib = _lib(f, "high")
    assert kernel.endswith("+amx3")
    for M in (1, 40, 70, 300, 311):   # 1: the GEMV, 40: the float GEMM; 300 / 311: two chunks
        _check_gated(lib, M, N, K, of_max=2e-5)


@pytest.mark.parametrize("K", [131, 64, 130, 200])
@pytest.mark.parametrize("threads", [1, 2])
def test_bfloat16_model_runs_on_tiles_at_every_precision(amx, K, threads):
    """bfloat16 x and weights take the tiles at ``highest`` too (products of two bfloat16 are exact
    in float32): within float32 summation error of the float64 product of the same bfloat16 values,
    the GEMV's rows (8) and the tiles' (16, 33, 64) alike. Odd K (a column past the last pair) goes
    through the float32 panels; even K reads the weights' 32-bit words and x's rows as they are (64:
    whole tiles; 130: a partial last tile; 200: a block of 192 columns and one of 8)."""
    N = 70
    f, _ = _linear_func(K, N, "bfloat16", "bfloat16", ("linear", 0), out_dtype="float32")
    kernel, _, lib = _lib(f, "highest")
    assert kernel.endswith("+amx")
    if K % 2 == 0 and SimdInfo.from_target(HOST.triple, HOST.features).native("avx512bf16") and \
            SimdInfo.from_target(HOST.triple, HOST.features).avx512bf16:
        # the rows below the tiles keep the vdpbf16ps GEMV of the variant the tiles were added to
        assert "dpbf16ps" in emit_llvm_ir({"f": f}, Target.host())[0]
    rng = np.random.default_rng(3)
    old = threadpool.set_num_threads(threads)
    try:
        for M in (8, 16, 33, 64):
            x = float32_to_bfloat16_bits(rng.standard_normal((M, K), dtype=np.float32))
            w = float32_to_bfloat16_bits(rng.standard_normal((N, K), dtype=np.float32))
            ref = bfloat16_bits_to_float32(x).astype(np.float64) @ bfloat16_bits_to_float32(w).T.astype(np.float64)
            y = np.full((M, N), np.nan, np.float32)
            lib["f"](x, w, y)
            assert _rel_err(y, ref) < 2e-6
    finally:
        threadpool.set_num_threads(old)


def test_recipe_quantized_and_tiled_weights_at_high_precision(amx):
    """A whole recipe (LlamaMLP, SwiGLU) at ``matmul_precision=high``: row-tiled float32 weights and
    4-bit group-quantized ones (decoded into the panels) run on the tiles above the GEMV's rows, and
    the outputs match the ``highest`` build within bf16x3's error; the saved executable records the
    tiles and loads back to the same results."""
    from builder import build as build_recipe

    for quant in ("none", "q4f32_1"):
        over = ["hidden_size=64", "intermediate_size=96", "dtype=float32", f"quantization={quant}"]
        ref_model = build_recipe("recipes/llama_mlp.yaml", over)
        model = build_recipe("recipes/llama_mlp.yaml", over + ["matmul_precision=high"])
        kernels = {meta["kernel"] for meta in model.exe.kernels.values()}
        assert any(k.endswith("+amx3") for k in kernels), kernels
        x = np.random.default_rng(0).standard_normal((80, 64), dtype=np.float32)
        ref = ref_model(x)
        y = model(x)
        assert _rel_err(y, ref) < 5e-5
        # saved and loaded, the executable says whether it runs tiles and computes the same
        exe = Executable.load(model.exe.save())
        assert exe.target.get("amx", False) is (amx == "native") and exe.target["matmul_precision"] == "high"
        args = [x] + [model.params[n] for n in model.param_names]
        np.testing.assert_array_equal(VirtualMachine(exe)["forward"](*args), y)


def test_precision_is_validated_and_recorded():
    """An unknown precision is a ValueError (a recipe error at the recipe level); the target's
    dict records the precision; an executable whose kernels use the tiles does not load where the
    OS does not grant them."""
    import schemas

    with pytest.raises(ValueError, match="matmul_precision must be one of"):
        Target.host(matmul_precision="low")
    assert Target.host("high").to_dict()["matmul_precision"] == "high"
    with pytest.raises(schemas.RecipeError, match="matmul_precision"):
        schemas.load_recipe("recipes/llama_mlp.yaml", ["matmul_precision=low"])
    info = SimdInfo.from_target(HOST.triple, HOST.features, "medium")
    assert info.matmul_precision == "medium"


def test_executable_with_tiles_refused_without_the_os_grant(monkeypatch):
    """``check_target`` of an executable whose kernels run tiles: refused (ValueError naming AMX) where
    the OS did not grant the tile state, accepted where it did."""
    from runtime.host import check_target

    target = {**HOST.to_dict(), "amx": True}
    monkeypatch.setattr(runtime_host, "_AMX", False)
    with pytest.raises(ValueError, match="AMX tiles"):
        check_target(target)
    monkeypatch.setattr(runtime_host, "_AMX", True)
    check_target(target)


def test_transposed_store_on_tiles(amx):
    """A transposed output (``permute_dims(x @ W.T + b)``, out (N, M), folded into the kernel's store)
    at ``high`` and ``medium``: each 16-row tile's epilogue stores runs of rows; M up to 200 with
    partial last tiles, N = 70 (a partial panel); the rows below ``amx3_min_rows`` on the float32 kernels."""
    N, K = 70, 100
    f = transposed_bias_func(K, N)
    for precision, tol in (("high", 2e-5), ("medium", 2e-2)):
        kernel, _, lib = _lib(f, precision)
        assert "+amx" in kernel, kernel
        for M in (17, 64, 95, 200):
            rng = np.random.default_rng(M)
            xa = rng.standard_normal((M, K), dtype=np.float32)
            wa = rng.standard_normal((N, K), dtype=np.float32)
            ba = rng.standard_normal(N, dtype=np.float32)
            y = np.full((N, M), np.nan, np.float32)
            lib["f"](xa, wa, ba, y)
            ref = (xa.astype(np.float64) @ wa.T.astype(np.float64) + ba).T
            assert _rel_err(y, ref) < tol, (precision, M)


#: What a Sapphire Rapids Xeon reports (the features the AMX kernels look for), for compiling the native tile
#: code on any x86-64 host; LLVM fills in the rest from ``cpu="sapphirerapids"``.
_SPR_FEATURES = ",".join("+" + f for f in (
    "sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd", "avx512bf16",
    "avx512vnni", "avxvnni", "amx-tile", "amx-bf16", "amx-int8"))


def test_native_tile_code_is_emitted_anywhere_and_runs_where_granted(monkeypatch):
    """The native AMX kernel for a Sapphire Rapids target, on any x86-64 host: the plan takes the tiles
    (``+amx3`` at ``high``), the IR calls the tile intrinsics and LLVM's assembly has ``ldtilecfg`` /
    ``tdpbf16ps``, the built library records ``amx`` and the loader refuses it where the OS grants no tiles
    (``check_target``); it runs, within bf16x3's error of float64, only on a host with AMX. The emulated
    kernel (``MB_SIMD_EMULATE=amx``) calls no tile instruction and records no ``amx``."""
    import llvmlite.binding as llvm

    from runtime.host import check_target

    if not HOST.triple.startswith(("x86_64", "amd64")):
        pytest.skip("AMX is x86-64 only")
    for hook in ("MB_SIMD_SHAPE", "MB_SIMD_EMULATE", "MB_SIMD", "MB_SIMD_OFF"):
        monkeypatch.delenv(hook, raising=False)
    N, K = 70, 100
    f, _ = _linear_func(K, N, "float32", "float32", ("linear", 0))
    spr = Target(HOST.triple, "sapphirerapids", _SPR_FEATURES, matmul_precision="high")
    with monkeypatch.context() as m:
        m.setattr(runtime_host, "_AMX", True)   # as where the OS grants the tiles: the planner takes them
        text, meta = emit_llvm_ir({"f": f}, spr)
        lib = build({"f": f}, spr)
    assert meta["f"]["kernel"] == "linear/avx512+amx3"
    assert 'llvm.x86.tdpbf16ps"' in text and 'llvm.x86.ldtilecfg"' in text   # (llvmlite quotes dotted names)
    asm = spr.target_machine().emit_assembly(llvm.parse_assembly(text))
    assert "tdpbf16ps" in asm and "ldtilecfg" in asm and "tilerelease" in asm
    assert lib.target["amx"] is True

    monkeypatch.setenv("MB_SIMD_SHAPE", "avx512")
    monkeypatch.setenv("MB_SIMD_EMULATE", "amx")
    emulated_text, emulated_meta = emit_llvm_ir({"f": f}, Target.host(matmul_precision="high"))
    assert emulated_meta["f"]["kernel"] == "linear/avx512+amx3"
    assert 'llvm.x86.t' not in emulated_text and 'llvm.x86.ldtilecfg' not in emulated_text
    assert "amx" not in build({"f": f}, Target.host(matmul_precision="high")).target

    if not NATIVE:
        with pytest.raises(ValueError, match="AMX tiles|amx-tile"):   # (the CPU's features, or the OS's grant)
            check_target(lib.target)
        pytest.skip("this host's CPU or OS grants no AMX tiles: the native kernel's plan, IR and assembly were "
                    "checked, not run")
    missing = {p[1:] for p in _SPR_FEATURES.split(",")} - {p[1:] for p in HOST.features.split(",") if p[0] == "+"}
    if missing:
        pytest.skip(f"this AMX host lacks {', '.join(sorted(missing))} of the Sapphire Rapids target")
    fn = lib.load()["f"]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((95, K), dtype=np.float32)
    w = rng.standard_normal((N, K), dtype=np.float32)
    y = np.full((95, N), np.nan, np.float32)
    fn(x, w, y)
    assert _rel_err(y, x.astype(np.float64) @ w.T.astype(np.float64)) < 2e-5

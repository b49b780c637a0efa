"""The benchmark harnesses' behaviour (never their times): ``build --bench``'s report and errors,
``benchmarks/bench_mlp.py``'s compute peaks, targets and cache sweep, ``benchmarks/bench_runtime.py``'s
report. What the benchmarks measure is theirs to print; these tests check what they compute from it."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from helpers.linear_cases import HOST, HOST_SIMD, ROOT

pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/helpers/fixtures.py


def test_cli_bench_flag(capsys):
    from builder.cli import main

    rc = main([str(ROOT / "recipes" / "llama_mlp.yaml"), "dtype=float32", "hidden_size=64",
               "intermediate_size=96", "--no-ir", "--bench", "3", "--bench-dim", "batch_size=4"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "bench forward(x: (4, 64) float32): median" in out and "over 3 runs" in out
    assert main([str(ROOT / "recipes" / "llama_mlp.yaml"), "--no-ir", "--bench", "2",
                 "--bench-dim", "batch_size"]) == 1
    capsys.readouterr()
    assert main([str(ROOT / "recipes" / "llama_mlp.yaml"), "hidden_size=64", "intermediate_size=96",
                 "--no-ir", "--bench", "2", "--bench-dim", "batchsize=4"]) == 1
    assert "--bench-dim batchsize: not a symbolic dim of forward's inputs (batch_size)" in capsys.readouterr().err


def _python(code: str) -> str:
    """Run ``code`` in a fresh interpreter at the repository root (the benchmark module changes
    OpenBLAS's environment when imported); returns its stdout, failing on a non-zero exit."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_benchmark_measures_the_compute_peak():
    """``benchmarks/bench_mlp.py`` measures the float32 FMA (and, with AVX2, vpmaddubsw) peak
    with JIT-compiled chains, and puts compute-bound rows that miss a target against it."""
    code = ("import json, sys; sys.path.insert(0, 'benchmarks'); import bench_mlp\n"
            "from runtime.threadpool import pool_size\n"
            "peak, desc = bench_mlp.compute_peak(0.02)\n"
            "row = dict(format='float16', batch=128, ratio=0.9, target=0.8, numpy_ms=100.0, ours_ms=90.0,\n"
            "           alone_ms=90.0, gflops=120.0, np_gflops=108.0)\n"
            "print(json.dumps(peak)); print(pool_size()); print(desc); print(bench_mlp.verdict(row, 30.0, peak))")
    out = _python(code)
    lines = out.splitlines()
    peak, threads = json.loads(lines[0]), int(lines[1])
    # a rate for 1 thread and for the pool's threads (JSON keys are strings), whatever this host's speed
    for name, rates in peak.items():
        assert sorted(int(t) for t in rates) == sorted({1, threads}), (name, rates)
        assert all(math.isfinite(v) and v > 0 for v in rates.values()), (name, rates)
    assert ("maddubs_gops" in peak) == HOST_SIMD.int8_dot
    fma = peak["fma_gflops"]
    assert lines[2].startswith("float32 FMA " + f"{fma['1']:.0f} GFLOP/s on 1 thread")
    # the missed compute-bound row is put against the best measured FMA rate: 120 GFLOP/s, 108 / 0.8 needed
    best = max(fma.values())
    assert lines[3].startswith("MISSED (> 0.8): compute-bound: 120 GFLOP/s (120 alone, "
                               f"{120 / best:.0%} of the measured float32 FMA peak of {best:.0f})"), lines[3]
    assert lines[3].endswith(f"the target needs 135 GFLOP/s ({135 / best:.0%} of it)"), lines[3]


def test_benchmark_peak_and_target_with_avx512bf16(own_features):
    """On a CPU with AVX512-BF16 / VNNI the benchmark also measures the ``vdpbf16ps`` /
    ``vpdpbusd`` peaks (their chain loops compile for a Zen 5 target here; they run only there)
    and holds bfloat16 batch 128 to the issue's 0.5 when the ``+bf16dot`` kernels ran."""
    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 only")
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import bench_mlp, llvmlite.binding as llvm\n"
            "from builder.codegen import Target\nfrom builder.codegen.kernels import SimdInfo\n"
            "t = Target('x86_64-unknown-linux-gnu', 'znver5', "
            "'+avx512f,+avx512bw,+avx512vl,+avx512bf16,+avx512vnni,+avx2,+fma,+f16c')\n"
            "text, kernels = bench_mlp.peak_ir(SimdInfo.from_target(t.triple, t.features))\n"
            "mod = llvm.parse_assembly(text); mod.verify(); asm = t.target_machine().emit_assembly(mod)\n"
            "print(sorted(kernels), asm.count('vdpbf16ps'), asm.count('vpdpbusd'))\n"
            "print(bench_mlp.target_for('bfloat16', 128, ['linear/avx512+bf16dot']),\n"
            "      bench_mlp.target_for('bfloat16', 128, ['linear/avx512']),\n"
            "      bench_mlp.target_for('bfloat16', 1, ['linear/avx512+bf16dot']))")
    lines = _python(code).splitlines()
    assert lines[0] == "['dpbf16_gflops', 'dpbusd_gops', 'fma_gflops', 'maddubs_gops'] 12 12"   # one per chain
    assert lines[1] == "0.5 0.8 0.55"


def test_benchmark_cache_sweep_sizes_from_the_l3(tmp_path):
    """``runtime.host.host_cache_bytes`` (and ``benchmarks/host.l3_bytes``) read a cache level's size
    from Linux's cache directory (``480M``, ``32768K``), skipping the other levels and the L1
    instruction cache; 0 for a level it does not list (where ``sysconf`` does not know either);
    bench_mlp's "alone" runs sweep twice the L3, at most 1 GiB."""
    from runtime.host import host_cache_bytes

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import host
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    for i, (level, kind, size) in enumerate((("1", "Instruction", "32K"), ("1", "Data", "48K"),
                                             ("2", "Unified", "2048K"), ("3", "Unified", "480M"))):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(level + "\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
    assert host.l3_bytes(tmp_path) == 480 << 20
    assert host_cache_bytes(1, tmp_path) == 48 << 10 and host_cache_bytes(2, tmp_path) == 2 << 20
    (tmp_path / "index3" / "size").write_text("32768K\n")
    assert host.l3_bytes(tmp_path) == 32 << 20
    empty = tmp_path / "none"
    empty.mkdir()
    assert host_cache_bytes(4, empty) == 0


def test_runtime_benchmark_reports_its_measurements():
    """``benchmarks/bench_runtime.py`` measures the tiny-call cost, the RMSNorm on 1 vs all threads and the
    recipe's cold / cached build (it checks the kernels' results itself). Asserted here: what it makes of
    its measurements, never a time -- each verdict is its figure against the limit it reports, the
    thread ratio is the quotient of its medians, the text prints the JSON's figures."""
    out = subprocess.run([sys.executable, "benchmarks/bench_runtime.py", "--quick", "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.splitlines()[-1])
    call, norms, b = res["call"], res["rmsnorm"], res["build"]
    times = [call["median_us"], call["min_us"], b["cold_s"], b["cold_export_s"], b["cold_compile_s"], b["cached_s"]]
    times += [r[k] for r in norms for k in ("one_thread_us", "all_threads_us")]
    assert all(math.isfinite(t) and t > 0 for t in times), res     # each one measured
    assert call["met"] == (call["median_us"] < call["limit_us"])
    assert b["met"] == (b["cold_s"] < b["limit_s"])
    assert [r["batch"] for r in norms] == [1, 8, 64]
    for r in norms:
        assert r["ratio"] == pytest.approx(r["all_threads_us"] / r["one_thread_us"], rel=1e-12)
        line = next(t for t in out.stdout.splitlines() if t.startswith(f"  batch {r['batch']:3d}: "))
        assert f"1 thread {r['one_thread_us']:8.1f} us" in line and f"ratio {r['ratio']:.2f}" in line, line
        assert ("met (not slower)" in line) == r["met"], line
    assert f"median {call['median_us']:.1f} us, min {call['min_us']:.1f} us" in out.stdout
    assert f"{b['cold_s'] * 1e3:.0f} ms (export {b['cold_export_s'] * 1e3:.0f} ms" in out.stdout
    assert "call overhead" in out.stdout and "RMSNorm 4096 wide" in out.stdout


def test_decode_batch_benchmark_reports_its_ratios():
    """``benchmarks/bench_decode_batch.py`` on a tiny Llama (one format, two tunable variants, B = 1 and 3, no
    kernels part): a line per format and variant whose ratios are the quotients of the times it prints (to their
    rounding), the profile of every case, and an unknown tunable refused."""
    import re

    tiny = ["hidden_size=64", "intermediate_size=128", "num_layers=1", "num_heads=2", "num_kv_heads=1",
            "head_dim=32", "vocab_size=100"]
    cmd = [sys.executable, "benchmarks/bench_decode_batch.py", "--format", "q4f16_1", "--batch", "1,3",
           "--prompt", "4", "--steps", "3", "--rounds", "1", "--no-kernels", "--profile", "--shape", *tiny,
           "--tune", "", "tile_pair_rows_f32=1"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = re.findall(r"^  (\S+) +('[^']*') +B=1 +([\d.]+) / +([\d.]+)  B=3 +([\d.]+) / +([\d.]+) "
                      r"\(([\d.]+)x / ([\d.]+)x\)$", out.stdout, re.M)
    assert sorted((fmt, var) for fmt, var, *_ in rows) == sorted(
        (f, v) for f in ("q4f16_1",) for v in ("''", "'tile_pair_rows_f32=1'")), out.stdout
    for *_, p1, m1, p3, m3, rp, rm in rows:
        for t, base, ratio in ((float(p3), float(p1), float(rp)), (float(m3), float(m1), float(rm))):
            assert t > 0 and base > 0
            # the printed times are rounded to 0.01 ms, the ratio to 0.01
            lo, hi = (t - 0.005) / (base + 0.005), (t + 0.005) / max(base - 0.005, 1e-9)
            assert lo - 0.005 <= ratio <= hi + 0.005, (t, base, ratio)
    assert len(re.findall(r"^  profile .* B=[13] \(3 steps", out.stdout, re.M)) == 4, out.stdout
    bad = subprocess.run(cmd[:2] + ["--tune", "no_such_tunable=1", "--no-kernels", "--shape", *tiny],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "unknown tunable 'no_such_tunable'" in bad.stderr

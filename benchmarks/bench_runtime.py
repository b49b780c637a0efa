"""Measure the runtime costs issue 5 sets limits on, in one run:

    python benchmarks/bench_runtime.py           # a few seconds
    python benchmarks/bench_runtime.py --quick   # fewer calls (about 2 s)
    python benchmarks/bench_runtime.py --json    # also print the results as one JSON object

1. **Call overhead**: a tiny compiled function (``relu`` of a 3 x 3 float32 tensor, exported
   with ``nn.Module.export_tvm`` and loaded with ``jit``) called from Python end to end
   (argument checks, VM dispatch, output allocation, the kernel); median and minimum per
   call over ``--calls`` calls. Limit: under 20 us.
2. **Parallel-region cost**: a 4096-wide ``nn.RMSNorm`` (LLaMA's, one reduction + one scale per
   row) at batch 1, 8 and 64, timed with one thread and with every pool thread
   (``runtime.threadpool.set_num_threads``), interleaved call by call, medians. Limit: two
   threads are not slower than one: ratio <= 1.03 (medians of the same kernel differ by up to
   about 2% from run to run here, so a smaller difference is not a measured slowdown).
3. **Build time** of ``recipes/llama_mlp.yaml`` (export + passes + LLVM, ``builder.build``)
   with an empty object cache (a fresh ``MB_CACHE_DIR``), after one small build has paid the
   per-process start-up (LLVM target, thread pool); then the same recipe again, which loads the
   compiled object from the cache and skips LLVM. Limit: the first under 1 s.
4. **Start-up of the command** (issue 41): ``python -m builder --help``, ``--version`` and ``--list-ops``
   in a fresh process each, best of ``--starts`` runs (``--list-ops`` after one run that fills its cache
   in a fresh ``MB_CACHE_DIR``, whose time is printed too), beside ``python -c pass`` (the interpreter's
   own start). Limit: under 0.3 s.

5. **The first call of a loaded model** (issue 44): in a fresh process (after one that filled the object
   cache), ``recipes/llama.yaml`` at 8 layers, hidden 1024 (``bench_decode_batch.py``'s shape) in
   ``--first-format`` (q4f16_1), built from the cache; then a prefill of 32 tokens, a second one on a
   new cache, and 8 decode steps: the first call of each function against the median of the later ones
   (what a loaded model costs before it runs at its speed: page faults of its weights and workspaces,
   the thread pool's start, the weight transforms of the first call). No limit: reported.

Timings are wall-clock (``time.perf_counter``) on whatever else the machine runs; the header
prints the load average. No result is asserted: the verdict column says whether each limit is
met on this run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RECIPE = ROOT / "recipes" / "llama_mlp.yaml"
CALL_LIMIT_US = 20.0
SAME_WITHIN = 1.03   # two medians closer than this are not a measured difference
BUILD_LIMIT_S = 1.0
START_LIMIT_S = 0.3


def _jit(module, spec: dict, seed: int = 0):
    """``module.jit(spec)`` with every parameter set to random float32 data."""
    _, params = module.export_tvm(spec=spec)
    rng = np.random.default_rng(seed)
    for _, p in params:
        p.data = rng.standard_normal([int(d) for d in p.shape]).astype(p.dtype)
    return module.jit(spec=spec)


def call_overhead(calls: int) -> dict:
    """Median / min microseconds per end-to-end call of a compiled 3 x 3 ReLU."""
    from builder import nn

    class Relu(nn.Module):
        def forward(self, x):
            return nn.op.relu(x)

    f = _jit(Relu(), {"forward": {"x": nn.spec.Tensor([3, 3], "float32")}})["forward"]
    x = np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3)
    np.testing.assert_array_equal(f(x), np.maximum(x, 0))
    for _ in range(100):
        f(x)
    per = []
    chunk = 100
    for _ in range(max(1, calls // chunk)):
        t0 = time.perf_counter()
        for _ in range(chunk):
            f(x)
        per.append((time.perf_counter() - t0) / chunk)
    med, best = float(np.median(per)) * 1e6, min(per) * 1e6
    return {"median_us": med, "min_us": best, "limit_us": CALL_LIMIT_US,
            "met": med < CALL_LIMIT_US}


def rmsnorm_threads(batches: list[int], calls: int) -> list[dict]:
    """Per batch size: median microseconds of a 4096-wide RMSNorm on 1 thread and on every pool
    thread (interleaved), and their ratio."""
    from builder import nn
    from runtime import threadpool

    nthreads = threadpool.pool_size()
    out = []
    for batch in batches:
        norm = nn.RMSNorm(4096, axes=-1, bias=False)
        f = _jit(norm, {"forward": {"x": nn.spec.Tensor([batch, 4096], "float32")}})["forward"]
        x = np.random.default_rng(batch).standard_normal((batch, 4096)).astype(np.float32)
        w = norm.weight.data
        ref = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-5) * w
        np.testing.assert_allclose(f(x), ref, rtol=1e-4, atol=1e-5)
        times = {1: [], nthreads: []}
        old = threadpool.get_num_threads()
        try:
            for n in times:
                threadpool.set_num_threads(n)
                for _ in range(20):
                    f(x)
            for _ in range(calls):
                for n in times:
                    threadpool.set_num_threads(n)
                    t0 = time.perf_counter()
                    f(x)
                    times[n].append(time.perf_counter() - t0)
        finally:
            threadpool.set_num_threads(old)
        one, many = (float(np.median(times[n])) * 1e6 for n in (1, nthreads))
        out.append({"batch": batch, "threads": nthreads, "one_thread_us": one,
                    "all_threads_us": many, "ratio": many / one, "met": many <= one * SAME_WITHIN})
    return out


def build_time() -> dict:
    """Seconds to build ``recipes/llama_mlp.yaml`` with an empty object cache and again from it."""
    from builder import nn
    from builder.build_model import build

    class Warm(nn.Module):   # pays the per-process start-up (LLVM target, thread pool) first
        def forward(self, x):
            return nn.op.relu(x)

    _jit(Warm(), {"forward": {"x": nn.spec.Tensor([2], "float32")}})
    old = os.environ.get("MB_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["MB_CACHE_DIR"] = cache
        try:
            t0 = time.perf_counter()
            cold = build(RECIPE)
            cold_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            warm = build(RECIPE)
            warm_s = time.perf_counter() - t0
        finally:
            if old is None:
                os.environ.pop("MB_CACHE_DIR", None)
            else:
                os.environ["MB_CACHE_DIR"] = old
    return {"cold_s": cold_s, "cold_export_s": cold.timings["export"],
            "cold_compile_s": cold.timings["compile"], "cached_s": warm_s,
            "cached_compile_s": warm.timings["compile"], "limit_s": BUILD_LIMIT_S,
            "met": cold_s < BUILD_LIMIT_S}


def start_times(runs: int) -> dict:
    """Best-of-``runs`` seconds of ``python -m builder --help`` / ``--version`` / ``--list-ops`` (each a
    fresh process, stdout piped) and of ``python -c pass``; ``list_ops_first_s``: the run that filled the
    ``--list-ops`` cache of a fresh ``MB_CACHE_DIR``."""
    import subprocess

    def best(args: list[str], env: dict) -> float:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=True)
            times.append(time.perf_counter() - t0)
        return min(times)

    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MB_CACHE_DIR": cache}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "builder", "--list-ops"], cwd=ROOT, env=env,
                       stdout=subprocess.DEVNULL, check=True)
        first = time.perf_counter() - t0
        res = {"python_s": best(["-c", "pass"], env), "help_s": best(["-m", "builder", "--help"], env),
               "version_s": best(["-m", "builder", "--version"], env),
               "list_ops_s": best(["-m", "builder", "--list-ops"], env), "list_ops_first_s": first,
               "limit_s": START_LIMIT_S, "runs": runs}
    res["met"] = max(res["help_s"], res["version_s"], res["list_ops_s"]) < START_LIMIT_S
    return res


FIRST_CALL_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import builder
from runtime import ContiguousKVCache
t1 = time.perf_counter()
model = builder.build(sys.argv[1], sys.argv[2:])
t2 = time.perf_counter()
rng = np.random.default_rng(0)
tokens = rng.integers(0, 1000, (1, 32)).astype(np.int64)
prefill, decode = model["prefill"], model["decode"]
out = {"import_s": t1 - t0, "build_s": t2 - t1, "prefill_s": [], "decode_s": []}
for _ in range(3):
    cache = ContiguousKVCache()
    t = time.perf_counter(); prefill(tokens, cache, 32); out["prefill_s"].append(time.perf_counter() - t)
tok = rng.integers(0, 1000, (1, 1)).astype(np.int64)
for i in range(8):
    t = time.perf_counter(); decode(tok, cache, 33 + i); out["decode_s"].append(time.perf_counter() - t)
print(json.dumps(out))
"""


def first_calls(fmt: str) -> dict:
    """Item 5: seconds of the import, the build from the object cache and each prefill / decode call of
    ``recipes/llama.yaml`` (8 layers, hidden 1024, format ``fmt``) in a fresh process, after one that
    filled a fresh cache; ``first / later`` for prefill and decode."""
    import subprocess

    from bench_decode_batch import SHAPE
    from bench_models import llama_overrides

    overrides = [o for o in llama_overrides(fmt) if not any(o.startswith(k + "=") for k in SHAPE)]
    overrides += [f"{k}={v}" for k, v in SHAPE.items()]
    cmd = [sys.executable, "-c", FIRST_CALL_SCRIPT, str(ROOT / "recipes" / "llama.yaml"), *overrides]
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, MB_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
        runs = [json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
                           .strip().splitlines()[-1]) for _ in range(2)]
    res = runs[1]
    res["cold_build_s"] = runs[0]["build_s"]
    for kind in ("prefill", "decode"):
        later = float(np.median(res[f"{kind}_s"][1:]))
        res[f"{kind}_first_over_later"] = res[f"{kind}_s"][0] / later
    res["format"] = fmt
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer calls (about 2 s)")
    p.add_argument("--json", action="store_true", help="also print the results as one JSON object")
    p.add_argument("--starts", type=int, default=None, help="runs of each start-up command (default 10, --quick 3)")
    p.add_argument("--first-format", default="q4f16_1", help="the format of item 5's Llama (default q4f16_1)")
    args = p.parse_args(argv)
    calls = 2000 if args.quick else 20000
    norm_calls = 200 if args.quick else 2000

    from bench_mlp import machine_info   # noqa: E402 - same header as the MLP benchmark

    print(machine_info())
    res = {"call": call_overhead(calls)}
    c = res["call"]
    print(f"\ncall overhead (3 x 3 relu, end to end from Python): median {c['median_us']:.1f} us, "
          f"min {c['min_us']:.1f} us -- limit {CALL_LIMIT_US:.0f} us: {'met' if c['met'] else 'MISSED'}")
    res["rmsnorm"] = rmsnorm_threads([1, 8, 64], norm_calls)
    print("\nRMSNorm 4096 wide, one thread vs all pool threads (medians, interleaved):")
    for r in res["rmsnorm"]:
        print(f"  batch {r['batch']:3d}: 1 thread {r['one_thread_us']:8.1f} us, {r['threads']} threads "
              f"{r['all_threads_us']:8.1f} us, ratio {r['ratio']:.2f} -- "
              f"{'met (not slower)' if r['met'] else f'MISSED (more than {SAME_WITHIN - 1:.0%} slower with more threads)'}")
    res["build"] = build_time()
    b = res["build"]
    print(f"\nbuild {RECIPE.relative_to(ROOT)} (empty object cache): {b['cold_s'] * 1e3:.0f} ms "
          f"(export {b['cold_export_s'] * 1e3:.0f} ms, passes + LLVM {b['cold_compile_s'] * 1e3:.0f} ms) "
          f"-- limit {BUILD_LIMIT_S * 1e3:.0f} ms: {'met' if b['met'] else 'MISSED'}; "
          f"again from the cache: {b['cached_s'] * 1e3:.0f} ms (compile {b['cached_compile_s'] * 1e3:.0f} ms)")
    res["start"] = st = start_times(args.starts or (3 if args.quick else 10))
    print(f"\nstart-up, best of {st['runs']} (python -c pass {st['python_s'] * 1e3:.0f} ms): "
          f"build --help {st['help_s'] * 1e3:.0f} ms, --version {st['version_s'] * 1e3:.0f} ms, "
          f"--list-ops {st['list_ops_s'] * 1e3:.0f} ms (first run, filling its cache: "
          f"{st['list_ops_first_s'] * 1e3:.0f} ms) -- limit {START_LIMIT_S * 1e3:.0f} ms: "
          f"{'met' if st['met'] else 'MISSED'}")
    res["first"] = fc = first_calls(args.first_format)
    print(f"\nfirst calls, recipes/llama.yaml 8 layers hidden 1024 {fc['format']}, fresh process: import "
          f"{fc['import_s'] * 1e3:.0f} ms, build from the cache {fc['build_s'] * 1e3:.0f} ms (cold "
          f"{fc['cold_build_s']:.1f} s); prefill of 32 tokens first {fc['prefill_s'][0] * 1e3:.1f} ms, later "
          f"{np.median(fc['prefill_s'][1:]) * 1e3:.1f} ms ({fc['prefill_first_over_later']:.2f}x); decode step "
          f"first {fc['decode_s'][0] * 1e3:.2f} ms, later {np.median(fc['decode_s'][1:]) * 1e3:.2f} ms "
          f"({fc['decode_first_over_later']:.2f}x)")
    if args.json:
        print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())

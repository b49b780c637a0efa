"""Time ``nn.attention`` as the attention kernel (issue 15) against the generic loop stages, on the
shapes of the shipped models:

    python benchmarks/bench_attention.py            # about a minute
    python benchmarks/bench_attention.py --quick    # fewer calls
    python benchmarks/bench_attention.py --json     # also print the results as one JSON object

Shapes (BSNH, float32): MiniLM (B=8, S=41, H=12, D=32, a padding mask (B, 1, 1, S)), Llama decode
(B=1, Sq=1, Sk=512, H=32, Hk=4, D=128, BottomRight), Llama prefill (B=1, S=128, H=32, D=128,
TopLeft causal). Each is one PrimFunc of ``topi.attention`` with symbolic B / Sq / Sk, built twice:
with its :class:`~builder.ir.kernel.AttentionKernelSpec` (the kernel) and without (the reference
loops), timed with every pool thread and with one, interleaved call by call; medians of wall-clock
time (``time.perf_counter``) in microseconds. The header prints the CPU and the load average. Last, a
sliding window (issue 42): the kernel's decode step over a 2048-token cache (H=32, Hk=4, D=128,
BottomRight) with ``window_size`` 256 against the same without a window.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from host import cpu_name  # noqa: E402  (benchmarks/host.py)
from builder import te  # noqa: E402
from builder.codegen import build  # noqa: E402
from builder.ir.kernel import KERNEL_ATTR, AttentionKernelSpec  # noqa: E402
from builder.te import topi  # noqa: E402
from runtime import threadpool  # noqa: E402

#: name -> (B, Sq, Sk, H, Hk, D, causal, bias)
SHAPES = {
    "MiniLM B=8 S=41 H=12 D=32 pad mask": (8, 41, 41, 12, 12, 32, None, "pad"),
    "Llama decode Sk=512 H=32 Hk=4 D=128": (1, 1, 512, 32, 4, 128, "BottomRight", None),
    "Llama prefill S=128 H=32 D=128 causal": (1, 128, 128, 32, 32, 128, "TopLeft", None),
}


def attention_func(H: int, Hk: int, D: int, causal, bias, spec: bool, window: int | None = None):
    """``topi.attention`` on symbolic B / Sq / Sk (a sliding window of ``window`` keys), with its spec when
    ``spec``."""
    B, Sq, Sk = te.var("B"), te.var("Sq"), te.var("Sk")
    q = te.placeholder((B, Sq, H, D), "float32", name="q")
    k = te.placeholder((B, Sk, Hk, D), "float32", name="k")
    v = te.placeholder((B, Sk, Hk, D), "float32", name="v")
    args = [q, k, v] + ([te.placeholder((B, 1, 1, Sk), "float32", name="mask")] if bias else [])
    out = topi.attention(q, k, v, args[3] if bias else None, None, causal, window)
    f = te.create_prim_func(args + [out])
    if spec:
        f.attrs[KERNEL_ATTR] = AttentionKernelSpec(0, 1, 2, 3 if bias else -1, len(args), causal or "none",
                                                   (1, 2) if bias else (), H // Hk, 1 / math.sqrt(D),
                                                   window=window or 0)
    return f


_cpu = cpu_name   # benchmarks/host.py


def _median_us(fns, args, out, calls: int) -> list[float]:
    times = [[] for _ in fns]
    for fn in fns:
        fn(*args, out)   # warm up
    for _ in range(calls):
        for t, fn in zip(times, fns):
            t0 = time.perf_counter()
            fn(*args, out)
            t.append(time.perf_counter() - t0)
    return [float(np.median(t)) * 1e6 for t in times]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    ns = ap.parse_args(argv)
    os.environ.setdefault("MB_CACHE_DIR", tempfile.mkdtemp(prefix="mb-bench-attn-"))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    nthreads = threadpool.get_num_threads()
    print(f"CPU: {_cpu()}, {os.cpu_count()} logical cores, pool threads {nthreads}, load {load:.2f}")
    rng = np.random.default_rng(0)
    results = {}
    print(f"{'shape':40s} {'threads':>7s} {'loops us':>10s} {'kernel us':>10s} {'speed-up':>8s}")
    for name, (B, Sq, Sk, H, Hk, D, causal, bias) in SHAPES.items():
        libs = {}
        for spec in (True, False):
            lib = build({"f": attention_func(H, Hk, D, causal, bias, spec)})
            libs[spec] = (lib.functions["f"]["kernel"], lib.load()["f"])
        args = [rng.standard_normal(s).astype(np.float32) for s in ((B, Sq, H, D), (B, Sk, Hk, D), (B, Sk, Hk, D))]
        if bias:
            args.append(np.where(rng.random((B, 1, 1, Sk)) < 0.2, -np.inf, 0.0).astype(np.float32))
        out = np.empty((B, Sq, H, D), np.float32)
        calls = 10 if ns.quick else 50
        row = {"kernel": libs[True][0]}
        for label, threads in (("all", None), ("1", 1)):
            old = threadpool.set_num_threads(threads or threadpool.pool_size())
            try:
                kern, loops = _median_us([libs[True][1], libs[False][1]], args, out, calls)
            finally:
                threadpool.set_num_threads(old)
            row[label] = {"loops_us": loops, "kernel_us": kern}
            print(f"{name:40s} {label:>7s} {loops:10.1f} {kern:10.1f} {loops / kern:7.2f}x")
        results[name] = row
    fns = [build({"f": attention_func(32, 4, 128, "BottomRight", None, True, w)}).load()["f"] for w in (256, None)]
    args = [rng.standard_normal(s).astype(np.float32) for s in ((1, 1, 32, 128), (1, 2048, 4, 128), (1, 2048, 4, 128))]
    out = np.empty((1, 1, 32, 128), np.float32)
    win, full = _median_us(fns, args, out, 50 if ns.quick else 300)
    print(f"kernel, decode Sk=2048 H=32 Hk=4 D=128 BottomRight, all threads: no window {full:.1f} us, "
          f"window_size=256 {win:.1f} us ({full / win:.2f}x)")
    results["window decode Sk=2048 W=256"] = {"no_window_us": full, "window_us": win}
    if ns.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()

"""Batched decode (issue 44): a decode step of B sequences against a step of one, and the linear kernels at the
decode batch sizes alone, with the weights from DRAM and from L2.

    python benchmarks/bench_decode_batch.py                  # q4f16_1 and q4f16_1+a8, B = 1 and 16, and the kernels
    python benchmarks/bench_decode_batch.py --format q4f16_1+a8 --batch 1,4,16 --profile --no-kernels
    MB_SIMD=avx2 MB_SIMD_OFF=vnni python benchmarks/bench_decode_batch.py   # the code an AMD Zen 3 runs
    python benchmarks/bench_decode_batch.py --tune "" "tile_pair_rows_f32=1"   # A/B of linear tunables

Model part: ``recipes/llama.yaml`` at ``--shape`` (default hidden 1024, intermediate 2816, 8 layers, 16 heads, 4
KV heads, head_dim 64, vocab 32000) with seeded random weights, per format (``+a8``: the preset with
``quantization.activation_quantization=int8``; ``bench_models.llama_overrides``) and per ``--tune`` variant
(``KEY=VALUE,...`` over the linear kernels' :data:`builder.codegen.kernels.linear.TUNING`,
``attention.KEY=VALUE`` over the attention kernel's, as ``bench_tune.py`` takes them; set while that model
builds, each variant under its own object cache; ``""``: the defaults). Each batch size's B sequences are
prefilled with ``--prompt`` tokens (56), then ``--steps`` decode steps (16: the cache holds 57-72 tokens, about
64) are timed one by one over ``runtime.ContiguousKVCache``; ``--rounds`` rounds interleave every model and batch
size, on ``--threads`` threads (default all). Printed per case: the 20th percentile and the minimum of its steps
(on a shared host the slow steps are the neighbours'), and B / 1 of each. ``--profile``: where a step's time goes
per kernel group (``bench_models.profile_calls``: linears by kernel, attention, elementwise, and what runs
outside the kernels: the VM, the KV cache).

Kernel part (``--no-kernels`` skips it, ``--no-model`` the model part): the LlamaMLP-sized matmuls of that shape
(hidden -> intermediate and back; 4- and 8-bit weights in row tiles, float32 and int8 activations, and for 4-bit
float16 x, which those tiles take in int16) at ``--kernel-rows`` rows (1, 4, 8, 16), on one thread, with the
weights from DRAM (copies cycled through 96 MB, past the L3) and from L2 (one copy), the best of ``--kernel-runs``
in CPU time of the calling thread (which runs the kernel: a neighbour on a shared host that takes the core away
does not count, its traffic on the memory bus still does). Where the two agree, the kernel is bound by its
arithmetic, not by reading the weights: a tile re-read for another block of rows comes from L1 / L2. GFLOP/s (2 M
N K per call) against ``bench_mlp.compute_peak``'s FMA and int8 peaks of this host."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

SHAPE = dict(hidden_size=1024, intermediate_size=2816, num_layers=8, num_heads=16, num_kv_heads=4, head_dim=64,
             vocab_size=32000)
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "llama.yaml"


def prefilled(model, batch: int, prompt: int, vocab: int, seed: int = 0):
    """``(cache, tokens)``: ``batch`` random sequences of ``prompt`` ids below ``vocab`` prefilled into a new
    ``runtime.ContiguousKVCache``, and a next token per sequence (int64, ``(batch, 1)``)."""
    from runtime import ContiguousKVCache

    rng = np.random.default_rng(seed)
    cache = ContiguousKVCache()
    model["prefill"](rng.integers(0, vocab, (batch, prompt)).astype(np.int64), cache, prompt)
    return cache, rng.integers(0, vocab, (batch, 1)).astype(np.int64)


def decode_steps(model, cache, tok, prompt: int, steps: int) -> list[float]:
    """Seconds of each of ``steps`` decode steps of ``tok``'s sequences over ``cache`` (which holds ``prompt``
    tokens of each)."""
    out = []
    decode = model["decode"]      # fetched once, as builder.generation's loop does
    for i in range(steps):
        t0 = time.perf_counter()
        decode(tok, cache, prompt + i + 1)
        out.append(time.perf_counter() - t0)
    return out


def bench_model(args, cache_root: str) -> None:
    import builder
    from bench_models import llama_overrides, profile_calls
    from bench_tune import build_variant, parse_variant

    import runtime.threadpool as tp

    if args.threads:
        tp.set_num_threads(args.threads)
    vocab = int(args.shape_dict["vocab_size"])
    shape = [f"{k}={v}" for k, v in args.shape_dict.items()]
    variants = [parse_variant(v) for v in args.tune]
    models = {}
    for i, (text, variant) in enumerate(zip(args.tune, variants)):
        for fmt in args.format:
            t0 = time.perf_counter()
            # the format's overrides (at TinyLlama's shape), then this benchmark's shape over them
            models[(text, fmt)] = build_variant(
                variant, lambda fmt=fmt: builder.build(RECIPE, llama_overrides(fmt) + shape),
                os.path.join(cache_root, str(i)))
            print(f"  {fmt} {text!r}: built in {time.perf_counter() - t0:.1f} s", flush=True)
    times = {(k, b): [] for k in models for b in args.batch}
    for _ in range(args.rounds):
        for k, m in models.items():
            for b in args.batch:
                cache, tok = prefilled(m, b, args.prompt, vocab)
                times[(k, b)] += decode_steps(m, cache, tok, args.prompt, args.steps)
    print(f"\ndecode step, ms ({args.rounds} x {args.steps} steps per case, cache {args.prompt + 1}-"
          f"{args.prompt + args.steps} tokens; p20 / min; ratio to B = {args.batch[0]})")
    for k in models:
        p20 = {b: float(np.percentile(times[(k, b)], 20)) for b in args.batch}
        low = {b: min(times[(k, b)]) for b in args.batch}
        cells = [f"B={b} {p20[b] * 1e3:7.2f} / {low[b] * 1e3:7.2f}" + (
            f" ({p20[b] / p20[args.batch[0]]:.2f}x / {low[b] / low[args.batch[0]]:.2f}x)" if b != args.batch[0] else "")
            for b in args.batch]
        print(f"  {k[1]:12s} {k[0]!r:28s} " + "  ".join(cells), flush=True)
    if args.profile:
        for (variant, fmt), m in models.items():
            for b in args.batch:
                cache, tok = prefilled(m, b, args.prompt, vocab)
                wall, acc = profile_calls(m, lambda m=m, c=cache, t=tok: decode_steps(m, c, t, args.prompt, args.steps))
                top = sorted(acc.items(), key=lambda kv: -kv[1])[:10]
                rest = wall - sum(acc.values())
                print(f"  profile {fmt} {variant!r} B={b} ({args.steps} steps, {wall * 1e3:.0f} ms): "
                      + ", ".join(f"{name} {v / wall:.0%}" for name, v in top)
                      + f"; outside kernels {rest / wall:.0%}", flush=True)


def bench_kernels(args) -> None:
    from bench_mlp import compute_peak
    from builder.quant.packing import tile_rows
    import runtime.threadpool as tp

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers.linear_cases import build_kernel, quant_case

    old = tp.set_num_threads(1)
    _, desc = compute_peak()
    print(f"\nkernels alone, 1 thread; peaks: {desc}")
    hidden, inter = int(args.shape_dict["hidden_size"]), int(args.shape_dict["intermediate_size"])
    try:
        for bits in (4, 8):
            for act in ("none", "int8") + (("x16",) if bits == 4 else ()):
                # x16: float16 x, which 4-bit tiles take in int16 (plan variant x16; float32 x keeps the float tiles)
                xdt = "float16" if act == "x16" else "float32"
                for n, k in ((inter, hidden), (hidden, inter)):
                    f, odt, _, q, s, _ = quant_case(1, n, k, bits, 32, 2 ** (bits - 1), "uint32", "float16", xdt,
                                                  activation="none" if act == "x16" else act, row_tile=16)
                    kernel, lib = build_kernel(f)
                    qt, st = tile_rows(q, 16), tile_rows(s, 16)
                    copies = max(2, int(96e6 // (qt.nbytes + st.nbytes)))
                    dram = [(qt.copy(), st.copy()) for _ in range(copies)]
                    cells = []
                    for m in args.kernel_rows:
                        x = np.random.default_rng(m).standard_normal((m, k)).astype(xdt)
                        y = np.empty((m, n), odt)
                        best = {}
                        for where, ws in (("DRAM", dram), ("L2", [(qt, st)] * copies)):
                            runs = []
                            for _ in range(args.kernel_runs):
                                t0 = time.thread_time()   # 1 thread: the kernel runs on this one
                                for wq, ws_ in ws:
                                    lib["f"](x, wq, ws_, y)
                                runs.append((time.thread_time() - t0) / len(ws))
                            best[where] = min(runs)
                        cells.append(f"M={m} {best['DRAM'] * 1e6:6.0f} / {best['L2'] * 1e6:6.0f} us "
                                     f"({2 * m * n * k / best['DRAM'] / 1e9:4.0f} GFLOP/s)")
                    name = f"q{bits}{'+a8' if act == 'int8' else ' f16 x' if act == 'x16' else ''} {k}->{n}"
                    print(f"  {name:18s} [{kernel}] DRAM / L2: " + "; ".join(cells), flush=True)
    finally:
        tp.set_num_threads(old)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--format", type=lambda s: s.split(","), default=["q4f16_1", "q4f16_1+a8"],
                   help="formats, comma-separated (default q4f16_1,q4f16_1+a8)")
    p.add_argument("--batch", type=lambda s: [int(v) for v in s.split(",")], default=[1, 16],
                   help="decode batch sizes, the first the ratios' base (default 1,16)")
    p.add_argument("--shape", nargs="*", default=[], help="KEY=VALUE overrides of the recipe's shape")
    p.add_argument("--tune", nargs="*", default=[""], help="TUNING variants, each KEY=VALUE,... ('': defaults)")
    p.add_argument("--prompt", type=int, default=56)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--threads", type=int, default=0, help="threads of the model part (default: the pool's all)")
    p.add_argument("--profile", action="store_true", help="per kernel group, each case")
    p.add_argument("--no-kernels", action="store_true", help="skip the kernels alone")
    p.add_argument("--no-model", action="store_true", help="skip the model (the kernels alone only)")
    p.add_argument("--kernel-rows", type=lambda s: [int(v) for v in s.split(",")], default=[1, 4, 8, 16])
    p.add_argument("--kernel-runs", type=int, default=5)
    args = p.parse_args(argv)
    bad = [kv for kv in args.shape if "=" not in kv]
    if bad:
        p.error(f"--shape takes KEY=VALUE, got {bad[0]!r}")
    args.shape_dict = {**SHAPE, **dict(kv.split("=", 1) for kv in args.shape)}
    from bench_mlp import machine_info

    print(machine_info(), flush=True)
    if not args.no_model:
        with tempfile.TemporaryDirectory(prefix="mb-decode-batch-") as cache_root:   # each variant's object cache
            bench_model(args, cache_root)
    if not args.no_kernels:
        bench_kernels(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

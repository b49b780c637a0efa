"""Time one attention layer of a ragged decode step over a ``runtime.PagedKVCache`` (issue 43): the padded
copy and its mask against the paged attention reading the cache's blocks in place:

    python benchmarks/bench_paged_decode.py                 # float32 and float16, about a minute
    python benchmarks/bench_paged_decode.py --quick         # fewer rounds
    python benchmarks/bench_paged_decode.py --json          # also print the results as one JSON object

Shape (TinyLlama's attention): 16 sequences of about 256 tokens each (236-276, ragged), prefilled one by one,
then decode steps of all 16 together: q (16, 1, 32 heads, 64), k / v (16, 1, 4 kv heads, 64), blocks of 16
tokens. Two compiled functions, each appending the step's keys to its own cache:

* ``copy``: ``kv_cache_update`` (every row's keys and values copied out, right-aligned, (16, total, 4, 64)),
  ``kv_cache_attention_mask`` as a (16, 1, 1, total) bias and ``scaled_dot_product_attention`` (BottomRight):
  the cache path before issue 43, which the compiler no longer emits (the calls made by
  ``tests/helpers/legacy_kv_cache.py``; the runtime keeps the builtins for executables saved before);
* ``paged``: ``kv_cache_append`` (the pools, block table and lengths handed over) and ``paged_attention``.

Both are checked to agree first. Rounds alternate copy / paged; each round times 15 steps on a fresh cache
(the first 3 dropped) and keeps the median; the result is the median of the rounds in microseconds per step,
and copy / paged. The header prints the CPU, the pool threads and the load average.
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

from host import cpu_name  # noqa: E402  (benchmarks/host.py)
from builder import nn  # noqa: E402
from builder.nn import op, spec  # noqa: E402
from runtime import PagedKVCache, threadpool  # noqa: E402
from tests.helpers.legacy_kv_cache import kv_cache_attention_mask, kv_cache_update  # noqa: E402

B, H, HK, D, BLOCK = 16, 32, 4, 64, 16


class Copy(nn.Module):
    """The cache path before issue 43: padded copies of every row's keys and a mask of their padding."""

    def step(self, q, k, v, cache, total_seq_len):
        k_all, v_all = kv_cache_update(cache, 0, k, v, total_seq_len)
        keep = kv_cache_attention_mask(cache, q.shape[0], total_seq_len)
        mask = op.reshape(keep, [q.shape[0], 1, 1, total_seq_len])
        return op.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, causal_mask="BottomRight")


class Paged(nn.Module):
    """The cache path of ``nn.Attention``: the blocks read in place."""

    def step(self, q, k, v, cache, total_seq_len):
        k_pool, v_pool, table, lengths = op.kv_cache_append(cache, 0, k, v, total_seq_len)
        return op.paged_attention(q, k_pool, v_pool, table, lengths, causal_mask="BottomRight")


def compiled(dtype: str) -> dict:
    sp = {"step": {"q": spec.Tensor(["batch", "seq", H, D], dtype), "k": spec.Tensor(["batch", "seq", HK, D], dtype),
                   "v": spec.Tensor(["batch", "seq", HK, D], dtype), "cache": spec.Object(),
                   "total_seq_len": spec.Int()}}
    return {"copy": Copy().jit(spec=sp), "paged": Paged().jit(spec=sp)}


def prefilled(f, held: np.ndarray, dtype: str, rng) -> PagedKVCache:
    """A cache holding ``held[s]`` tokens of sequence ``s``, each prefilled alone through ``f``."""
    cache = PagedKVCache(block_size=BLOCK)
    for s, n in enumerate(held.tolist()):
        cache.add_sequence(s)
        total = cache.begin_forward([s], n)
        f["step"](*(rng.standard_normal((1, n, h, D)).astype(dtype) for h in (H, HK, HK)), cache, total)
    return cache


def step_inputs(rng, dtype: str):
    return [rng.standard_normal((B, 1, h, D)).astype(dtype) for h in (H, HK, HK)]


def timed_round(f, held, dtype: str, rng, steps: int = 15) -> float:
    """The median microseconds of a decode step (after 3 warm-up steps) on a fresh cache."""
    cache = prefilled(f, held, dtype, rng)
    times = []
    for _ in range(steps):
        q, k, v = step_inputs(rng, dtype)
        total = cache.begin_forward(list(range(B)), 1)
        t0 = time.perf_counter()
        f["step"](q, k, v, cache, total)
        times.append(time.perf_counter() - t0)
    return float(np.median(times[3:]) * 1e6)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds instead of 6")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    ns = ap.parse_args(argv)
    os.environ.setdefault("MB_CACHE_DIR", tempfile.mkdtemp(prefix="mb-bench-paged-"))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"CPU: {cpu_name()}, {os.cpu_count()} logical cores, pool threads {threadpool.get_num_threads()}, "
          f"load {load:.2f}")
    held = np.random.default_rng(0).integers(236, 277, B)
    print(f"{B} sequences holding {held.min()}-{held.max()} tokens (mean {held.mean():.0f}), H={H} Hk={HK} D={D}, "
          f"blocks of {BLOCK}")
    results = {}
    for dtype in ns.dtypes:
        fns = compiled(dtype)
        outs = []
        for name in ("copy", "paged"):      # the two agree on the same cache contents and step
            cache = prefilled(fns[name], held, dtype, np.random.default_rng(1))
            q, k, v = step_inputs(np.random.default_rng(2), dtype)
            outs.append(fns[name]["step"](q, k, v, cache, cache.begin_forward(list(range(B)), 1)).astype(np.float64))
        diff = float(np.abs(outs[0] - outs[1]).max())
        rng = np.random.default_rng(3)
        rounds = {"copy": [], "paged": []}
        for _ in range(3 if ns.quick else 6):
            for name in rounds:
                rounds[name].append(timed_round(fns[name], held, dtype, rng))
        med = {name: float(np.median(ts)) for name, ts in rounds.items()}
        results[dtype] = {"copy_us": med["copy"], "paged_us": med["paged"], "ratio": med["copy"] / med["paged"],
                          "rounds": rounds, "max_abs_diff": diff}
        print(f"{dtype}: copy {med['copy']:.0f} us, paged {med['paged']:.0f} us per step, copy / paged "
              f"{med['copy'] / med['paged']:.2f} (rounds: copy {' '.join(f'{x:.0f}' for x in rounds['copy'])}; "
              f"paged {' '.join(f'{x:.0f}' for x in rounds['paged'])}; max |copy - paged| {diff:.1e})")
    if ns.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()

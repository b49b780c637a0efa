"""A/B of code-generation tunables in one process (issue 15): the Llama recipe at TinyLlama shape
(random weights) built once per variant of the kernels' tunables, then prefill and decode timed with
the variants' calls interleaved, in the given order and again in reverse.

    python benchmarks/bench_tune.py "" "tasks_per_thread_tiles=16" --format q4f16_1

A variant is ``KEY=VALUE,...`` over :data:`builder.codegen.kernels.linear.TUNING`, and
``attention.KEY=VALUE`` over :data:`builder.codegen.kernels.attention.ATTENTION_TUNING` (``""``: the
defaults); each builds under its own object cache. Why both orders: on a shared host the second call of an interleaved pair ran a
few percent faster whatever it was (Intel Xeon, 2026-11-25: 2-3.5%), and sequential runs drifted
5-10% within minutes, so a change is read from both orders. Prints the median per variant and order.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

for _v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):   # they slow numpy (see benchmarks/README.md)
    os.environ.pop(_v, None)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import bench_models  # noqa: E402
import builder  # noqa: E402
from builder.codegen.kernels.attention import ATTENTION_TUNING  # noqa: E402
from builder.codegen.kernels.linear import TUNING  # noqa: E402
from runtime import ContiguousKVCache  # noqa: E402


def parse_variant(text: str) -> dict[str, tuple[dict, int]]:
    """``"KEY=VALUE,..."`` -> ``{key: (the tunables dict holding it, int value)}``. Raises
    SystemExit naming an unknown key or a value that is not an integer."""
    out = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = item.partition("=")
        if key.startswith("attention."):   # the attention kernel's (some names are in both tables)
            key, table = key[len("attention."):], ATTENTION_TUNING
        else:
            table = TUNING
        if key not in table:
            raise SystemExit(f"unknown tunable {key!r}; known: {', '.join(TUNING)}, and "
                             f"{', '.join('attention.' + k for k in ATTENTION_TUNING)}")
        try:
            out[key] = (table, int(value))
        except ValueError:
            raise SystemExit(f"{key}: {value!r} is not an integer") from None
    return out


def build_variant(variant: dict, fmt: str, cache_dir: str):
    """The Llama recipe built with ``variant``'s tunables set (restored afterwards)."""
    saved = {k: table[k] for k, (table, _) in variant.items()}
    old_cache = os.environ.get("MB_CACHE_DIR")
    os.environ["MB_CACHE_DIR"] = cache_dir
    try:
        for key, (table, value) in variant.items():
            table[key] = value
        return builder.build(bench_models.LLAMA_RECIPE, bench_models.llama_overrides(fmt))
    finally:
        for key, (table, _) in variant.items():
            table[key] = saved[key]
        if old_cache is None:
            os.environ.pop("MB_CACHE_DIR", None)
        else:
            os.environ["MB_CACHE_DIR"] = old_cache


def interleaved(models: list, prompt_len: int, prefills: int, steps: int, seed: int = 1) -> tuple[list, list]:
    """Per model (in order): the prefill times of ``prompt_len`` tokens and the decode times of
    ``steps`` tokens after a 16-token prompt, the models' calls interleaved (seconds)."""
    rng = np.random.default_rng(seed)
    big = rng.integers(0, 32000, (1, prompt_len)).astype(np.int64)
    for m in models:   # untimed: the random weights are drawn and the weight transforms run on first use
        m["prefill"](big, ContiguousKVCache(), prompt_len)
    pre: list[list[float]] = [[] for _ in models]
    for _ in range(prefills):
        for m, t in zip(models, pre):
            cache = ContiguousKVCache()
            t0 = time.perf_counter()
            m["prefill"](big, cache, prompt_len)
            t.append(time.perf_counter() - t0)
    prompt = rng.integers(0, 32000, (1, 16)).astype(np.int64)
    states = []
    for m in models:
        cache = ContiguousKVCache()
        logits = m["prefill"](prompt, cache, 16)
        states.append((m["decode"], cache, np.argmax(logits[:, -1], axis=-1).astype(np.int64)[:, None]))
    dec: list[list[float]] = [[] for _ in models]
    for step in range(steps):
        for (fn, cache, tok), t in zip(states, dec):
            t0 = time.perf_counter()
            fn(tok, cache, 17 + step)
            t.append(time.perf_counter() - t0)
    return pre, dec


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("variants", nargs="+", help='"KEY=VALUE,..." per variant ("" for the defaults)')
    ap.add_argument("--format", default="q4f16_1+a8", choices=list(bench_models.LLAMA_FORMATS))
    ap.add_argument("--prompt", type=int, default=128, help="prefill tokens")
    ap.add_argument("--prefills", type=int, default=4, help="prefill rounds per order (0: none)")
    ap.add_argument("--steps", type=int, default=48, help="decode steps per order (the first 4 not counted)")
    ns = ap.parse_args(argv)
    variants = [parse_variant(v) for v in ns.variants]
    root = tempfile.mkdtemp(prefix="mb-bench-tune-")
    models = [build_variant(v, ns.format, os.path.join(root, str(i))) for i, v in enumerate(variants)]
    print(f"TinyLlama-shape Llama, {ns.format}; variants: " + "; ".join(f"[{i}] {v or 'defaults'}"
                                                                 for i, v in enumerate(ns.variants)))
    for label, order in (("in order", list(range(len(models)))), ("reversed", list(range(len(models)))[::-1])):
        pre, dec = interleaved([models[i] for i in order], ns.prompt, ns.prefills, ns.steps + 4)
        for i, p, d in sorted(zip(order, pre, dec)):
            prefill = f"prefill {np.median(p) * 1e3:8.1f} ms" if p else ""
            print(f"  {label:9s} [{i}] {prefill}  decode {np.median(d[4:]) * 1e3:7.2f} ms/token")


if __name__ == "__main__":
    main()

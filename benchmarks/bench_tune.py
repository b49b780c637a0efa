"""A/B of code-generation tunables in one process (issue 15): a model built once per variant of the
kernels' tunables, then timed with the variants' calls interleaved, in the given order and again in
reverse. Models (``--model``): the Llama recipe at TinyLlama shape (random weights; prefill and decode,
the default), MiniLM-L6 on its real weights (batch 1 x 12 and 8 x 41 tokens), the Whisper-tiny encoder
(random weights, 3000 frames), the LlamaMLP recipe (hidden 4096, intermediate 11008, random weights in
``--mlp-format``, one of ``bench_mlp.FORMATS``, at each of ``--batches``).

    python benchmarks/bench_tune.py "" "tasks_per_thread_tiles=16" --format q4f16_1
    python benchmarks/bench_tune.py "" "tile_dense_x_bytes=0" --model minilm
    python benchmarks/bench_tune.py "" "tile_streams=1" --model mlp --mlp-format q4f16_1+a8 --batches 1 8

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
import bench_mlp  # noqa: E402
from bench_mlp import time_interleaved  # noqa: E402
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


def build_variant(variant: dict, build, cache_dir: str):
    """``build()`` (a model) with ``variant``'s tunables set (restored afterwards), under its own
    object cache ``cache_dir``."""
    saved = {k: table[k] for k, (table, _) in variant.items()}
    old_cache = os.environ.get("MB_CACHE_DIR")
    os.environ["MB_CACHE_DIR"] = cache_dir
    try:
        for key, (table, value) in variant.items():
            table[key] = value
        return build()
    finally:
        for key, (table, _) in variant.items():
            table[key] = saved[key]
        if old_cache is None:
            os.environ.pop("MB_CACHE_DIR", None)
        else:
            os.environ["MB_CACHE_DIR"] = old_cache


def minilm_case():
    """``(build, cases)``: MiniLM-L6 on its weights, and per case name a function from a model to a
    zero-argument call of its ``embed`` on that case's tokens (batch 1 x 12 and 8 x 41)."""
    import json

    from builder.text import minilm_assets, tokenize

    assets = minilm_assets()
    sentences = json.loads(bench_models.SENTENCES.read_text())["A"]
    feeds = {}
    for name, texts in (("batch 1 x 12", sentences[:1]), ("batch 8 x 41", sentences)):
        enc = tokenize(assets, texts)
        feeds[name] = [np.ascontiguousarray(enc[k]) for k in ("input_ids", "attention_mask", "token_type_ids")]

    def build():
        return builder.build(bench_models.MINILM_RECIPE, weights=assets / "model.safetensors")

    def case(f):
        def call(m):
            embed = m["embed"]
            return lambda: embed(*f)
        return call

    return build, {name: case(f) for name, f in feeds.items()}


def whisper_case():
    """``(build, cases)``: the Whisper-tiny encoder recipe (random weights) on 3000 frames of random
    log-mel features."""
    x = np.random.default_rng(0).standard_normal((1, 80, 3000)).astype(np.float32)

    def call(m):
        fn = m[m.functions[0]]
        return lambda: fn(x)

    return (lambda: builder.build(bench_models.ROOT / "recipes" / "whisper_tiny_encoder.yaml")), {"forward": call}


def mlp_case(fmt: str, batches: list[int]):
    """``(build, cases)``: the LlamaMLP recipe in ``fmt`` (``bench_mlp.FORMATS``) with seeded random
    weights (the same for every variant), and per batch size a call of ``forward`` on random x."""
    def build():
        model = builder.build(bench_mlp.RECIPE, bench_mlp.FORMATS[fmt])
        model._params = bench_mlp.random_weights(model, np.random.default_rng(0))
        return model

    def case(batch: int):
        def call(m):
            x = bench_mlp.make_input(batch, m.spec["forward"]["x"].dtype, np.random.default_rng(batch))
            fwd = m["forward"]
            return lambda: fwd(x)
        return call

    return build, {f"batch {b}": case(b) for b in batches}


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
    ap.add_argument("--model", default="llama", choices=["llama", "minilm", "whisper", "mlp"])
    ap.add_argument("--format", default="q4f16_1+a8", choices=list(bench_models.LLAMA_FORMATS),
                    help="Llama weight format")
    ap.add_argument("--prompt", type=int, default=128, help="Llama prefill tokens")
    ap.add_argument("--prefills", type=int, default=4, help="Llama prefill rounds per order (0: none)")
    ap.add_argument("--steps", type=int, default=48, help="Llama decode steps per order (the first 4 not counted)")
    ap.add_argument("--rounds", type=int, default=10, help="MiniLM / Whisper / MLP calls per variant and order")
    ap.add_argument("--mlp-format", default="q4f16_1+a8", choices=list(bench_mlp.FORMATS), help="LlamaMLP format")
    ap.add_argument("--batches", type=int, nargs="+", default=[1], help="LlamaMLP batch sizes")
    ns = ap.parse_args(argv)
    variants = [parse_variant(v) for v in ns.variants]
    root = tempfile.mkdtemp(prefix="mb-bench-tune-")
    if ns.model == "llama":
        build, title = (lambda: builder.build(bench_models.LLAMA_RECIPE, bench_models.llama_overrides(ns.format))), \
            f"TinyLlama-shape Llama, {ns.format}"
        cases = None
    elif ns.model == "mlp":
        build, cases = mlp_case(ns.mlp_format, ns.batches)
        title = f"LlamaMLP 4096 -> 11008, {ns.mlp_format}"
    else:
        build, cases = minilm_case() if ns.model == "minilm" else whisper_case()
        title = "MiniLM-L6" if ns.model == "minilm" else "Whisper-tiny encoder, 3000 frames"
    models = [build_variant(v, build, os.path.join(root, str(i))) for i, v in enumerate(variants)]
    print(f"{title}; variants: " + "; ".join(f"[{i}] {v or 'defaults'}" for i, v in enumerate(ns.variants)))
    for label, order in (("in order", list(range(len(models)))), ("reversed", list(range(len(models)))[::-1])):
        if cases is None:
            pre, dec = interleaved([models[i] for i in order], ns.prompt, ns.prefills, ns.steps + 4)
            for i, p, d in sorted(zip(order, pre, dec)):
                prefill = f"prefill {np.median(p) * 1e3:8.1f} ms" if p else ""
                print(f"  {label:9s} [{i}] {prefill}  decode {np.median(d[4:]) * 1e3:7.2f} ms/token")
            continue
        for name, make in cases.items():
            times = time_interleaved([make(models[i]) for i in order], ns.rounds, 1)
            for i, t in sorted(zip(order, times)):
                print(f"  {label:9s} [{i}] {name} {np.median(t) * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()

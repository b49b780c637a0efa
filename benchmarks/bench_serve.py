"""Serving throughput (issue 43): tokens per second summed over 1, 4 and 16 concurrent streams, and the time to
the first token, of model-builder's continuous-batching engine against llama.cpp's server on the same model.

    pip install -e ".[bench]"                  # xllamacpp (llama.cpp's server in process) and gguf
    python benchmarks/bench_serve.py           # TinyLlama-shaped q4f16_1 and q4f16_1+a8, 1 / 4 / 16 streams
    python benchmarks/bench_serve.py --layers 4 --streams 1 4   # a shorter model and fewer cases
    python benchmarks/bench_serve.py --markdown

The model: ``recipes/llama.yaml`` at TinyLlama-1.1B's shape with seeded random weights (as ``bench_models.py``
builds it; ``--layers`` overrides the 22 layers), ours quantized to each format, llama.cpp on a GGUF of the same
float weights (Q4_0 for the q4 formats, Q8_0 for q8), written with the ``gguf`` package.

A case is S streams started together, each a random prompt of ``--prompt`` tokens, greedy, ``--decode-tokens``
new tokens, no stop id. Ours: :class:`builder.serve.Engine` in this process (the server's engine without HTTP),
a byte-free word-level tokenizer of the model's vocabulary for its detokenization; the summed throughput is
``S * decode_tokens / wall`` (submit to the last token), the time to first token the median over the streams of
submit -> first token. llama.cpp: ``xllamacpp.Server`` with ``n_parallel = S`` slots (its continuous batching),
2 threads, the S requests from S Python threads at once through ``handle_completions``; the same wall clock and
throughput; its time to first token is the median of its own ``timings.prompt_ms`` plus the wait before its slot
started (not reported by it: a lower bound). Each round runs ours, then llama.cpp (interleaved); medians over
``--rounds``. The hardware floor of a decode step (every weight byte read once, at the bandwidth measured by
``floor.py``'s probe in this run) gives the best summed rate ``S / (weight bytes / bandwidth)``.
"""
from __future__ import annotations

import os
import sys

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import (LLAMA_RECIPE, TINYLLAMA, LlamaCpp, llama_overrides, llama_qtype,  # noqa: E402
                          machine_info, write_gguf)

def word_tokenizer(vocab: int):
    """A ``tokenizers`` word-level tokenizer of ``vocab`` pieces ``t0`` ... (the benchmark's text is ids)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def run_ours(model, prompts: list[list[int]], n_new: int, max_batch: int) -> dict:
    """S streams through a fresh :class:`builder.serve.Engine`: wall seconds, tokens, time to first token."""
    from builder.completion import TextModel
    from builder.serve import Engine, RequestDone

    tm = TextModel(model["prefill"], model["decode"], word_tokenizer(TINYLLAMA["vocab_size"]),
                   vocab=TINYLLAMA["vocab_size"], eos_ids=[])
    tokens_needed = len(prompts) * (len(prompts[0]) + n_new + 32)
    engine = Engine(tm, kv_cache_tokens=tokens_needed, max_batch=max_batch, max_queue=len(prompts) + 1)
    first: dict[int, float] = {}
    done = threading.Event()
    left = [len(prompts)]
    count = [0]

    def deliver(i):
        def on(event):
            if isinstance(event, RequestDone):
                count[0] += event.completion_tokens
                left[0] -= 1
                if left[0] == 0:
                    done.set()
            elif i not in first:
                first[i] = time.perf_counter()
        return on
    engine.start()
    try:
        t0 = time.perf_counter()
        for i, p in enumerate(prompts):
            engine.submit(p, n_new, deliver=deliver(i))
        done.wait(3600)
        wall = time.perf_counter() - t0
    finally:
        engine.shutdown()
    return {"wall": wall, "tokens": count[0], "ttft": float(np.median([first[i] - t0 for i in first]))}


class LlamaCppServer(LlamaCpp):
    """llama.cpp's server in process (xllamacpp, :class:`bench_models.LlamaCpp`) with ``slots`` parallel
    sequences, the S requests sent at once from S threads."""

    def run(self, prompts: list[list[int]], n_new: int) -> dict:
        results: list = [None] * len(prompts)

        def one(i: int) -> None:
            req = {"prompt": prompts[i], "n_predict": n_new, "temperature": 0.0, "top_k": 1, "ignore_eos": True,
                   "cache_prompt": False, "samplers": ["top_k"]}
            started = time.perf_counter()
            results[i] = (started, self.server.handle_completions(req))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        tokens, ttft = 0, []
        for started, r in results:
            if not isinstance(r, dict) or "timings" not in r:
                raise RuntimeError(f"llama.cpp answered {str(r)[:300]}")
            tokens += r["timings"]["predicted_n"]
            ttft.append(started - t0 + r["timings"]["prompt_ms"] / 1e3)
        return {"wall": wall, "tokens": tokens, "ttft": float(np.median(ttft))}

def bandwidth() -> float | None:
    """The best streaming-read bandwidth of this run (bytes / s, ``floor.probe``), or None when it fails."""
    try:
        from floor import probe
        gbs, _ = probe(1 << 28, repeats=3)
        return max(gbs.values()) * 1e9
    except Exception as err:  # noqa: BLE001
        print(f"  (no floor: {err})")
        return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--formats", nargs="*", default=["q4f16_1", "q4f16_1+a8"])
    p.add_argument("--streams", nargs="*", type=int, default=[1, 4, 16])
    p.add_argument("--prompt", type=int, default=64, help="prompt tokens per stream (default 64)")
    p.add_argument("--decode-tokens", type=int, default=32, help="new tokens per stream (default 32)")
    p.add_argument("--layers", type=int, default=None, help="override the 22 layers")
    p.add_argument("--rounds", type=int, default=2, help="rounds per case (default 2)")
    p.add_argument("--no-llama-cpp", action="store_true")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)

    import builder

    print(machine_info(), f"load average {os.getloadavg()[0]:.1f}", flush=True)
    layers = [f"num_layers={args.layers}"] if args.layers else []
    t0 = time.perf_counter()
    f32 = builder.build(LLAMA_RECIPE, llama_overrides("float32") + layers)
    fparams = f32.params
    print(f"float32 weights drawn in {time.perf_counter() - t0:.1f} s ({f32.param_bytes / 1e9:.2f} GB)", flush=True)
    rng = np.random.default_rng(0)
    bw = bandwidth()
    rows = []
    gguf_dir = Path(tempfile.mkdtemp(prefix="mb-bench-serve-"))
    for fmt in args.formats:
        t1 = time.perf_counter()
        m = builder.build(LLAMA_RECIPE, llama_overrides(fmt) + layers)
        m._params = m.mapping.apply(fparams, m.param_specs)
        print(f"\n{fmt}: built in {time.perf_counter() - t1:.1f} s, weights {m.param_bytes / 1e9:.2f} GB", flush=True)
        gguf = None
        if not args.no_llama_cpp:
            try:
                gguf = gguf_dir / f"{llama_qtype(fmt)}.gguf"
                if not gguf.exists():
                    write_gguf(gguf, fparams, llama_qtype(fmt))
            except Exception as err:  # noqa: BLE001
                print(f"  llama.cpp skipped: {err}")
                gguf = None
        for streams in args.streams:
            prompts = [rng.integers(259, TINYLLAMA["vocab_size"], args.prompt).tolist() for _ in range(streams)]
            cpp = None
            if gguf is not None:
                try:
                    cpp = LlamaCppServer(gguf, args.prompt + args.decode_tokens + 16, slots=streams)
                except Exception as err:  # noqa: BLE001
                    print(f"  llama.cpp skipped: {err}")
            ours, theirs = [], []
            for _ in range(args.rounds):
                ours.append(run_ours(m, prompts, args.decode_tokens, max_batch=max(streams, 1)))
                if cpp is not None:
                    theirs.append(cpp.run(prompts, args.decode_tokens))
            if cpp is not None:
                cpp.close()
            o = {k: float(np.median([r[k] for r in ours])) for k in ("wall", "tokens", "ttft")}
            row = {"format": fmt, "streams": streams, "ours_tps": o["tokens"] / o["wall"], "ours_ttft": o["ttft"]}
            if theirs:
                t = {k: float(np.median([r[k] for r in theirs])) for k in ("wall", "tokens", "ttft")}
                row.update(cpp_tps=t["tokens"] / t["wall"], cpp_ttft=t["ttft"])
            if bw:
                row["floor_tps"] = streams * bw / m.param_bytes
            rows.append(row)
            print(f"  {streams:>2} streams: ours {row['ours_tps']:.1f} tok/s (TTFT {row['ours_ttft'] * 1e3:.0f} ms)"
                  + (f", llama.cpp {row['cpp_tps']:.1f} tok/s (TTFT >= {row['cpp_ttft'] * 1e3:.0f} ms), "
                     f"ours / llama.cpp {row['ours_tps'] / row['cpp_tps']:.2f}" if "cpp_tps" in row else "")
                  + (f", floor {row['floor_tps']:.1f} tok/s" if "floor_tps" in row else ""), flush=True)
    if args.markdown:
        print("\n| format | streams | ours tok/s | llama.cpp tok/s | ours / llama.cpp | floor tok/s | ours TTFT ms | "
              "llama.cpp TTFT ms |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['format']} | {r['streams']} | {r['ours_tps']:.1f} | {r.get('cpp_tps', float('nan')):.1f} | "
                  f"{r['ours_tps'] / r['cpp_tps'] if 'cpp_tps' in r else float('nan'):.2f} | "
                  f"{r.get('floor_tps', float('nan')):.1f} | {r['ours_ttft'] * 1e3:.0f} | "
                  f"{r.get('cpp_ttft', float('nan')) * 1e3:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

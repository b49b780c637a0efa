"""Time builds (export -> passes -> kernels -> LLVM -> bytecode) of model-shaped modules, cold and
cached.

    python benchmarks/bench_build.py              # MiniLM, Llama 2 / 8 layers, 7B-shaped 1 / 32 layers
    python benchmarks/bench_build.py --quick      # MiniLM and the 2-layer Llama only
    python benchmarks/bench_build.py --markdown   # also print the table as Markdown
    python benchmarks/bench_build.py --threads 1  # LLVM on one thread (MB_BUILD_THREADS)

Models, built through the Python API (``builder.nn`` modules, ``export_tvm``, ``builder.compile``),
float32, weights never allocated (export and compile only):

* ``minilm``: a BERT encoder with MiniLM's sizes (vocab 30522, hidden 384, 6 layers, 12 heads,
  intermediate 1536, 512 positions): word + position + token-type embeddings, LayerNorm, and per
  layer Linear q / k / v reshaped to (batch, seq, heads, 32), bidirectional
  ``scaled_dot_product_attention`` (BSNH), Linear o + residual, LayerNorm, Linear-GELU-Linear +
  residual, LayerNorm; symbolic ``batch`` and ``seq``;
* ``llama-N``: a Llama decoder (vocab 32000, hidden 256, 8 heads, 4 KV heads, intermediate 688,
  N layers): embedding, per layer RMSNorm, Linear q / k / v, K / V appended to ``nn.KVCache``\\ s,
  attention over the cache (``is_causal`` in ``prefill``), Linear o + residual, RMSNorm, SiLU-gated
  MLP + residual; final RMSNorm and the LM head. Two functions: ``prefill`` (ids (1, seq)) and
  ``decode`` (ids (1, 1) and the cache length). No rotary embedding (no such op in ``nn.op``);
* ``llama7b-N``: the same with 7B sizes (hidden 4096, 32 heads, 32 KV heads, intermediate 11008).

Per model and run: export seconds, each pipeline pass (``PassTiming``), kernels (PrimFuncs) and
how many were compiled (the others are aliases of a structurally equal one), LLVM modules, Python
codegen (schedule, lower, LLVM IR), LLVM optimize and codegen (CPU seconds summed over the
modules' threads) and the LLVM phase's wall time, bytecode, and the total (export + compile).
``cold``: an empty object cache (``$MB_CACHE_DIR`` set to a fresh temporary directory before the
first build of each model); ``cached``: the same build again (the object comes from the cache; the
IR is still generated, it is the key). Each row is one build (``--repeat`` takes the fastest of
several, each cold one in a fresh cache).

``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` are removed from the environment before numpy loads
(as the other benchmarks do).
"""
from __future__ import annotations

import os
import sys

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)

import argparse  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import builder  # noqa: E402
from builder import nn  # noqa: E402
from builder.nn import spec  # noqa: E402
from builder.transform import PassTiming  # noqa: E402


class BertLayer(nn.Module):
    """One post-norm BERT encoder layer (bidirectional attention, GELU MLP)."""

    def __init__(self, hidden: int, heads: int, inter: int) -> None:
        self.hidden, self.heads = hidden, heads
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))
        self.ln1 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, inter)
        self.fc2 = nn.Linear(inter, hidden)
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x):
        b, n, _ = x.shape
        hd = self.hidden // self.heads
        q, k, v = (nn.op.reshape(lin(x), [b, n, self.heads, hd]) for lin in (self.q, self.k, self.v))
        a = nn.op.reshape(nn.op.scaled_dot_product_attention(q, k, v), [b, n, self.hidden])
        x = self.ln1(self.o(a) + x)
        return self.ln2(self.fc2(nn.op.gelu(self.fc1(x))) + x)


class Bert(nn.Module):
    """A BERT encoder (embeddings + LayerNorm + ``layers`` encoder layers)."""

    def __init__(self, vocab: int = 30522, hidden: int = 384, layers: int = 6, heads: int = 12,
                 inter: int = 1536, max_positions: int = 512) -> None:
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList([BertLayer(hidden, heads, inter) for _ in range(layers)])

    def forward(self, ids, positions, token_types):
        x = self.ln(self.word(ids) + self.position(positions) + self.token_type(token_types))
        for layer in self.layers:
            x = layer(x)
        return x


def bert_spec() -> dict:
    ids = spec.Tensor(["batch", "seq"], "int32")
    return {"forward": {"ids": ids, "positions": ids, "token_types": ids}}


class LlamaLayer(nn.Module):
    """One pre-norm Llama decoder layer with a KV cache (grouped-query attention, SiLU-gated MLP)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, inter: int) -> None:
        self.heads, self.kv_heads, self.hd = heads, kv_heads, hidden // heads
        self.norm1 = nn.RMSNorm(hidden, axes=-1, bias=False)
        self.norm2 = nn.RMSNorm(hidden, axes=-1, bias=False)
        self.q = nn.Linear(hidden, heads * self.hd, bias=False)
        self.k = nn.Linear(hidden, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(hidden, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(heads * self.hd, hidden, bias=False)
        self.gate = nn.Linear(hidden, inter, bias=False)
        self.up = nn.Linear(hidden, inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)
        self.k_cache = nn.KVCache(16, [kv_heads, self.hd])
        self.v_cache = nn.KVCache(16, [kv_heads, self.hd])

    def forward(self, x, total, causal: bool):
        b, n, _ = x.shape
        y = self.norm1(x)
        q = nn.op.reshape(self.q(y), [b, n, self.heads, self.hd])
        self.k_cache.append(nn.op.reshape(self.k(y), [n, self.kv_heads, self.hd]))
        self.v_cache.append(nn.op.reshape(self.v(y), [n, self.kv_heads, self.hd]))
        k = nn.op.reshape(self.k_cache.view(total), [1, total, self.kv_heads, self.hd])
        v = nn.op.reshape(self.v_cache.view(total), [1, total, self.kv_heads, self.hd])
        a = nn.op.scaled_dot_product_attention(q, k, v, is_causal=causal)
        x = x + self.o(nn.op.reshape(a, [b, n, self.heads * self.hd]))
        y = self.norm2(x)
        return x + self.down(nn.op.silu(self.gate(y)) * self.up(y))


class Llama(nn.Module):
    """A Llama decoder: ``prefill(ids)`` (a fresh cache, causal) and ``decode(ids, total)``."""

    def __init__(self, vocab: int = 32000, hidden: int = 256, heads: int = 8, kv_heads: int = 4,
                 inter: int = 688, layers: int = 2) -> None:
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList([LlamaLayer(hidden, heads, kv_heads, inter) for _ in range(layers)])
        self.norm = nn.RMSNorm(hidden, axes=-1, bias=False)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def _run(self, ids, total, causal: bool):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, total, causal)
        return self.head(self.norm(x))

    def prefill(self, ids):
        return self._run(ids, ids.shape[1], True)

    def decode(self, ids, total):
        return self._run(ids, total, False)


def llama_spec() -> dict:
    return {"prefill": {"ids": spec.Tensor([1, "seq"], "int32")},
            "decode": {"ids": spec.Tensor([1, 1], "int32"), "total": int}}


LLAMA_7B = {"hidden": 4096, "heads": 32, "kv_heads": 32, "inter": 11008}

#: name -> (module factory, spec factory)
MODELS = {
    "minilm": (lambda: Bert(), bert_spec),
    "llama-2": (lambda: Llama(layers=2), llama_spec),
    "llama-8": (lambda: Llama(layers=8), llama_spec),
    "llama7b-1": (lambda: Llama(layers=1, **LLAMA_7B), llama_spec),
    "llama7b-32": (lambda: Llama(layers=32, **LLAMA_7B), llama_spec),
}
QUICK = ("minilm", "llama-2")


def build_once(name: str) -> dict:
    """Export and compile model ``name`` once in this process; returns the measured row."""
    make, make_spec = MODELS[name]
    t0 = time.perf_counter()
    mod, _ = make().export_tvm(make_spec())
    export = time.perf_counter() - t0
    timing = PassTiming()
    exe = builder.compile(mod, instruments=[timing])
    total = time.perf_counter() - t0
    s = exe.build_stats
    return {"model": name, "export": export, "passes": dict(timing.timings), "kernels": s["kernels"],
            "distinct": s["distinct"], "parts": s["parts"], "cached": s["cached"],
            "python_codegen": s["seconds"]["kernels"], "llvm_optimize": s["seconds"]["llvm_optimize"],
            "llvm_codegen": s["seconds"]["llvm_codegen"], "llvm_wall": s["seconds"]["llvm"],
            "bytecode": s["seconds"]["bytecode"], "total": total}


def measure(name: str, repeat: int) -> tuple[dict, dict]:
    """(cold, cached) rows for ``name``: the fastest of ``repeat`` builds each, every cold build in
    a fresh empty cache directory."""
    cold = cached = None
    saved = os.environ.get("MB_CACHE_DIR")
    try:
        for _ in range(repeat):
            d = tempfile.mkdtemp(prefix="mb-bench-build-")
            os.environ["MB_CACHE_DIR"] = d
            try:
                c = build_once(name)
                w = build_once(name)
            finally:
                shutil.rmtree(d, ignore_errors=True)
            if c["cached"] or not w["cached"]:
                raise RuntimeError(f"{name}: the object cache did not behave (cold hit or warm miss)")
            cold = c if cold is None or c["total"] < cold["total"] else cold
            cached = w if cached is None or w["total"] < cached["total"] else cached
    finally:
        if saved is None:
            os.environ.pop("MB_CACHE_DIR", None)
        else:
            os.environ["MB_CACHE_DIR"] = saved
    return cold, cached


COLUMNS = ["model", "run", "export", "select", "fuse", "legalize", "dce", "kernels", "compiled",
           "modules", "py codegen", "llvm opt", "llvm cg", "llvm wall", "bytecode", "total s"]


def _cells(row: dict, run: str) -> list[str]:
    p = row["passes"]
    return [row["model"], run, f"{row['export']:.2f}", f"{p.get('select_kernels', 0):.2f}",
            f"{p.get('fuse_ops', 0):.2f}", f"{p.get('legalize_ops', 0):.2f}",
            f"{p.get('dead_code_elimination', 0):.2f}", str(row["kernels"]), str(row["distinct"]),
            str(row["parts"]), f"{row['python_codegen']:.2f}", f"{row['llvm_optimize']:.2f}",
            f"{row['llvm_codegen']:.2f}", f"{row['llvm_wall']:.2f}", f"{row['bytecode']:.3f}",
            f"{row['total']:.2f}"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="MiniLM and the 2-layer Llama only")
    ap.add_argument("--models", nargs="*", choices=sorted(MODELS), help="models to build")
    ap.add_argument("--repeat", type=int, default=1, help="builds per row; the fastest is shown")
    ap.add_argument("--threads", type=int, help="LLVM threads (sets MB_BUILD_THREADS)")
    ap.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    args = ap.parse_args(argv)
    if args.threads is not None:
        os.environ["MB_BUILD_THREADS"] = str(args.threads)
    from builder.codegen import build_threads

    names = args.models or (list(QUICK) if args.quick else list(MODELS))
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    print(f"CPU: {cpu}, {os.cpu_count()} logical CPUs; LLVM threads: {build_threads()}; "
          f"python {platform.python_version()}")
    rows = []
    for name in names:
        cold, cached = measure(name, max(1, args.repeat))
        rows += [_cells(cold, "cold"), _cells(cached, "cached")]
        print(f"  {name}: cold {cold['total']:.2f} s, cached {cached['total']:.2f} s", flush=True)
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    print()
    print("  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    if args.markdown:
        print()
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    print("\nseconds; llvm opt / cg: CPU seconds summed over the modules' threads; "
          "llvm wall: the LLVM phase's wall time; total: export + compile")


if __name__ == "__main__":
    main()

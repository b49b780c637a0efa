"""Time builds (export -> passes -> kernels -> LLVM -> bytecode) of the shipped model recipes, cold and
cached.

    python benchmarks/bench_build.py              # MiniLM, Llama 2 / 8 layers, 7B-shaped 1 / 32 layers
    python benchmarks/bench_build.py --quick      # MiniLM and the 2-layer Llama only
    python benchmarks/bench_build.py --markdown   # also print the table as Markdown
    python benchmarks/bench_build.py --threads 1  # LLVM on one thread (MB_BUILD_THREADS)
    python benchmarks/bench_build.py --hf         # build DIR of each family's tiny checkpoint vs the Llama recipe

Models: the shipped recipes, built as ``build`` builds them (recipe -> modules -> IR -> passes -> native
code), weights never drawn: ``minilm`` (``recipes/minilm_l6.yaml``: forward and embed), ``llama-N``
(``recipes/llama.yaml``: forward, prefill and decode over the KV cache; 2 or 8 layers), ``whisper-enc``
(``recipes/whisper_tiny_encoder.yaml``), ``llama7b-N`` (``llama.yaml`` with Llama-2-7B's sizes, 1 or 32
layers), ``tinyllama-q4`` (``llama.yaml`` TinyLlama-1.1B-shaped, 22 layers, ``quantization=q4f16_1``).

Per model and run: export seconds, each pipeline pass (``PassTiming``), kernels (PrimFuncs) and
how many were compiled (the others are aliases of a structurally equal one, or entries calling a more
general one's body with dims fixed), LLVM modules, Python
codegen (schedule, lower, LLVM IR), LLVM optimize and codegen (CPU seconds summed over the
modules' threads) and the LLVM phase's wall time, bytecode, the total (export + compile) and the CPU seconds the
process spent on the build (all threads; the figure to compare on a shared host).
``cold``: an empty object cache (``$MB_CACHE_DIR`` set to a fresh temporary directory before the
first build of each model); ``cached``: the same build again (the object comes from the cache; the
IR is still generated, it is the key). Each row is one build (``--repeat`` takes the fastest of
several, each cold one in a fresh cache).

``--hf`` (needs transformers): each family of ``recipes/hf/families.yaml`` as a tiny 2-layer checkpoint saved
by transformers (hidden 64, vocab 256, random weights), built cold with ``builder.build(DIR)`` (config mapping,
weights read, export, compile), against the 2-layer Llama recipe at the same sizes on random weights, cold:
printed as the ratio family / Llama (not asserted; the encoders compile other kernels, so theirs differ).

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
import resource  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import builder  # noqa: E402
from host import cpu_name  # noqa: E402  (benchmarks/host.py)
from builder.transform import PassTiming  # noqa: E402


LLAMA_7B = ["hidden_size=4096", "intermediate_size=11008", "num_heads=32", "num_kv_heads=32", "head_dim=128",
            "vocab_size=32000"]

TINYLLAMA = ["hidden_size=2048", "intermediate_size=5632", "num_heads=32", "num_kv_heads=4", "head_dim=64",
             "num_layers=22", "vocab_size=32000"]

#: name -> (recipe, overrides): the shipped recipes, as `build` builds them
MODELS = {
    "minilm": ("minilm_l6.yaml", []),
    "llama-2": ("llama.yaml", []),
    "llama-8": ("llama.yaml", ["num_layers=8"]),
    "whisper-enc": ("whisper_tiny_encoder.yaml", []),
    "llama7b-1": ("llama.yaml", [*LLAMA_7B, "num_layers=1"]),
    "llama7b-32": ("llama.yaml", [*LLAMA_7B, "num_layers=32"]),
    "tinyllama-q4": ("llama.yaml", [*TINYLLAMA, "quantization=q4f16_1"]),
}
QUICK = ("minilm", "llama-2")


def build_once(name: str) -> dict:
    """Export and compile model ``name`` once in this process (no weights drawn); returns the measured row."""
    recipe, overrides = MODELS[name]
    timing = PassTiming()
    c0 = _cpu_seconds()
    t0 = time.perf_counter()
    m = builder.build(ROOT / "recipes" / recipe, overrides, instruments=[timing])
    total = time.perf_counter() - t0
    cpu = _cpu_seconds() - c0
    s = m.exe.build_stats
    return {"model": name, "export": m.timings["export"], "passes": dict(timing.timings), "kernels": s["kernels"],
            "distinct": s["distinct"], "parts": s["parts"], "cached": s["cached"],
            "python_codegen": s["seconds"]["kernels"], "llvm_optimize": s["seconds"]["llvm_optimize"],
            "llvm_codegen": s["seconds"]["llvm_codegen"], "llvm_wall": s["seconds"]["llvm"],
            "bytecode": s["seconds"]["bytecode"], "total": total, "cpu": cpu}


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


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


#: The sizes of the --hf checkpoints (hidden 64, 2 layers) in the fields of Llama-style configs.
HF_SIZES = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 128}
_ROPE = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}

#: family -> (transformers config class, model class, config fields): the --hf checkpoints, every family of
#: recipes/hf/families.yaml at about the same size (configs whose fields are not Llama's spell their own).
HF_MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {**HF_SIZES, "num_key_value_heads": 4}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {**HF_SIZES, "num_key_value_heads": 4}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {**HF_SIZES, "num_key_value_heads": 4, "sliding_window": None}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**HF_SIZES, "num_key_value_heads": 4, "head_dim": 16, **_ROPE}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {**HF_SIZES, "num_key_value_heads": 4, "head_dim": 16, **_ROPE}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**HF_SIZES, "num_key_value_heads": 4, "pad_token_id": 0, **_ROPE}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",
                 {**HF_SIZES, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                  "partial_rotary_factor": 0.25}}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"vocab_size": 256, "n_positions": 128, "n_embd": 64, "n_layer": 2,
                                               "n_head": 4, "n_inner": 128}),
    "bert": ("BertConfig", "BertModel", HF_SIZES),
    "roberta": ("RobertaConfig", "RobertaModel", HF_SIZES),
    "distilbert": ("DistilBertConfig", "DistilBertModel", {"dim": 64, "hidden_dim": 128, "n_layers": 2, "n_heads": 4}),
    "t5_encoder": ("T5Config", "T5EncoderModel", {"vocab_size": 256, "d_model": 64, "d_kv": 16, "d_ff": 128,
                                                  "num_layers": 2, "num_heads": 4}),
    "vit": ("ViTConfig", "ViTModel", {"image_size": 32, "patch_size": 8, "num_channels": 3, "hidden_size": 64,
                                      "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}),
    "whisper_encoder": ("WhisperConfig", "WhisperModel",
                        {"vocab_size": 256, "num_mel_bins": 16, "d_model": 64, "encoder_layers": 2, "decoder_layers": 1,
                         "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
                         "decoder_ffn_dim": 128, "max_source_positions": 32, "max_target_positions": 32,
                         "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0, "decoder_start_token_id": 0}),
}


def _cold(fn) -> float:
    """Seconds of ``fn()`` with an empty object cache."""
    saved = os.environ.get("MB_CACHE_DIR")
    d = tempfile.mkdtemp(prefix="mb-bench-build-")
    os.environ["MB_CACHE_DIR"] = d
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    finally:
        shutil.rmtree(d, ignore_errors=True)
        if saved is None:
            os.environ.pop("MB_CACHE_DIR", None)
        else:
            os.environ["MB_CACHE_DIR"] = saved


def hf_families() -> None:
    """Cold ``builder.build(DIR)`` of each family's tiny checkpoint, as a ratio to the 2-layer Llama recipe's."""
    import transformers

    llama = ["vocab_size=256", "hidden_size=64", "intermediate_size=128", "num_heads=4", "num_kv_heads=4",
             "head_dim=16", "num_layers=2"]
    _cold(lambda: builder.build(ROOT / "recipes" / "llama.yaml", llama))    # warm-up: imports, first compile
    base = _cold(lambda: builder.build(ROOT / "recipes" / "llama.yaml", llama))
    print(f"  llama recipe (2 layers, hidden 64): cold {base:.2f} s")
    for family, (cfg_cls, model_cls, fields) in HF_MODELS.items():
        folder = Path(tempfile.mkdtemp(prefix="mb-bench-hf-"))
        try:
            cfg = getattr(transformers, cfg_cls)(**fields)
            getattr(transformers, model_cls)(cfg).save_pretrained(str(folder))
            sec = _cold(lambda: builder.build(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(f"  {family}: build DIR cold {sec:.2f} s, {sec / base:.2f}x the llama recipe", flush=True)


COLUMNS = ["model", "run", "export", "select", "fuse", "legalize", "dce", "kernels", "compiled",
           "modules", "py codegen", "llvm opt", "llvm cg", "llvm wall", "bytecode", "total s", "cpu s"]


def _cells(row: dict, run: str) -> list[str]:
    p = row["passes"]
    return [row["model"], run, f"{row['export']:.2f}", f"{p.get('select_kernels', 0):.2f}",
            f"{p.get('fuse_ops', 0):.2f}", f"{p.get('legalize_ops', 0):.2f}",
            f"{p.get('dead_code_elimination', 0):.2f}", str(row["kernels"]), str(row["distinct"]),
            str(row["parts"]), f"{row['python_codegen']:.2f}", f"{row['llvm_optimize']:.2f}",
            f"{row['llvm_codegen']:.2f}", f"{row['llvm_wall']:.2f}", f"{row['bytecode']:.3f}",
            f"{row['total']:.2f}", f"{row['cpu']:.2f}"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="MiniLM and the 2-layer Llama only")
    ap.add_argument("--models", nargs="*", choices=sorted(MODELS), help="models to build")
    ap.add_argument("--repeat", type=int, default=1, help="builds per row; the fastest is shown")
    ap.add_argument("--threads", type=int, help="LLVM threads (sets MB_BUILD_THREADS)")
    ap.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    ap.add_argument("--hf", action="store_true", help="build DIR of each family's tiny checkpoint vs the Llama recipe")
    args = ap.parse_args(argv)
    if args.threads is not None:
        os.environ["MB_BUILD_THREADS"] = str(args.threads)
    from builder.codegen import build_threads

    if args.hf:
        print(f"CPU: {cpu_name()}, {os.cpu_count()} logical CPUs; LLVM threads: {build_threads()}")
        hf_families()
        return

    names = args.models or (list(QUICK) if args.quick else list(MODELS))
    cpu = cpu_name()
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
          "llvm wall: the LLVM phase's wall time; total: export + compile; cpu: this process's CPU seconds "
          "(all threads) during the build")


if __name__ == "__main__":
    main()

"""Time the issue's Conv1D row by itself (80 -> 384, kernel 3, padding 1; batch 1, 3000 frames), the Whisper
stem (that Conv1D + GELU; Conv1D 384 -> 384, kernel 3, stride 2, + GELU) and the whole
``recipes/whisper_tiny_encoder.yaml`` forward,
with the Conv1D GEMM lowering (:class:`builder.transform.ConvToGemm`, issue 15) and without it (the
reference loops of ``topi.conv1d``), interleaved run by run in one process.

    python benchmarks/bench_conv.py              # stem and encoder
    python benchmarks/bench_conv.py --stem       # the Conv1D and the stem only
    python benchmarks/bench_conv.py --kernels    # also the time of each kernel of the stem

Reported per row: median and best of ``--runs`` runs (ms) and, for the Conv1D and the stem, GFLOP/s (2 * MACs
of the convolutions: 0.553 and 1.88 GFLOP), against the float32 FMA peak measured in the same run on all the
pool's threads (``bench_mlp.compute_peak``: independent FMA chains; e.g. 200 GFLOP/s = 2 Zen 3
cores x 2 FMA ports x 8 lanes x 2 x ~3.1 GHz), or the one given by ``--peak`` (GFLOP/s).
On a shared machine take the best-of column (the median includes other processes' load).

The encoder is also timed against HF transformers' ``WhisperEncoder`` (torch, SDPA attention, the pool's
thread count) on the same weights when torch and transformers are installed (``--no-torch``: not), its
output checked against ours first. ``GOMP_SPINCOUNT=100000`` is set before torch is imported (as in
``bench_models.py``): its OpenMP threads would otherwise spin long after each call on the cores our next run
needs.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("GOMP_SPINCOUNT", "100000")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from host import cpu_name  # noqa: E402  (benchmarks/host.py)
import builder
from builder.transform import ConvToGemm, Sequential
from runtime.threadpool import get_num_threads

_compile = sys.modules["builder.compile"]   # the module (builder.compile is also the function)

STEM = """\
name: whisper_stem
model:
  layers:
    conv1: {type: Conv1D, in_channels: 80, out_channels: 384, kernel_size: 3, padding: 1}
    conv2: {type: Conv1D, in_channels: 384, out_channels: 384, kernel_size: 3, stride: 2, padding: 1}
functions:
  forward:
    inputs:
      input_features: {shape: [batch, 80, frames], dtype: float32}
    forward: |
      x = gelu(conv1(input_features))
      return permute_dims(gelu(conv2(x)), [0, 2, 1])
"""
STEM_FLOPS = 2 * 384 * 80 * 3 * 3000 + 2 * 384 * 384 * 3 * 1500
# the row by itself: "Conv1D 80 -> 384, k3, 3000 frames" (no activation; channels-first output)
CONV1 = """\
name: whisper_conv1
model:
  layers:
    conv1: {type: Conv1D, in_channels: 80, out_channels: 384, kernel_size: 3, padding: 1}
functions:
  forward:
    inputs:
      input_features: {shape: [batch, 80, frames], dtype: float32}
    forward: |
      return conv1(input_features)
"""
FLOPS = {"conv1": 2 * 384 * 80 * 3 * 3000, "stem": STEM_FLOPS}




def build(path: Path, gemm: bool, overrides=()):
    """The recipe (with ``overrides``) compiled with the default pipeline, or without :class:`ConvToGemm`."""
    original = _compile.default_pipeline
    if not gemm:
        def without():
            p = original()
            return Sequential([q for q in p.passes if not isinstance(q, ConvToGemm)], name=p.name)
        _compile.default_pipeline = without
    try:
        return builder.build(path, list(overrides))
    finally:
        _compile.default_pipeline = original


def kernel_times(m, x, runs: int) -> list[tuple[str, str, float]]:
    """``(kernel, family, median ms)`` of each kernel the forward calls, by wrapping the library's call."""
    from runtime import vm

    times = collections.defaultdict(list)
    original = vm.VirtualMachine._run

    def run(self, name, fn, args):
        real = self.lib.invoke   # every kernel call of the VM (and of lib.call) goes through it

        def invoke(entry, a, n_checked):
            t = time.perf_counter()
            real(entry, a, n_checked)
            times[entry.name].append(time.perf_counter() - t)

        self.lib.invoke = invoke
        self.kernel_runs = False   # each call through lib.invoke
        try:
            return original(self, name, fn, args)
        finally:
            del self.lib.invoke
            self.kernel_runs = True

    vm.VirtualMachine._run = run
    try:
        for _ in range(runs):
            m["forward"](x)
    finally:
        vm.VirtualMachine._run = original
    return [(k, m.exe.kernels.get(k, {}).get("kernel", "?"), float(np.median(v)) * 1e3) for k, v in times.items()]


def torch_encoder(m, threads: int):
    """HF transformers' ``WhisperEncoder`` with ``m``'s weights (the recipe's file names are HF's), as a
    callable ``f(x: np.ndarray) -> np.ndarray``; None (with the reason printed) when torch or
    transformers is missing."""
    try:
        import torch
        from transformers import WhisperConfig
        from transformers.models.whisper.modeling_whisper import WhisperEncoder
    except ImportError as err:
        print(f"torch anchor skipped: {err}")
        return None
    torch.set_num_threads(threads)
    v = m.recipe.vars
    cfg = WhisperConfig(num_mel_bins=v["num_mel_bins"], d_model=v["d_model"], encoder_layers=v["encoder_layers"],
                        encoder_attention_heads=v["encoder_attention_heads"], encoder_ffn_dim=v["encoder_ffn_dim"],
                        max_source_positions=v["max_source_positions"], attn_implementation="sdpa")
    enc = WhisperEncoder(cfg).eval()
    keys = m.file_keys()
    missing, unexpected = enc.load_state_dict({keys[n]: torch.from_numpy(np.array(a)) for n, a in m.params.items()},
                                              strict=False)
    if unexpected or missing:
        raise ValueError(f"the HF encoder did not take the weights: missing {missing}, unexpected {unexpected}")
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads): transformers WhisperEncoder, SDPA")

    def run(x):
        with torch.inference_mode():
            return enc(torch.from_numpy(x)).last_hidden_state.numpy()
    return run


def numpy_gemms(runs: int) -> float:
    """Best time (ms) of the stem's two GEMMs in numpy on columns made beforehand (no im2col, bias
    or GELU): a calibration of the machine's current speed, not the same work."""
    rng = np.random.default_rng(1)
    a1 = rng.standard_normal((3000, 240), dtype=np.float32)
    a2 = rng.standard_normal((1500, 1152), dtype=np.float32)
    w1 = rng.standard_normal((384, 240), dtype=np.float32)
    w2 = rng.standard_normal((384, 1152), dtype=np.float32)
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        a1 @ w1.T
        a2 @ w2.T
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stem", action="store_true", help="the Conv1D and the stem only (no encoder)")
    ap.add_argument("--kernels", action="store_true", help="per-kernel times of the stem")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--no-torch", action="store_true", help="no torch anchor for the encoder")
    ap.add_argument("--matmul-precision", nargs="+", default=[], choices=["high", "medium"],
                    help="also time ours at these matmul precisions (the GEMMs on AMX tiles where the CPU has them)")
    ap.add_argument("--peak", type=float, default=None,
                    help="float32 FMA peak, GFLOP/s (default: measured now, all threads)")
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}; batch 1, 3000 frames, float32")
    if args.peak is None:
        from bench_mlp import compute_peak   # benchmarks/bench_mlp.py

        peaks, desc = compute_peak()
        args.peak = max(peaks["fma_gflops"].values())
        print(f"peak: {desc}")
    x = np.random.default_rng(0).standard_normal((1, 80, 3000)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        stem = Path(tmp) / "whisper_stem.yaml"
        stem.write_text(STEM)
        conv1 = Path(tmp) / "whisper_conv1.yaml"
        conv1.write_text(CONV1)
        cases = [("conv1", conv1), ("stem", stem)] + (
            [] if args.stem else [("encoder", ROOT / "recipes" / "whisper_tiny_encoder.yaml")])
        for label, path in cases:
            models = {"loops": build(path, False), "gemm": build(path, True)}
            for prec in args.matmul_precision:
                models[f"gemm@{prec}"] = build(path, True, [f"matmul_precision={prec}"])
            fns = {k: m["forward"] for k, m in models.items()}
            for f in fns.values():
                f(x)
            ref = fns["loops"](x)
            for k in fns:
                if k.startswith("gemm"):   # medium: bfloat16 products, about 1e-2 of the largest output
                    tol = 3e-2 * float(np.abs(ref).max()) if k.endswith("@medium") else 1e-3
                    np.testing.assert_allclose(fns[k](x), ref, rtol=1e-3, atol=tol)
            anchor = None if label != "encoder" or args.no_torch else torch_encoder(models["gemm"], get_num_threads())
            if anchor is not None:
                np.testing.assert_allclose(anchor(x), fns["gemm"](x), rtol=1e-3, atol=1e-3)
                fns["torch"] = anchor
            runs = {k: [] for k in fns}
            for i in range(args.runs):
                for k, f in fns.items():
                    if k == "loops" and i >= max(2, args.runs // 4):
                        continue   # the loops take seconds: fewer runs
                    t = time.perf_counter()
                    f(x)
                    runs[k].append(time.perf_counter() - t)
            for k, ts in runs.items():
                med, best = float(np.median(ts)) * 1e3, min(ts) * 1e3
                extra = ""
                if label in FLOPS:
                    extra = (f"  {FLOPS[label] / best / 1e6:6.1f} GFLOP/s best, {FLOPS[label] / med / 1e6:6.1f} median "
                             f"({FLOPS[label] / best / 1e6 / args.peak:.0%} / "
                             f"{FLOPS[label] / med / 1e6 / args.peak:.0%} of {args.peak:.0f})")
                if k != "gemm" and "gemm" in runs:
                    extra += f"  ours (gemm) / {k}: {np.median(runs['gemm']) * 1e3 / med:.2f} (medians)"
                print(f"{label:8s} {k:11s} median {med:9.2f} ms  best {best:9.2f} ms{extra}")
            if label == "stem":
                print(f"{label:8s} numpy  best {numpy_gemms(args.runs):9.2f} ms  (its two GEMMs alone, OpenBLAS "
                      "sgemm: how fast this machine is now)")
            if label == "stem" and args.kernels:
                for name, fam, ms in kernel_times(models["gemm"], x, args.runs):
                    print(f"    {name:28s} {fam:14s} {ms:7.2f} ms")


if __name__ == "__main__":
    main()

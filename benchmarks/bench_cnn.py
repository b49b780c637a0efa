"""Time an imported CNN: ResNet-18 (He et al. 2016, torchvision's layer layout, written out here so that
torchvision is not needed) with seeded random weights and running statistics, brought in with
``from_fx`` and with ``from_exported_program`` (dynamic batch), against PyTorch eager (oneDNN) on the
same weights, interleaved run by run in one process; and its convolutions lowered to GEMMs
(:class:`builder.transform.ConvToGemm`) against the reference loops for one 3 x 3 layer.

    python benchmarks/bench_cnn.py                   # batch 1 and 4 at 224 x 224
    python benchmarks/bench_cnn.py --size 112 --batches 1
    python benchmarks/bench_cnn.py --kernels         # also where our time goes, per kernel group

Both runtimes get the same thread count (``--threads``, default 2). torch's OpenMP threads spin for
``GOMP_SPINCOUNT=100000`` iterations after a parallel region (set before torch is imported): libgomp's
default (300000) kept them spinning into our next call, while ``OMP_WAIT_POLICY=PASSIVE`` (no spinning)
made torch itself slower between its own ops (ResNet-18 batch 1: 22.0 -> 30.6 ms); ours spin only for
``MB_POOL_SPIN`` (the default, well under a millisecond); medians and bests over ``--runs`` rounds, ours / torch below 1
means ours is faster. Before timing the outputs are compared (max |ours - torch| over max |torch|).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
os.environ.setdefault("GOMP_SPINCOUNT", "100000")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_mlp import time_interleaved  # noqa: E402
from host import cpu_name  # noqa: E402  (benchmarks/host.py)


def resnet18(classes: int = 1000):
    """ResNet-18 as torchvision builds it (BasicBlock x [2, 2, 2, 2], 1 x 1 strided downsampling)."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(y)) + identity)

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            blocks, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*blocks)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            return self.fc(torch.flatten(self.avgpool(self.layers(x)), 1))

    torch.manual_seed(0)
    model = ResNet18()
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model.eval()


def kernel_profile(vm, exe, call, runs: int) -> list[tuple[str, float]]:
    """``(kernel group [family], ms per call)``, every kernel call timed (kernel runs off)."""
    lib = vm.lib
    fams = {name: meta.get("kernel", "?") for name, meta in exe.kernels.items()}
    acc: dict[str, float] = {}
    original = lib.invoke

    def invoke(entry, arrays, n_checked):
        t0 = time.perf_counter()
        original(entry, arrays, n_checked)
        key = f"{re.sub(r'[0-9]+$', '', entry.name)} [{fams.get(entry.name, '?')}]"
        acc[key] = acc.get(key, 0.0) + time.perf_counter() - t0

    lib.invoke, vm.kernel_runs = invoke, False
    try:
        for _ in range(runs):
            call()
    finally:
        lib.invoke, vm.kernel_runs = original, True
    return sorted(((k, v / runs * 1e3) for k, v in acc.items()), key=lambda kv: -kv[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=224, help="image height and width (default 224)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kernels", action="store_true", help="also time each kernel group of ours")
    args = ap.parse_args(argv)

    try:
        import torch
    except ImportError:
        print("bench_cnn needs torch (pip install -e '.[bench]')")
        return 1
    torch.set_num_threads(args.threads)
    os.environ["MB_NUM_THREADS"] = str(args.threads)
    import runtime
    from builder import compile as build
    from builder.frontend import from_exported_program, from_fx

    print(f"CPU: {cpu_name()}; {args.threads} threads; torch {torch.__version__}; "
          f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}", flush=True)
    model = resnet18()
    s = args.size
    t0 = time.perf_counter()
    exe_fx = build(from_fx(torch.fx.symbolic_trace(model), [(["batch", 3, s, s], "float32")]))
    t1 = time.perf_counter()
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(model, (torch.zeros(2, 3, s, s),), dynamic_shapes=({0: batch},))
    exe_ep = build(from_exported_program(ep))
    t2 = time.perf_counter()
    print(f"built: from_fx {t1 - t0:.1f} s, from_exported_program {t2 - t1:.1f} s", flush=True)
    vm_fx, vm_ep = runtime.VirtualMachine(exe_fx), runtime.VirtualMachine(exe_ep)

    rng = np.random.default_rng(0)
    rows = []
    for b in args.batches:
        x = rng.standard_normal((b, 3, s, s)).astype(np.float32)
        xt = torch.from_numpy(x)
        with torch.no_grad():
            want = model(xt).numpy()
        for name, vm in (("from_fx", vm_fx), ("from_exported_program", vm_ep)):
            err = float(np.abs(vm["main"](x) - want).max() / np.abs(want).max())
            print(f"batch {b} {name}: max |ours - torch| / max |torch| = {err:.1e}", flush=True)

        def ours():
            vm_fx["main"](x)

        def theirs():
            with torch.no_grad():
                model(xt)

        t_ours, t_torch = time_interleaved([ours, theirs], args.runs, 2)
        mo, mt = float(np.median(t_ours)), float(np.median(t_torch))
        rows.append((b, mo, min(t_ours), mt, min(t_torch)))
        if args.kernels:
            print(f"  where ours goes, batch {b}:")
            for k, ms in kernel_profile(vm_fx, exe_fx, ours, 3)[:10]:
                print(f"    {ms:8.2f} ms  {k}")

    gflop = 2 * 1.814e9 * (s / 224) ** 2    # ResNet-18's multiply-adds at 224 x 224, scaled by the area
    print(f"\nResNet-18 {s} x {s}, float32, {args.threads} threads ({cpu_name()}):")
    print(f"{'batch':>5}  {'ours ms':>9}  {'(best)':>8}  {'torch ms':>9}  {'(best)':>8}  {'ours/torch':>10}  {'ours GFLOP/s':>12}")
    for b, mo, bo, mt, bt in rows:
        print(f"{b:>5}  {mo * 1e3:9.2f}  {bo * 1e3:8.2f}  {mt * 1e3:9.2f}  {bt * 1e3:8.2f}  {mo / mt:10.2f}  "
              f"{gflop * b / mo / 1e9:12.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

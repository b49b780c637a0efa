"""Long fuzzing runs: ``python -m tests.fuzz --minutes 10 [--kinds recipe,override,...]``.

Kinds: ``recipe``, ``override``, ``weights``, ``exe``, ``resaved``, ``onnx`` (damaged inputs), ``onnx_diff``
(ONNX ops against onnxruntime), ``symbolic`` (symbolic-shape arithmetic in recipes), ``deep_onnx`` (nested,
wide, high-rank ONNX models), ``output_path`` (``--output`` / ``--save-params`` to every file type),
``many_overrides`` and ``tp_weights`` (two tensor-parallel ranks on different weights; needs mpirun, this run
only). Runs the fuzzers of :mod:`tests.fuzz.test_fuzz` round-robin with fresh random cases until the time is
up, never stopping at a problem, then prints the figures: cases per kind, outcomes, the largest peak
memory of a case, the slowest case, and every problem with its case (``--report FILE`` writes them
as JSON too). Exit status 1 when any problem was found. Run it from the repository root.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from . import onnx_diff as D
from . import strategies as S
from . import structures as X
from .cases import Fuzzing
from .harness import STATS


def _targets(fz: Fuzzing) -> dict:
    def recipe(case):
        fz.recipe(*case)

    def override(case):
        fz.override(*case)

    def weights(data):
        fz.weights(data.draw(S.damaged_safetensors(fz.good_weights)))

    def exe(data):
        fz.exe(data.draw(S.raw_damage(fz.good_exe[0])), exact=True)

    def resaved(data):
        changed, call = data.draw(S.resaved_damage(fz.load_good_exe))
        fz.exe(changed, exact=False, call=call)

    def onnx(case):
        fz.onnx(*case)

    def onnx_diff(case):
        fz.onnx_diff(case)

    def symbolic(case):
        fz.symbolic_recipe(*case)

    def deep_onnx(model):
        fz.deep_onnx(model)

    def output_path(target):
        fz.output_path(target, timeout=STRUCTURE_TIMEOUT)

    def many_overrides(case):
        fz.many_overrides(*case)

    def tp_weights(spec):
        fz.tp_weights(spec)

    return {"recipe": (recipe, S.recipe_mutants()), "override": (override, S.overrides()),
            "weights": (weights, st.data()), "exe": (exe, st.data()), "resaved": (resaved, st.data()),
            "onnx": (onnx, S.damaged_onnx()), "onnx_diff": (onnx_diff, D.diff_cases()),
            "symbolic": (symbolic, X.symbolic_recipes()), "deep_onnx": (deep_onnx, X.deep_onnx_models()),
            "output_path": (output_path, X.output_targets()), "many_overrides": (many_overrides, X.many_overrides()),
            "tp_weights": (tp_weights, X.tp_weights())}


#: Cases of a kind per round, as a share of ``--batch`` (the slow kinds take fewer: a tensor-parallel case
#: starts two processes under mpirun; the differential ONNX cases are quick and many).
BATCH_SHARE = {"onnx_diff": 3.0, "symbolic": 0.5, "deep_onnx": 0.5, "many_overrides": 0.25, "tp_weights": 0.1}
#: Wall-clock limit of one output-path case (a blocked FIFO is a hang; no need to wait the whole budget).
STRUCTURE_TIMEOUT = 30.0
KINDS = "recipe,override,weights,exe,resaved,onnx,onnx_diff,symbolic,deep_onnx,output_path,many_overrides,tp_weights"


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0, help="how long to run (default 10)")
    p.add_argument("--kinds", default=KINDS, help="comma-separated fuzzers (default: all)")
    p.add_argument("--batch", type=int, default=20, help="cases per fuzzer before moving to the next")
    p.add_argument("--report", metavar="FILE", help="also write the figures and problems as JSON")
    p.add_argument("--keep", metavar="DIR", help="copy the input file of every case with a problem into DIR")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mb-fuzz-") as tmp:
        fz = Fuzzing(Path(tmp), keep=args.keep)
        targets = _targets(fz)
        kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
        unknown = [k for k in kinds if k not in targets]
        if unknown:
            p.error(f"unknown fuzzer(s) {unknown}; valid: {', '.join(targets)}")
        deadline = time.monotonic() + args.minutes * 60
        try:
            while time.monotonic() < deadline:
                for kind in kinds:
                    if time.monotonic() >= deadline:
                        break
                    fn, strategy = targets[kind]
                    budget = settings(max_examples=max(1, round(args.batch * BATCH_SHARE.get(kind, 1.0))),
                                      deadline=None, database=None, derandomize=False, phases=[Phase.generate],
                                      suppress_health_check=list(HealthCheck))
                    try:
                        budget(given(strategy)(fn))()
                    except Exception as exc:  # noqa: BLE001 - a fuzzer's own bug must not end the run
                        STATS.problems.append({"kind": kind, "problems": [f"the fuzzer failed: {exc!r}"[:400]],
                                               "case": {}})
                    print(f"[{time.strftime('%H:%M:%S')}] {sum(STATS.cases.values())} cases, "
                          f"{len(STATS.problems)} problems", file=sys.stderr, flush=True)
        finally:
            fz.close()
    print(f"cases: {dict(STATS.cases)} ({sum(STATS.cases.values())} in {args.minutes:g} min)")
    for name, n in sorted(STATS.outcomes.items()):
        print(f"  {name}: {n}")
    print(f"largest peak memory of a case: {STATS.peak_kib / 1024:.0f} MiB; slowest case: {STATS.slowest_s:.1f} s")
    print(f"problems: {len(STATS.problems)}")
    for prob in STATS.problems:
        print(f"- {prob['kind']}: {prob['problems'][0][:400]}\n  case: {json.dumps(prob['case'])[:400]}")
    if args.report:
        Path(args.report).write_text(json.dumps({"cases": STATS.cases, "outcomes": STATS.outcomes,
                                                 "peak_kib": STATS.peak_kib, "slowest_s": STATS.slowest_s,
                                                 "problems": STATS.problems}, indent=1, default=str))
    return 1 if STATS.problems else 0


if __name__ == "__main__":
    sys.exit(main())

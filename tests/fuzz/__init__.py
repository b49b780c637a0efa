"""Fuzzers for everything untrusted that the project reads: recipes, ``KEY=VALUE`` overrides, safetensors
weights, saved executables and ONNX models; and for what it computes and writes from them.

Every case runs in a separate worker process (:mod:`tests.fuzz.worker`) under a timeout and an
address-space limit, and is judged by :mod:`tests.fuzz.harness`. Besides damaged inputs
(:mod:`tests.fuzz.strategies`) there are the kinds issue 40 found missing:

- :mod:`tests.fuzz.onnx_diff`: small random ONNX graphs of one or two ops (NaN, inf, -0.0, empty dims,
  integer extremes; opsets 10-19) computed by us and by onnxruntime, compared value by value;
- :mod:`tests.fuzz.structures`: symbolic-shape arithmetic in recipes, nested / wide / high-rank ONNX
  models, ``--output`` / ``--save-params`` to every file type, thousands of overrides with non-UTF-8
  bytes, and two tensor-parallel ranks on different weights (long runs only: mpirun).

The test suite runs a small, deterministic budget (``tests/fuzz/test_fuzz.py``; ``MB_FUZZ_SCALE=4`` runs
four times as many cases); longer random runs with figures::

    python -m tests.fuzz --minutes 10
"""

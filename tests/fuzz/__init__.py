"""Fuzzers for everything untrusted that the project reads: recipes, ``KEY=VALUE`` overrides, safetensors
weights, saved executables and ONNX models.

Every case runs in a separate worker process (:mod:`tests.fuzz.worker`) under a timeout and an
address-space limit, and is judged by :mod:`tests.fuzz.harness`. The test suite runs a small,
deterministic budget (``tests/fuzz/test_fuzz.py``; ``MB_FUZZ_SCALE=4`` runs four times as many cases);
longer random runs with figures::

    python -m tests.fuzz --minutes 10
"""

"""The thread pool and the object cache (never timed): kernels called from several Python threads,
``set_num_threads``' bounds, a cache hit and a corrupt entry, and the pool after ``fork``."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from builder.codegen import build
from runtime import threadpool

from helpers.linear_kernels import linear_func as _linear_func
from helpers.linear_cases import ROOT
from helpers.linear_cases import build_kernel as _build

pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/helpers/fixtures.py


def test_thread_pool_from_several_python_threads():
    """Kernels called concurrently from Python threads (regions then run serially on their
    callers) give the same results as one at a time."""
    f, _ = _linear_func(256, 300, "float32", "float32", ("linear", 0))
    _, lib = _build(f)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((300, 256), dtype=np.float32)
    xs = [rng.standard_normal((m, 256), dtype=np.float32) for m in (1, 4, 20, 33)]
    outs = [np.empty((x.shape[0], 300), np.float32) for x in xs]
    errors = []

    def work(i):
        try:
            for _ in range(20):
                lib["f"](xs[i], w, outs[i])
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for x, y in zip(xs, outs):
        np.testing.assert_allclose(y, x @ w.T, rtol=1e-4, atol=1e-4)


def test_set_num_threads_bounds():
    size = threadpool.pool_size()
    old = threadpool.set_num_threads(1)
    try:
        assert threadpool.get_num_threads() == 1
        threadpool.set_num_threads(10_000)
        assert threadpool.get_num_threads() == size
        with pytest.raises(ValueError):
            threadpool.set_num_threads(0)
    finally:
        threadpool.set_num_threads(old)


def test_object_cache_hit_and_corrupt_entry(tmp_path, monkeypatch):
    from builder.codegen import cache

    monkeypatch.setenv("MB_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("MB_CACHE", raising=False)
    f, _ = _linear_func(12, 7, "float32", "float32", ("linear", 0))
    first = build({"f": f})
    assert not first.cached
    second = build({"f": f})
    assert second.cached and second.object_code == first.object_code
    entries = list((tmp_path / "c").glob("*.mbo"))
    assert len(entries) == 1
    entries[0].write_bytes(entries[0].read_bytes()[:-10] + b"corrupted!")
    third = build({"f": f})
    assert not third.cached                 # ignored, rebuilt and rewritten
    assert build({"f": f}).cached
    x = np.ones((2, 12), np.float32)
    y = np.empty((2, 7), np.float32)
    third.load()["f"](x, np.ones((7, 12), np.float32), y)
    np.testing.assert_array_equal(y, 12.0)
    monkeypatch.setenv("MB_CACHE", "0")
    assert not build({"f": f}).cached
    assert cache.cache_dir() == tmp_path / "c"


def test_input_key_skips_the_ir_and_misses_on_any_change(tmp_path, monkeypatch):
    """A build seen before loads its object through the index entry without emitting IR; a tunable, a
    testing hook, another PrimFunc or a damaged index each make it emit again, and the result stays right."""
    import json

    from builder.codegen import cache
    from builder.codegen.kernels.linear.plan import TUNING

    monkeypatch.setenv("MB_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("MB_CACHE", raising=False)
    f, _ = _linear_func(12, 7, "float32", "float32", ("linear", 0))
    first = build({"f": f})
    assert not first.cached and first.stats["emit_seconds"] > 0
    (index,) = (tmp_path / "c").glob("*.mbi")
    second = build({"f": f})
    assert second.cached and second.stats["emit_seconds"] == 0 and second.object_code == first.object_code
    assert second.functions == json.loads(json.dumps(first.functions))
    assert second.stats["distinct"] == first.stats["distinct"] and second.target == first.target

    def emits(**kw) -> bool:
        lib = build({kw.get("name", "f"): kw.get("func", f)})
        x, w, y = np.ones((3, 12), np.float32), np.full((7, 12), 0.5, np.float32), np.empty((3, 7), np.float32)
        lib.load()[kw.get("name", "f")](x, w, y)
        np.testing.assert_array_equal(y, 6.0)
        return lib.stats["emit_seconds"] > 0

    monkeypatch.setitem(TUNING, "prefetch", TUNING["prefetch"] + 64)
    assert emits() and not emits()            # a new input key, then its own index entry
    hook = os.environ.get("MB_SIMD_OFF")             # the suite may run under a hook of its own (MB_SIMD_OFF=vnni)
    monkeypatch.setenv("MB_SIMD_OFF", ",".join(filter(None, [hook, "amx"])))
    assert emits()
    assert emits(name="g")                    # the symbol is part of the input
    if hook is None:
        monkeypatch.delenv("MB_SIMD_OFF")
    else:
        monkeypatch.setenv("MB_SIMD_OFF", hook)
    monkeypatch.setitem(TUNING, "prefetch", TUNING["prefetch"] - 64)
    assert not emits()
    for damage in (b"garbage", index.read_bytes()[:-20]):
        index.write_bytes(damage)
        assert emits() and not emits()
    entry = json.loads(index.read_bytes()[len(b"MBIDX1\n"):])
    entry["functions"]["f"]["params"][0]["name"] = "renamed"   # no longer what the object's manifest says
    index.write_bytes(b"MBIDX1\n" + json.dumps(entry).encode())
    assert emits()
    assert cache.load_index("0" * 64) is None


def test_pool_survives_fork():
    """After fork the child has no workers; parallel regions run on the caller."""
    code = (
        "import os, numpy as np\n"
        "from builder import te\nfrom builder.te import topi\nfrom builder.codegen import build\n"
        "x = te.placeholder((te.var('n'), 4096), 'float32', name='x')\n"
        "lib = build({'sm': te.create_prim_func([x, topi.softmax(x, -1)])}).load()\n"
        "X = np.ones((64, 4096), np.float32); Y = np.empty_like(X)\n"
        "lib['sm'](X, Y)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    lib['sm'](X, Y); os._exit(0 if abs(Y.sum() - 64) < 1e-3 else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('ok' if os.WEXITSTATUS(status) == 0 else 'bad')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"

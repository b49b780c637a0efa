"""Stretches of kernel calls run by one native call (:mod:`runtime.kernel_runs`): the same results as the
call-by-call steps (``vm.kernel_runs = False``) and as numpy in float64, with symbolic dims that change
between calls, reshapes of parameters and of intermediates, intermediates that are returned, buffers
reused by lifetime, errors that fall back to the steps, a second thread running the function meanwhile,
and the arena's offsets checked against the lifetimes they must respect."""
import threading

import numpy as np
import pytest

from builder import nn
from builder.nn import op, spec

RNG = np.random.default_rng(23)


class Chain(nn.Module):
    """``forward(x (b, n, 8), y (n, 8))`` -> (t, u, s): intermediates that live long (``a`` is read again
    at the end), a reshape of a parameter and of intermediates, a returned intermediate."""

    def __init__(self):
        self.w = nn.Parameter((8, 8), "float32")
        self.v = nn.Parameter((64,), "float32")

    def forward(self, x, y):
        a = op.matmul(x, self.w)                                     # (b, n, 8)
        b = op.concat([a, op.broadcast_to(op.unsqueeze(y, 0), a.shape)], dim=1)   # (b, 2n, 8)
        c = op.permute_dims(op.matmul(b, op.reshape(self.v, [8, 8])), [0, 2, 1])  # (b, 8, 2n)
        t = op.reshape(c, [a.shape[0], -1])                          # (b, 16n): returned
        d = op.matmul(op.permute_dims(c, [0, 2, 1]), self.w)         # (b, 2n, 8)
        s = op.sum(d, axis=[1]) + op.sum(a, axis=[1])                # a read again here
        u = op.reshape(d, [a.shape[0], a.shape[1] * 4, 4])
        return t, u, s


def reference(x, y, w, v):
    x, y, w, v = (t.astype(np.float64) for t in (x, y, w, v))
    a = x @ w
    b = np.concatenate([a, np.broadcast_to(y[None], a.shape)], axis=1)
    c = (b @ v.reshape(8, 8)).transpose(0, 2, 1)
    t = c.reshape(c.shape[0], -1)
    d = c.transpose(0, 2, 1) @ w
    s = d.sum(1) + a.sum(1)
    return t, d.reshape(d.shape[0], -1, 4), s


@pytest.fixture(scope="module")
def chain():
    m = Chain()
    w = {"w": RNG.standard_normal((8, 8)).astype("float32"), "v": RNG.standard_normal(64).astype("float32")}
    m.load_state_dict(w)
    f = m.jit(spec={"forward": {"x": spec.Tensor(["b", "n", 8], "float32"), "y": spec.Tensor(["n", 8], "float32")}})
    return f, w


def _runs(f, name="forward"):
    if name not in f.vm._plans:   # the plan is prepared by the first call (another worker may have made it)
        f[name](*_inputs(2, 4, 1))
    plan = f.vm._plans[name]
    return [s.kernel_run for s in plan.fast_steps or [] if hasattr(s, "kernel_run")]


def _inputs(b, n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((b, n, 8)).astype("float32"), rng.standard_normal((n, 8)).astype("float32")


def test_results_match_the_steps_and_numpy_as_dims_change(chain):
    f, w = chain
    kept = []
    for seed, (b, n) in enumerate([(2, 3), (2, 5), (1, 1), (3, 7), (2, 3), (1, 0)]):
        x, y = _inputs(b, n, seed)
        f.vm.kernel_runs = True
        fast = f["forward"](x, y)
        f.vm.kernel_runs = False
        slow = f["forward"](x, y)
        ref = reference(x, y, w["w"], w["v"])
        for got, want, ref_part in zip(fast, slow, ref):
            np.testing.assert_array_equal(got, want)
            np.testing.assert_allclose(got, ref_part, rtol=1e-5, atol=1e-4)
        kept.append((fast, ref))
    f.vm.kernel_runs = True
    runs = _runs(f)
    assert runs and max(r.n for r in runs) >= 3 and all(r.usable for r in runs)
    for fast, ref in kept:   # returned arrays (also views of intermediates) are never overwritten later
        for got, ref_part in zip(fast, ref):
            np.testing.assert_allclose(got, ref_part, rtol=1e-5, atol=1e-4)


def test_arena_offsets_respect_lifetimes(chain):
    f, _ = chain
    f["forward"](*_inputs(2, 4, 1))
    for run in _runs(f):
        spans = []
        for r, off in run.offsets.items():
            nbytes = int(np.prod(run.shapes[r])) * run.defs[r][2].itemsize
            spans.append((run.first[r], run.last.get(r, run.first[r]), off, off + nbytes))
        for i, (s1, e1, lo1, hi1) in enumerate(spans):
            assert hi1 <= run.arena.size
            for s2, e2, lo2, hi2 in spans[i + 1:]:
                if not (e1 < s2 or e2 < s1) and hi1 > lo1 and hi2 > lo2:   # alive together: apart in memory
                    assert hi1 <= lo2 or hi2 <= lo1


def test_wrong_inputs_raise_as_before(chain):
    f, _ = chain
    x, y = _inputs(2, 3, 4)
    with pytest.raises(ValueError, match="symbolic dim 'n'"):
        f["forward"](x, y[:2])
    with pytest.raises(ValueError, match="dtype"):
        f["forward"](x.astype("float64"), y)
    np.testing.assert_array_equal(f["forward"](x[..., ::-1].copy()[..., ::-1], y)[2],
                                  f["forward"](x, y)[2])   # a non-contiguous x: the same result


class Lookup(nn.Module):
    """take -> matmul -> reshape: the take kernel checks its indices natively."""

    def __init__(self):
        self.table = nn.Parameter((10, 4), "float32")
        self.w = nn.Parameter((4, 4), "float32")

    def forward(self, ids):
        h = op.matmul(op.take(self.table, ids, axis=0), self.w)
        return op.reshape(op.matmul(h, self.w), [-1])


def test_a_kernel_error_in_a_run_raises_as_the_steps_do():
    m = Lookup()
    table, w = RNG.standard_normal((10, 4)).astype("float32"), RNG.standard_normal((4, 4)).astype("float32")
    m.load_state_dict({"table": table, "w": w})
    f = m.jit(spec={"forward": {"ids": spec.Tensor(["n"], "int64")}})
    ids = np.array([3, 0, 9], np.int64)
    np.testing.assert_allclose(f["forward"](ids), (table[ids].astype(np.float64) @ w @ w).reshape(-1),
                               rtol=1e-5, atol=1e-5)
    assert _runs(f)
    messages = []
    for mode in (True, False):
        f.vm.kernel_runs = mode
        with pytest.raises(ValueError) as err:
            f["forward"](np.array([1, 10], np.int64))
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "range" in messages[0]


def test_a_second_thread_takes_the_steps_meanwhile(chain):
    f, w = chain
    cases = [_inputs(2, 3 + i % 4, i) for i in range(24)]
    errors = []

    def worker(part):
        try:
            for x, y in part:
                for got, ref in zip(f["forward"](x, y), reference(x, y, w["w"], w["v"])):
                    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
        except Exception as err:   # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(cases[i::3],)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_a_parameter_array_replaced_or_changed_in_place_is_seen(chain):
    """Parameters are checked once per array object: another array, or the same one with new values, is
    what the kernels read."""
    f, w = chain
    g = f.vm["forward"]   # inputs, then the parameters
    x, y = _inputs(2, 3, 9)
    w2 = RNG.standard_normal((8, 8)).astype("float32")
    for wv in (w["w"], w2, w["w"]):
        for part, ref in zip(g(x, y, wv, w["v"]), reference(x, y, wv, w["v"])):
            np.testing.assert_allclose(part, ref, rtol=1e-5, atol=1e-4)
    v = w["v"].copy()
    g(x, y, w2, v)
    v *= -2.0   # the same object, its values changed in place
    for part, ref in zip(g(x, y, w2, v), reference(x, y, w2, v)):
        np.testing.assert_allclose(part, ref, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="dtype"):
        g(x, y, w2, v.astype("float64"))


def test_a_damaged_stretch_never_takes_the_fast_path(chain):
    """A kernel that expects another dtype than the buffer a previous call of the stretch wrote, or reads a
    buffer before the call that writes it (what a damaged executable could say), leaves the stretch to
    the steps, which refuse it."""
    f, _ = chain
    run = max(_runs(f), key=lambda r: r.n)
    assert run.usable
    from runtime.kernel_runs import KernelRun

    items = [("call", c[1], c[2], c[3], [(np.dtype("float64"),) + o[1:] for o in c[4]]) for c in run.calls]
    damaged = KernelRun("forward", items, set(), run.stable, run.env_vars, [], run.pool, run.arena,
                        run.error_text)
    assert not damaged.usable and damaged.run([None] * 64, [], {}) is False
    backwards = KernelRun("forward", list(reversed(run.calls)), set(), run.stable, run.env_vars, [], run.pool,
                          run.arena, run.error_text)   # a call reads what a later one writes
    assert not backwards.usable

"""Shapes known only when the function runs: ``nn.op.nonzero`` and ``nn.op.repeat_interleave_indices`` (their
counts new symbolic dims the VM binds with ``match_shape``) and padding removal built on nonzero
(``unpad_input`` / ``pad_input``), against numpy; the text form round trip, saved executables, damaged bytecode
refused or stopped with a clear error, and results too large for memory refused before they are made."""
import copy

import numpy as np
import pytest

from builder import compile as build
from builder.ir import structural_equal
from builder.ir.parser import parse
from builder.nn import op
from helpers.functional import exported, jit
from runtime import Executable, VirtualMachine
from runtime.bytecode import validate_function

RNG = np.random.default_rng(31)


def nonzero_ref(x):
    return np.stack(np.nonzero(x)).astype(np.int64)


@pytest.mark.parametrize("shape, dtype", [((7,), "float32"), ((3, 5), "int64"), ((2, 3, 4), "bool"),
                                          ((4, 6), "int32")])
def test_nonzero_matches_numpy(shape, dtype):
    """(ndim, n) int64 indices in row-major order, for any dtype; none and all nonzero too."""
    dims = [f"d{i}" for i in range(len(shape))]
    f = jit(lambda x: op.nonzero(x), x=(dims, dtype))
    for density in (0.0, 0.4, 1.0):
        x = (RNG.random(shape) < density) * RNG.integers(1, 5, shape)
        x = x.astype(dtype)
        got = f(x)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, nonzero_ref(x))
    bigger = tuple(s + 2 for s in shape)
    x = (RNG.random(bigger) < 0.5).astype(dtype)
    np.testing.assert_array_equal(f(x), nonzero_ref(x))   # the same function, other symbolic sizes


def test_the_count_sizes_the_ops_after_it_on_every_call():
    """The count bound at run time feeds kernels (a gather, a fused multiply, a reduction over it): each
    call binds its own count, also when one call follows another with a different count."""
    def fn(x, mask):
        b, s, c = x.shape
        idx = op.reshape(op.nonzero(op.reshape(mask, [b * s])), [-1])
        rows = op.take(op.reshape(x, [b * s, c]), idx, axis=0) * 2.0
        return rows, op.sum(rows, axis=0)
    f = jit(fn, x=(["b", "s", 4], "float32"), mask=(["b", "s"], "int64"))
    for b, s, density in ((3, 5, 0.5), (2, 7, 1.0), (3, 5, 0.0), (1, 1, 1.0), (4, 9, 0.3)):
        x = RNG.standard_normal((b, s, 4)).astype(np.float32)
        mask = (RNG.random((b, s)) < density).astype(np.int64)
        rows, total = f(x, mask)
        want = x.reshape(b * s, 4)[mask.reshape(-1) != 0].astype(np.float64) * 2
        assert rows.shape == want.shape
        np.testing.assert_allclose(rows, want, rtol=1e-6)
        np.testing.assert_allclose(total, want.sum(0), rtol=1e-5, atol=1e-5)


def test_nonzero_prints_parses_and_runs_from_a_saved_executable(tmp_path):
    mod = exported(lambda x: op.take(x, op.reshape(op.nonzero(x), [-1]), axis=0), x=(["n"], "float32"))
    text = mod.script()
    assert "num_nonzero = T.int64()" in text and 'R.call_pure_packed("vm.builtin.nonzero"' in text
    again = parse(text)
    assert structural_equal(again, mod)
    exe = build(again)
    assert "match_shape" in exe.bytecode
    path = tmp_path / "nz.exe"
    exe.save(path)
    vm = VirtualMachine(Executable.load(path))
    x = np.array([0, 1.5, 0, -2, 3], np.float32)
    np.testing.assert_array_equal(vm["forward"](x), [1.5, -2, 3])


def test_nonzero_refuses_a_scalar():
    with pytest.raises(ValueError, match="at least one dim"):
        exported(lambda x: op.nonzero(x), x=((), "float32"))


@pytest.fixture(scope="module")
def gather_exe():
    mod = exported(lambda x: op.take(x, op.reshape(op.nonzero(x), [-1]), axis=0) + 1.0, x=(["n"], "float32"))
    return build(mod)


def _damaged(exe, edit):
    bad = copy.copy(exe)
    bad.functions = copy.deepcopy(exe.functions)
    edit(bad.functions["forward"]["instructions"])
    return bad


def test_damaged_match_shape_is_refused_or_stopped(gather_exe):
    """A match_shape that reads a register never written, or has no dims list, is refused when the
    executable is checked; one whose rank differs from its array's, or which comes after the first use of
    the dim it binds, stops the run with ValueError / KeyError naming the problem."""
    ins = gather_exe.functions["forward"]["instructions"]
    pos = next(i for i, x in enumerate(ins) if x[0] == "match_shape")
    fn = gather_exe.functions["forward"]
    kernels = gather_exe.kernels

    def check(edit):
        bad = copy.deepcopy(fn)
        edit(bad["instructions"])
        validate_function("forward", bad, kernels, len(gather_exe.constants))

    with pytest.raises(ValueError, match="read before it is written"):
        check(lambda b: b.__setitem__(pos, ["match_shape", fn["num_registers"] - 1, b[pos][2]]))
    with pytest.raises(ValueError, match="match_shape dims must be a list"):
        check(lambda b: b.__setitem__(pos, ["match_shape", b[pos][1], 7]))
    x = np.array([1.0, 0.0, 2.0], np.float32)
    wrong_rank = _damaged(gather_exe, lambda b: b.__setitem__(pos, ["match_shape", b[pos][1], [b[pos][2][1]]]))
    with pytest.raises(ValueError, match="runtime result has shape"):
        VirtualMachine(wrong_rank)["forward"](x)
    conflicting = _damaged(gather_exe, lambda b: b.__setitem__(pos, ["match_shape", b[pos][1], [2, b[pos][2][1]]]))
    with pytest.raises(ValueError, match="dim 0 must be 2"):
        VirtualMachine(conflicting)["forward"](x)
    late = _damaged(gather_exe, lambda b: b.insert(len(b) - 2, b.pop(pos)))   # after the gather using it
    with pytest.raises((ValueError, KeyError), match="num_nonzero|not bound"):
        VirtualMachine(late)["forward"](x)


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_unpad_and_pad_input_match_numpy(dtype):
    """unpad_input gathers the rows the mask keeps (row-major), pad_input puts them back with zeros at the
    padding; a sequence of padding only and a batch without padding included."""
    def fn(x, mask):
        packed, idx = op.unpad_input(x, mask)
        return packed, idx, op.pad_input(packed, idx, x.shape[0], x.shape[1])
    f = jit(fn, x=(["b", "s", 3, 2], dtype), mask=(["b", "s"], "int64"))
    for b, s in ((3, 6), (1, 4), (5, 2)):
        x = (RNG.standard_normal((b, s, 3, 2)) * 10).astype(dtype)
        mask = (RNG.random((b, s)) < 0.6).astype(np.int64)
        mask[0] = 0
        for m in (mask, np.ones_like(mask)):
            packed, idx, padded = f(x, m)
            keep = m.reshape(-1) != 0
            np.testing.assert_array_equal(idx, np.flatnonzero(keep))
            np.testing.assert_array_equal(packed, x.reshape(b * s, 3, 2)[keep])
            np.testing.assert_array_equal(padded, x * m[:, :, None, None].astype(dtype))


def test_unpad_and_pad_input_refuse_what_does_not_fit():
    with pytest.raises(ValueError, match="padding mask"):
        exported(lambda x, m: op.unpad_input(x, m), x=((2, 3, 4), "float32"), m=((2, 3), "float32"))
    with pytest.raises(ValueError, match="must start with attention_mask"):
        exported(lambda x, m: op.unpad_input(x, m), x=((2, 4, 4), "float32"), m=((2, 3), "int64"))
    with pytest.raises(ValueError, match="1-D with one index per packed row"):
        exported(lambda p, i: op.pad_input(p, i, 2, 3), p=((4, 5), "float32"), i=((4, 1), "int64"))


def test_repeat_interleave_indices_match_numpy_and_refuse_bad_repeats():
    """Index i repeated repeats[i] times (the length bound when the function runs), a gather with them is
    numpy.repeat; a negative repeat is a ValueError and a total beyond the memory available a
    MemoryLimitError, before anything that large is made."""
    from runtime.memory import MemoryLimitError

    f = jit(lambda x, r: (op.repeat_interleave_indices(r), op.take(x, op.repeat_interleave_indices(r), axis=1)),
            x=((2, "n", 3), "float32"), r=(["n"], "int32"))
    x = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    for r in ([2, 0, 3, 1], [0, 0, 0, 0], [1, 1, 1, 1]):
        r = np.array(r, np.int32)
        idx, y = f(x, r)
        np.testing.assert_array_equal(idx, np.repeat(np.arange(4), r))
        np.testing.assert_array_equal(y, np.repeat(x, r, axis=1))
    with pytest.raises(ValueError, match="repeats must be non-negative"):
        f(x, np.array([1, -1, 2, 0], np.int32))
    with pytest.raises(MemoryLimitError):
        f(x, np.array([2**31 - 1] * 4, np.int32))
    with pytest.raises(ValueError, match="1-D integer tensor"):
        exported(lambda r: op.repeat_interleave_indices(r), r=(["n"], "float32"))


def test_nonzero_checks_the_memory_its_indices_need(monkeypatch):
    """The indices take 8 bytes per dim per nonzero element (64 times a bool input of 8 dims): above the
    checked size they are counted and checked against the memory available before they are made."""
    import runtime.memory
    import runtime.builtins
    from runtime.memory import MemoryLimitError

    f = jit(lambda x: op.nonzero(x), x=(["a", "b"], "bool"))
    x = np.zeros((8, 8), bool)
    x[:, :3] = True                                  # 24 indices: 384 bytes
    monkeypatch.setattr(runtime.builtins, "_CHECKED_ALLOCATION", 64)
    monkeypatch.setattr(runtime.memory, "available_memory", lambda: 400)
    np.testing.assert_array_equal(f(x), nonzero_ref(x))
    x[:, 3] = True                                   # 32 indices: 512 bytes
    with pytest.raises(MemoryLimitError, match=r"nonzero: the indices of a \(8, 8\) array"):
        f(x)


@pytest.mark.parametrize("ordered", [True, False])
def test_unique_matches_numpy(ordered):
    """Values ascending or in first-occurrence order, first indices, inverse indices and counts (a count
    bound at run time), for ints and floats with repeated NaNs (one value, as numpy), on other sizes."""
    f = jit(lambda x: op.unique(x, sorted=ordered), x=(["a", 3], "float32"))
    for x in (np.array([[3, 1, 3], [2, 1, 5]], np.float32), np.full((4, 3), 7, np.float32),
              np.array([[np.nan, 1, np.nan]], np.float32), np.zeros((0, 3), np.float32)):
        values, first, inverse, counts = f(x)
        flat = x.reshape(-1)
        want_v, want_first, want_inv, want_c = np.unique(flat, return_index=True, return_inverse=True,
                                                         return_counts=True)
        if not ordered:
            order = np.argsort(want_first, kind="stable")
            want_v, want_first, want_c = want_v[order], want_first[order], want_c[order]
            want_inv = np.argsort(order)[want_inv.reshape(-1)]
        np.testing.assert_array_equal(values, want_v)
        np.testing.assert_array_equal(first, want_first)
        np.testing.assert_array_equal(inverse, want_inv.reshape(-1))
        np.testing.assert_array_equal(counts, want_c)
        np.testing.assert_array_equal(values[inverse], flat)   # the inverse rebuilds x

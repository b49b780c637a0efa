"""The VM's pool of large output buffers (``runtime.memory.BufferPool``): buffers are reused once no
array views them, never while one does (a returned output, a view kept by the caller), also within
one call (the plan drops registers after their last use); results are checked against numpy."""
import numpy as np
import pytest

from builder import compile as build
from builder import te
from builder.ir import BlockBuilder, TensorStructInfo, Var
from builder.ir import relax as rx
from builder.ir.expr import Var as SymVar
from runtime import VirtualMachine
from runtime.memory import BufferPool

F32 = np.dtype("float32")


def test_small_arrays_are_not_pooled():
    pool = BufferPool(min_bytes=4096)
    a = pool.empty((10, 10), F32)
    assert a.shape == (10, 10) and a.dtype == F32 and a.flags.c_contiguous and a.flags.writeable
    assert pool.in_use == 0 and a.base is None


@pytest.mark.parametrize("shape,dtype", [((1000, 33), "float32"), ((7, 5, 1201), "float16"), ((65537,), "int8"),
                                         ((3, 0, 9000), "float32")])
def test_arrays_are_aligned_and_shaped(shape, dtype):
    pool = BufferPool(min_bytes=1)
    a = pool.empty(shape, np.dtype(dtype))
    assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.c_contiguous
    assert a.size == 0 or a.ctypes.data % BufferPool.ALIGN == 0
    a[...] = 3
    assert (a == 3).all()


def test_a_buffer_is_reused_once_nothing_views_it():
    pool = BufferPool(min_bytes=1)
    a = pool.empty((4096,), F32)
    addr = a.ctypes.data
    b = a.reshape(64, 64)[1:, 3:]   # a view of a view
    del a
    c = pool.empty((4096,), F32)
    assert c.ctypes.data != addr   # b still views the first buffer
    b[...] = 1.0
    c[...] = 2.0
    assert (b == 1.0).all()
    del b
    d = pool.empty((4000,), F32)   # same size class
    assert d.ctypes.data == addr
    assert pool.in_use == 2


def test_size_classes_bound_the_waste():
    caps = [BufferPool.capacity(n) for n in range(1, 70000)]
    for n, cap in zip(range(1, 70000), caps):
        assert n <= cap <= max(n * 9 // 8 + 1, 16)
    assert caps == sorted(caps)
    assert len(set(BufferPool.capacity(n) for n in range((1 << 20) + 1, (1 << 21) + 1))) == 8


def test_free_bytes_are_bounded_oldest_dropped():
    pool = BufferPool(min_bytes=1, max_free_bytes=3 * 4096)
    arrays = [pool.empty((1024,), F32) for _ in range(5)]
    first = arrays[0].ctypes.data
    last = arrays[-1].ctypes.data
    del arrays
    pool.collect()
    assert pool.in_use == 0 and pool.free_bytes == 3 * 4096
    again = [pool.empty((1024,), F32) for _ in range(3)]
    addrs = {a.ctypes.data for a in again}
    assert last in addrs and first not in addrs
    assert pool.free_bytes == 0
    pool.clear()
    assert pool.free_bytes == 0 and pool.in_use == 3


def te_scale(A, s):
    return te.compute(A.shape, lambda *i: A(*i) * s + 1.0, name="scale")


@pytest.fixture(scope="module")
def chain_exe():
    """main(A (n, 512)) = (x - A, x) with x = ((A*2+1)*3+1)*0.5+1: large intermediates in a chain,
    each read once, and a result that is one of them."""
    n = SymVar("n", "int64")
    A = Var("A", TensorStructInfo((n, 512), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [A]):
        with bb.dataflow():
            x = bb.emit_te(te_scale, A, 2.0)
            x = bb.emit_te(te_scale, x, 3.0)
            x = bb.emit_te(te_scale, x, 0.5)
            y = bb.emit_te(te_sub, x, A)
            gv = bb.emit_output(rx.Tuple([y, x]))
        bb.emit_func_output(gv)
    return build(bb.get())


def te_sub(X, Y):
    return te.compute(X.shape, lambda i, j: X[i, j] - Y[i, j], name="sub")


def chain_ref(a):
    x = ((a.astype(np.float64) * 2 + 1) * 3 + 1) * 0.5 + 1
    return x - a, x


def test_vm_reuses_buffers_within_and_across_calls(chain_exe):
    vm = VirtualMachine(chain_exe)
    rng = np.random.default_rng(0)
    kept = []
    for n in (300, 300, 290, 301, 64):   # 600 KiB outputs; 290 / 301 rows stay in one size class
        a = rng.standard_normal((n, 512)).astype("float32")
        y, x = vm["main"](a)
        ry, rx_ = chain_ref(a)
        np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(x, rx_, rtol=1e-5, atol=1e-5)
        kept.append((y, x, ry, rx_))
    # the outputs of every call are intact: no later call wrote into a buffer they view
    for y, x, ry, rx_ in kept:
        np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(x, rx_, rtol=1e-5, atol=1e-5)
    del kept, y, x
    vm.pool.collect()
    assert vm.pool.in_use == 0
    # with the outputs dropped, one call allocates nothing new: the first intermediate's buffer is
    # free again by the third kernel (its register is dropped after its last read)
    a = rng.standard_normal((300, 512)).astype("float32")
    vm["main"](a)
    vm.pool.collect()
    free = vm.pool.free_bytes
    buffers = {id(b) for b in vm.pool._free_order}   # ids: a reference would keep them busy
    for _ in range(3):
        y, x = vm["main"](a)
        del y, x
        vm.pool.collect()
        assert vm.pool.free_bytes == free
        assert {id(b) for b in vm.pool._free_order} == buffers
    assert vm.pool.in_use == 0


def test_one_call_reuses_the_buffers_of_dead_intermediates(chain_exe):
    """Four outputs of 600 KiB, two of them returned: the first intermediate is dead after the
    second kernel and its buffer holds the third output; the second's holds the fourth."""
    vm = VirtualMachine(chain_exe)
    a = np.random.default_rng(1).standard_normal((300, 512)).astype("float32")
    y, x = vm["main"](a)
    vm.pool.collect()
    assert vm.pool.in_use == 2 and vm.pool.free_bytes == 0
    ry, rx_ = chain_ref(a)
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x, rx_, rtol=1e-5, atol=1e-5)


def test_threads_sharing_a_vm_never_share_a_buffer(chain_exe):
    """Two Python threads calling one VM (one pool): every result is its own input's."""
    import threading

    vm = VirtualMachine(chain_exe)
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(40):
                a = rng.standard_normal((int(rng.integers(250, 320)), 512)).astype("float32")
                y, x = vm["main"](a)
                ry, rx_ = chain_ref(a)
                np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(x, rx_, rtol=1e-5, atol=1e-5)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (11, 12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]

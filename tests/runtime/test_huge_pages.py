"""Large buffers backed by transparent huge pages (``runtime.memory.huge_page_buffer``) and the move of
parameters and constants into them (``move_to_huge_pages``): values, shapes, dtypes and flags kept,
64-byte alignment, originals released, the pool's reuse rules unchanged, the fallbacks where huge
pages are not offered or memory is short. Where this kernel offers them, the mapping's advice is read
back from ``/proc/self/smaps`` (``THPeligible``)."""
import gc
import weakref

import numpy as np
import pytest

import runtime.memory as memory
from runtime.memory import HUGE_PAGE, BufferPool, huge_page_buffer, move_to_huge_pages

OFFERED = memory._huge_pages_offered()
needs_thp = pytest.mark.skipif(not OFFERED, reason="this kernel offers no transparent huge pages on request")


@pytest.fixture
def no_thp(monkeypatch):
    monkeypatch.setattr(memory, "_THP", [False])


def _smaps_field(addr: int, field: str) -> str | None:
    """``field`` of the /proc/self/smaps mapping holding ``addr``."""
    inside = False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and line.startswith(field + ":"):
                return line.split()[1]
    return None


@needs_thp
@pytest.mark.parametrize("nbytes", [HUGE_PAGE, 3 * HUGE_PAGE + 4096 + 17])
def test_buffer_is_aligned_advised_and_writeable(nbytes):
    buf = huge_page_buffer(nbytes)
    assert buf.dtype == np.uint8 and buf.shape == (nbytes,) and buf.flags.writeable and buf.flags.c_contiguous
    assert buf.ctypes.data % HUGE_PAGE == 0
    buf[:] = 7
    buf[-1] = 9
    assert int(buf[:-1].sum(dtype=np.int64)) == 7 * (nbytes - 1) and buf[-1] == 9
    eligible = _smaps_field(buf.ctypes.data, "THPeligible")     # (Linux >= 5.0 reports it)
    assert eligible in (None, "1"), f"the buffer's mapping is not eligible for huge pages: {eligible}"
    assert memory._in_huge_pages(buf) and memory._in_huge_pages(buf[5:].view(np.int8))


def test_small_or_unoffered_buffers_are_plain(no_thp):
    for n in (0, 100, HUGE_PAGE, 5 * HUGE_PAGE):
        buf = huge_page_buffer(n)
        assert buf.shape == (n,) and buf.flags.owndata and not memory._in_huge_pages(buf)


def test_below_a_huge_page_is_plain():
    buf = huge_page_buffer(HUGE_PAGE - 1)
    assert buf.flags.owndata and not memory._in_huge_pages(buf)


def _params(rng):
    return {"w": rng.standard_normal((700, 1025)).astype(np.float32),              # 2.7 MiB
            "s": rng.standard_normal((300, 7)).astype(np.float16),
            "q": rng.integers(0, 2**32, (64, 33, 16), dtype=np.uint64).astype(np.uint32),
            "fortran": np.asfortranarray(rng.standard_normal((50, 60))),
            "empty": np.zeros((3, 0, 5), np.int8),
            "name": "not an array", "objects": np.array([None, 1], dtype=object)}


@needs_thp
def test_move_keeps_values_shapes_dtypes_and_flags():
    rng = np.random.default_rng(0)
    params = _params(rng)
    params["s"].flags.writeable = False
    ref = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in params.items()}
    originals = {k: weakref.ref(v) for k, v in params.items() if isinstance(v, np.ndarray) and k != "objects"}
    objects = params["objects"]
    move_to_huge_pages(params)
    gc.collect()
    for k, v in params.items():
        if k == "name":
            assert v == "not an array"
            continue
        if k == "objects":
            assert v is objects     # object arrays stay
            continue
        assert memory._in_huge_pages(v), k
        assert v.shape == ref[k].shape and v.dtype == ref[k].dtype and v.flags.c_contiguous
        np.testing.assert_array_equal(v, ref[k])
        assert v.ctypes.data % memory.ARRAY_ALIGN == 0
        assert originals[k]() is None, f"the original of {k} is still alive"
    assert not params["s"].flags.writeable and params["w"].flags.writeable
    params["w"][0, 0] = 5.0         # the copies are independent of each other
    assert params["w"][0, 0] == 5.0 and params["q"].reshape(-1)[0] == ref["q"].reshape(-1)[0]
    first = {k: v.ctypes.data for k, v in params.items() if isinstance(v, np.ndarray)}
    move_to_huge_pages(params)      # already there: nothing moves
    assert first == {k: v.ctypes.data for k, v in params.items() if isinstance(v, np.ndarray)}


@needs_thp
def test_one_copy_for_an_array_under_two_keys_and_lists():
    a = np.arange(HUGE_PAGE // 4, dtype=np.float32)
    d = {"tied.a": a, "tied.b": a}
    move_to_huge_pages(d)
    assert d["tied.a"] is d["tied.b"] and memory._in_huge_pages(d["tied.a"])
    np.testing.assert_array_equal(d["tied.a"], a)
    consts = [np.ones((1024, 1024), np.float32), np.int64(3), np.arange(5)]
    move_to_huge_pages(consts)
    assert memory._in_huge_pages(consts[0]) and memory._in_huge_pages(consts[2]) and consts[1] == 3
    np.testing.assert_array_equal(consts[2], np.arange(5))


@needs_thp
def test_move_packs_into_bounded_chunks(monkeypatch):
    monkeypatch.setattr(memory, "MOVE_CHUNK", 3 * HUGE_PAGE)
    arrays = [np.full(HUGE_PAGE // 4, i, np.float32) for i in range(7)]
    move_to_huge_pages(arrays)
    roots = [id(memory._root(a)) for a in arrays]
    assert all(memory._in_huge_pages(a) for a in arrays)
    assert roots[0] == roots[1] == roots[2] != roots[3] == roots[4] == roots[5] != roots[6]   # 3 per chunk
    for i, a in enumerate(arrays):
        assert (a == i).all()
    small = [np.full(HUGE_PAGE // 8, i, np.float32) for i in range(6)]    # half a huge page each
    move_to_huge_pages(small)
    assert len({id(memory._root(a)) for a in small}) == 1                 # 3 MiB: one chunk


def test_move_is_skipped_when_memory_is_short_or_pages_unoffered(monkeypatch, no_thp):
    params = {"w": np.ones((1024, 1024), np.float32)}
    w = params["w"]
    move_to_huge_pages(params)
    assert params["w"] is w
    monkeypatch.setattr(memory, "_THP", [True])
    monkeypatch.setattr(memory, "available_memory", lambda: HUGE_PAGE)
    move_to_huge_pages(params)
    assert params["w"] is w


def test_a_failed_mapping_leaves_the_arrays_and_the_buffer_is_plain(monkeypatch):
    """When the mapping cannot be made (an address-space limit, no memory), the move keeps the arrays as
    they are, raising nothing, and huge_page_buffer returns np.empty's memory."""
    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(memory, "_THP", [True])
    monkeypatch.setattr(memory, "_HugePageMapping", refuse)
    params = {"w": np.ones((1024, 1024), np.float32), "b": np.arange(10)}
    before = dict(params)
    move_to_huge_pages(params)
    assert all(params[k] is before[k] for k in params)
    buf = huge_page_buffer(3 * HUGE_PAGE)
    assert buf.shape == (3 * HUGE_PAGE,) and buf.flags.owndata


def test_below_one_huge_page_nothing_moves():
    params = {"a": np.ones(1000, np.float32), "b": np.ones(2000, np.int8)}
    before = dict(params)
    move_to_huge_pages(params)
    assert all(params[k] is before[k] for k in params)


@needs_thp
def test_pool_reuses_huge_page_buffers_only_when_unreferenced():
    pool = BufferPool(min_bytes=1)
    a = pool.empty((1024, 1024), np.dtype("float32"))       # 4 MiB: from a huge-page buffer
    assert memory._in_huge_pages(a) and a.ctypes.data % BufferPool.ALIGN == 0
    addr = a.ctypes.data
    view = a.reshape(2048, 512)[3:, 1:]                      # a view of a view keeps it in use
    del a
    b = pool.empty((1024, 1024), np.dtype("float32"))
    assert b.ctypes.data != addr
    del view
    c = pool.empty((1024, 1024), np.dtype("float32"))
    assert c.ctypes.data == addr
    assert b.ctypes.data != c.ctypes.data


@needs_thp
def test_model_parameters_loaded_weights_and_executable_constants_move(tmp_path):
    from builder.build_model import build
    from runtime import Executable, load_params

    m = build("recipes/llama_mlp.yaml", ["dtype=float32", "hidden_size=512", "intermediate_size=4096",
                                         "quantization=q4f16_1"])     # 3 MiB of packed 4-bit weights
    params = m.params
    assert all(memory._in_huge_pages(params[n]) for n in m.param_names)
    x = np.random.default_rng(1).standard_normal((3, 512)).astype(m.spec["forward"]["x"].dtype)
    y = m["forward"](x)
    # the kernels read the moved copies: the same function on plain copies of them gives the same values
    plain = [np.array(params[n], copy=True) for n in m.param_names]
    assert not any(memory._in_huge_pages(p) for p in plain)
    np.testing.assert_array_equal(m.vm["forward"](x, *plain), y)

    path = tmp_path / "mlp.safetensors"
    m.save_params(path)
    loaded = load_params(path, {n: (s, d) for n, s, d in m.param_specs})
    assert all(memory._in_huge_pages(loaded[n]) for n in m.param_names)
    for n in m.param_names:
        np.testing.assert_array_equal(loaded[n], params[n])

    const = np.random.default_rng(2).standard_normal((1024, 1024)).astype(np.float32)
    exe = Executable({}, {}, b"", [const])
    exe.save(tmp_path / "c.mbx")
    back = Executable.load(tmp_path / "c.mbx")
    assert memory._in_huge_pages(back.constants[0]) and back.constants[0].flags.writeable
    np.testing.assert_array_equal(back.constants[0], const)

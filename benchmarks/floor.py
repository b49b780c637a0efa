"""The streaming-read floor of this machine: the fastest way any program here can read a large
buffer once, measured (issue 15, "a floor that no program beats").

:func:`probe` times variants of a plain sum over a buffer much larger than the caches and
returns each one's GB/s; the best is the floor a memory-bound kernel is held to. The variants:

* JIT-compiled sum kernels written in LLVM IR here (:func:`sum_ir`, compiled with llvmlite for
  the host CPU, no optimization passes, so the loop runs as written): 256-bit loads (and 512-bit
  where the host has AVX-512F), 1, 4 or 8 independent vector accumulators, with and without
  software prefetch (``llvm.prefetch`` a fixed distance ahead, one per 64-byte line), on one
  thread and on one thread per core (each thread sums its own contiguous part; ctypes releases
  the GIL);
* each on an ordinary numpy buffer (numpy itself advises huge pages for large arrays on
  Linux), on a private ``mmap`` buffer aligned to 2 MiB and advised ``MADV_HUGEPAGE``
  (transparent huge pages; skipped with a note where the kernel or Python does not offer it)
  and on one advised ``MADV_NOHUGEPAGE`` (4 KiB pages only); how much of each buffer the
  kernel backed with huge pages is read back from ``/proc/self/smaps`` and printed;
* anchors from other programs: numpy's ``add.reduce`` and numpy's matrix @ vector (OpenBLAS's
  GEMV), on the same buffers.

* the same read with 0-24 vector FMAs per line (:func:`loaded_ir`, one thread per core), which
  measures how the read falls when the cores also compute: the bound of a GEMV that decodes
  its weights.

The caller (``bench_mlp.py``) adds its own row-sum kernel built by this project's compiler.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time

import numpy as np

LINE = 64


def _close_loop(vty: str, step: int, accs: list[str]) -> tuple[list[str], str]:
    """The probes' loop back edge (``%i`` up by ``step`` while below ``%n``) and, after it, the
    sum of the ``vty`` accumulators ``accs``: ``(IR lines, the sum's name)``."""
    lines = [f"  %i1 = add i64 %i, {step}", "  %more = icmp ult i64 %i1, %n",
             "  br i1 %more, label %loop, label %exit", "exit:"]
    prev = accs[0]
    for j, a in enumerate(accs[1:], 1):
        lines.append(f"  %s{j} = fadd {vty} {prev}, {a}")
        prev = f"%s{j}"
    return lines, prev


def sum_ir(name: str, lanes: int, accs: int, prefetch: int, locality: int = 3) -> str:
    """LLVM IR of ``float name(ptr p, i64 n)``: the sum of ``n`` float32 values at ``p`` (``n``
    a multiple of ``lanes * accs``) with ``accs`` independent ``<lanes x float>`` accumulators
    and, when ``prefetch`` > 0, one ``llvm.prefetch`` (read, temporal ``locality`` 3: into L1,
    2: into L2; data cache) per 64-byte line, ``prefetch`` bytes ahead of the loads. All lanes
    are added at the end so no load is dead."""
    vty = f"<{lanes} x float>"
    step = lanes * accs
    lines = [f"define float @{name}(ptr %p, i64 %n) {{", "entry:", "  br label %loop", "loop:",
             "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    lines += [f"  %a{j} = phi {vty} [zeroinitializer, %entry], [%b{j}, %loop]" for j in range(accs)]
    for j in range(accs):
        lines += [f"  %o{j} = add i64 %i, {j * lanes}",
                  f"  %q{j} = getelementptr float, ptr %p, i64 %o{j}",
                  f"  %v{j} = load {vty}, ptr %q{j}, align {lanes * 4}",
                  f"  %b{j} = fadd {vty} %a{j}, %v{j}"]
    if prefetch:
        for k in range(max(1, step * 4 // LINE)):
            lines += [f"  %fo{k} = add i64 %i, {(prefetch + k * LINE) // 4}",
                      f"  %f{k} = getelementptr float, ptr %p, i64 %fo{k}",
                      f"  call void @llvm.prefetch.p0(ptr %f{k}, i32 0, i32 {locality}, i32 1)"]
    tail, prev = _close_loop(vty, step, [f"%b{j}" for j in range(accs)])
    lines += tail
    lines.append(f"  %e0 = extractelement {vty} {prev}, i32 0")
    for k in range(1, lanes):
        lines += [f"  %x{k} = extractelement {vty} {prev}, i32 {k}", f"  %e{k} = fadd float %e{k - 1}, %x{k}"]
    lines += [f"  ret float %e{lanes - 1}", "}"]
    return "\n".join(lines) + "\n"


def loaded_ir(name: str, lanes: int, fmas: int, prefetch: int) -> str:
    """LLVM IR of ``float name(ptr p, i64 n)``: a streaming read of ``n`` float32 values (``n`` a
    multiple of 16) that also does ``fmas`` vector FMAs of the loaded values per 64-byte line,
    spread over 8 independent accumulators (no chain's latency bounds it), with one
    ``llvm.prefetch`` per line ``prefetch`` bytes ahead (0: none): the read rate of a kernel whose
    core is busy for ``fmas / 2`` cycles per line (two FMA pipes). :func:`probe` times them on
    one thread per core: they take part in the floor (with few FMAs they read as fast as the
    plain sums), and say how much of it a kernel busy for some cycles per line can read (a
    decoding GEMV is: on the Xeon of issue 15 the read fell from 36-40 GB/s at 4 FMAs per line
    to 28-31 at 16 and 23-24 at 24, where the FMAs alone would run at 80 GB/s)."""
    vty = f"<{lanes} x float>"
    per_line = LINE // (4 * lanes)              # loads per line (1 with 512-bit vectors, 2 with 256)
    chains = 8
    lines = [f"define float @{name}(ptr %p, i64 %n) {{", "entry:", "  br label %loop", "loop:",
             "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    lines += [f"  %a{j} = phi {vty} [zeroinitializer, %entry], [%z{j}, %loop]" for j in range(chains)]
    cur = {j: f"%a{j}" for j in range(chains)}
    vals = []
    for h in range(per_line):
        lines += [f"  %o{h} = add i64 %i, {h * lanes}", f"  %q{h} = getelementptr float, ptr %p, i64 %o{h}",
                  f"  %v{h} = load {vty}, ptr %q{h}, align 4"]
        vals.append(f"%v{h}")
    if prefetch:
        lines += [f"  %fo = add i64 %i, {prefetch // 4}", "  %f = getelementptr float, ptr %p, i64 %fo",
                  "  call void @llvm.prefetch.p0(ptr %f, i32 0, i32 2, i32 1)"]
    for w in range(max(fmas, per_line)):     # every load feeds at least one operation
        j, v = w % chains, vals[w % per_line]
        op = (f"call {vty} @llvm.fma.v{lanes}f32({vty} {v}, {vty} {v}, {vty} {cur[j]})" if fmas
              else f"fadd {vty} {cur[j]}, {v}")
        lines.append(f"  %e{w} = {op}")
        cur[j] = f"%e{w}"
    lines += [f"  %z{j} = fadd {vty} {cur[j]}, zeroinitializer" for j in range(chains)]
    tail, prev = _close_loop(vty, LINE // 4, [f"%z{j}" for j in range(chains)])
    lines += tail
    lines += [f"  %r = extractelement {vty} {prev}, i32 0", "  ret float %r", "}"]
    return "\n".join(lines) + "\n"


#: FMAs per 64-byte line of the "read while computing" variants (:func:`loaded_ir`).
LOADED_FMAS = (0, 4, 8, 12, 16, 24)


def loaded_label(fmas: int, threads: int) -> str:
    """The :func:`probe` label of the read with ``fmas`` FMAs per line on ``threads`` threads."""
    return f"read + {fmas} FMAs per line, prefetch 4096 B into L2, {threads} thread{'s' if threads > 1 else ''}"


def kernel_variants(avx512: bool) -> list[tuple[str, int, int, int, int]]:
    """``(label, lanes, accumulators, prefetch bytes, prefetch locality)`` of the JIT kernels
    :func:`probe` times: no prefetch, 1 KiB ahead into L1 and 4 KiB ahead into L2 (the kernels'
    distance; on the Xeon of issue 15 it read 38-40 GB/s where the others' best was 36-37)."""
    widths = [(8, "256-bit")] + ([(16, "512-bit")] if avx512 else [])
    out = []
    for lanes, wname in widths:
        for accs in (1, 4, 8):
            for pf, loc, how in ((0, 3, ""), (1024, 3, ", prefetch 1024 B"), (4096, 2, ", prefetch 4096 B into L2")):
                out.append((f"{wname} x{accs} acc{how}", lanes, accs, pf, loc))
    return out


def hugepage_buffer(nbytes: int, huge: bool = True) -> tuple[np.ndarray | None, object, str]:
    """A float32 array of ``nbytes`` in a private anonymous ``mmap`` (a shared one would be
    shmem, which THP treats apart) aligned to 2 MiB and advised ``MADV_HUGEPAGE`` (``huge``) or
    ``MADV_NOHUGEPAGE`` (small pages only), touched so the pages exist; returns ``(array,
    mapping, note)`` or ``(None, None, why not)``. The note says how much of it
    ``/proc/self/smaps`` reports as ``AnonHugePages``."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return None, None, "huge pages: skipped (Python's mmap has no MADV_HUGEPAGE here)"
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as fh:
            thp = fh.read().strip()
    except OSError:
        thp = "unknown"
    if huge and "[never]" in thp:
        return None, None, f"huge pages: skipped (transparent_hugepage/enabled: {thp})"
    align = 2 << 20
    try:
        m = mmap.mmap(-1, nbytes + align, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        off = (-base) % align
        m.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE, off, nbytes)
    except (OSError, ValueError) as err:
        return None, None, f"huge pages: skipped (madvise failed: {err})"
    a = np.frombuffer(m, dtype=np.float32, count=nbytes // 4, offset=off)
    a[:] = 1.0
    kb = _anon_huge_kb(base + off, nbytes)
    how = "MADV_HUGEPAGE" if huge else "MADV_NOHUGEPAGE"
    return a, m, (f"mmap + {how}: {kb / 1024:.0f} of {nbytes >> 20} MiB backed by huge pages (THP "
                  f"enabled: {thp})" if kb is not None else
                  f"mmap + {how} (THP enabled: {thp}; smaps unreadable)")


def _anon_huge_kb(addr: int, nbytes: int) -> int | None:
    """``AnonHugePages`` (kB) of the mappings of /proc/self/smaps overlapping ``[addr, addr +
    nbytes)``, or None where smaps cannot be read."""
    try:
        total, inside = 0, False
        with open("/proc/self/smaps") as fh:
            for line in fh:
                head = line.split(" ", 1)[0]
                if "-" in head and ":" not in head:
                    lo, hi = (int(v, 16) for v in head.split("-"))
                    inside = lo < addr + nbytes and hi > addr
                elif inside and line.startswith("AnonHugePages:"):
                    total += int(line.split()[1])
        return total
    except (OSError, ValueError):
        return None


def _threaded(fn, a: np.ndarray, nthreads: int, quantum: int):
    """A callable that runs ``fn(ptr, n)`` over ``a`` split into ``nthreads`` contiguous parts
    (multiples of ``quantum`` floats), each on its own Python thread (ctypes drops the GIL)."""
    n = a.size // (nthreads * quantum) * quantum
    base = a.ctypes.data
    if nthreads == 1:
        return lambda: fn(base, n)

    def run():
        ts = [threading.Thread(target=fn, args=(base + t * n * 4, n)) for t in range(nthreads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    return run


def probe(nbytes: int = 1 << 29, repeats: int = 5, threads: int | None = None,
          extra: dict | None = None) -> tuple[dict, list[str]]:
    """Measure every variant (see the module docstring) over ``nbytes``; best of ``repeats``
    after one warm-up. ``threads``: the "all cores" thread count (default ``os.cpu_count()``).
    ``extra``: ``{label: callable(matrix) -> None}`` of the caller's own readers (given the
    buffer as a ``(rows, 4096)`` float32 matrix), timed on every buffer too. The variants run
    round robin, ``repeats`` rounds. Returns ``({label: GB/s}, notes)``."""
    import llvmlite.binding as llvm

    from builder.codegen.llvm_target import Target

    threads = threads or os.cpu_count() or 1
    target = Target.host()
    feats = {f[1:] for f in target.features.split(",") if f.startswith("+")}
    variants = kernel_variants("avx512f" in feats)
    wide = 16 if "avx512f" in feats else 8
    vt = f"<{wide} x float>"
    text = (f"declare void @llvm.prefetch.p0(ptr, i32, i32, i32)\ndeclare {vt} @llvm.fma.v{wide}f32({vt}, {vt}, {vt})\n"
            + "".join(sum_ir(f"sum{i}", lanes, accs, pf, loc) for i, (_, lanes, accs, pf, loc) in enumerate(variants))
            + "".join(loaded_ir(f"load{k}", wide, k, 4096) for k in LOADED_FMAS))
    mod = llvm.parse_assembly(text)
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, target.target_machine())
    engine.finalize_object()
    proto = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_void_p, ctypes.c_int64)
    fns = [proto(engine.get_function_address(f"sum{i}")) for i in range(len(variants))]
    loaded = {k: proto(engine.get_function_address(f"load{k}")) for k in LOADED_FMAS}

    plain = np.ones(nbytes // 4, dtype=np.float32)
    kb = _anon_huge_kb(plain.ctypes.data, plain.nbytes)
    notes = [f"numpy buffer (np.ones; numpy advises huge pages itself): "
             f"{'?' if kb is None else f'{kb / 1024:.0f}'} of {nbytes >> 20} MiB backed by huge pages"]
    buffers = [("", plain, None)]
    for huge_flag, bname in ((True, ", mmap huge pages"), (False, ", mmap 4 KiB pages")):
        arr, mapping, note = hugepage_buffer(nbytes, huge_flag)
        notes.append(note)
        if arr is not None:
            buffers.append((bname, arr, mapping))
    cols = 4096
    v = np.ones(cols, dtype=np.float32)
    runs: list[tuple[str, object, int]] = []   # (label, callable, bytes read)
    for bname, a, _ in buffers:
        for (label, lanes, accs, _pf, _loc), fn in zip(variants, fns):
            for nt in sorted({1, threads}):
                runs.append((f"sum {label}, {nt} thread{'s' if nt > 1 else ''}{bname}",
                             _threaded(fn, a, nt, lanes * accs), a.nbytes))
        if not bname:   # the read while computing, on the plain buffer
            runs += [(loaded_label(k, threads), _threaded(fn, a, threads, LINE // 4), a.nbytes)
                     for k, fn in loaded.items()]
        m = a.reshape(-1, cols)
        runs.append((f"numpy add.reduce{bname}", lambda a=a: np.add.reduce(a), a.nbytes))
        runs.append((f"numpy matrix @ vector{bname}", lambda m=m: m @ v, a.nbytes))
        for label, fn in (extra or {}).items():
            runs.append((f"{label}{bname}", lambda fn=fn, m=m: fn(m), a.nbytes))
    best = {label: float("inf") for label, _, _ in runs}
    try:
        for _, run, _ in runs:   # warm-up: page in, JIT, thread pools
            run()
        # round robin: a burst of load on the shared machine hits every variant alike
        for _ in range(repeats):
            for label, run, _ in runs:
                t0 = time.perf_counter()
                run()
                best[label] = min(best[label], time.perf_counter() - t0)
        results = {label: nb / best[label] / 1e9 for label, _, nb in runs}
    finally:
        engine.close()
        del buffers, plain
    return results, notes


if __name__ == "__main__":
    res, notes = probe()
    for k, val in sorted(res.items(), key=lambda kv: -kv[1]):
        print(f"{val:6.1f} GB/s  {k}")
    for n in notes:
        print(n)
    print("read while computing (FMAs per 64-byte line): "
          + ", ".join(f"{k}: {res[loaded_label(k, os.cpu_count() or 1)]:.1f} GB/s" for k in LOADED_FMAS))

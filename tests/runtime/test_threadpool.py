"""The native thread pool (``runtime.threadpool``): regions back to back with different task counts, as a
kernel runs them (x's conversion on every thread, then the GEMM's tasks), driven from native code so that
hundreds of thousands of regions run in a second. Every task of a region runs exactly once, and before
``mb_parallel_for`` returns: a worker that read the previous region's work word must not claim a task of
the next one (it once did, and the caller returned while that task still ran)."""
import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest

from runtime import threadpool
from runtime.host import host_target_machine

#: the task counts of the two regions of a round (a short one, then a longer one)
COUNTS = (2, 13)
SLOTS = 16          # i64 counters per region
LATE = 1            # regions' worth of counters after all rounds, where tasks that run late land

_IR = r"""
declare i32 @mb_parallel_for(ptr, ptr, i64)

; ctx = {counters, spin}: count the task's index, after a little work
define i32 @task(ptr %ctx, i64 %i) nounwind {
entry:
  %cp = getelementptr { ptr, i64 }, ptr %ctx, i32 0, i32 0
  %counts = load ptr, ptr %cp
  %sp = getelementptr { ptr, i64 }, ptr %ctx, i32 0, i32 1
  %spin = load i64, ptr %sp
  br label %work
work:
  %k = phi i64 [ 0, %entry ], [ %k1, %work ]
  %v = load volatile i64, ptr %sp
  %k1 = add i64 %k, 1
  %more = icmp slt i64 %k1, %spin
  br i1 %more, label %work, label %count
count:
  %slot = getelementptr i64, ptr %counts, i64 %i
  %old = atomicrmw add ptr %slot, i64 1 seq_cst
  ret i32 0
}

; rounds of two regions (COUNTS tasks) on one context; after each region the context points at the
; late counters, so a task still running (or started) after mb_parallel_for returned counts there
define void @drive(ptr %counts, i64 %rounds, i64 %spin) nounwind {
entry:
  %ctx = alloca { ptr, i64 }
  %cp = getelementptr { ptr, i64 }, ptr %ctx, i32 0, i32 0
  %sp = getelementptr { ptr, i64 }, ptr %ctx, i32 0, i32 1
  store i64 %spin, ptr %sp
  %late_at = mul i64 %rounds, {PER_ROUND}
  %late = getelementptr i64, ptr %counts, i64 %late_at
  br label %round
round:
  %r = phi i64 [ 0, %entry ], [ %r1, %round ]
  %base = mul i64 %r, {PER_ROUND}
  %a = getelementptr i64, ptr %counts, i64 %base
  store volatile ptr %a, ptr %cp
  %rc1 = call i32 @mb_parallel_for(ptr @task, ptr %ctx, i64 {N0})
  store volatile ptr %late, ptr %cp
  %b = getelementptr i64, ptr %a, i64 {SLOTS}
  store volatile ptr %b, ptr %cp
  %rc2 = call i32 @mb_parallel_for(ptr @task, ptr %ctx, i64 {N1})
  store volatile ptr %late, ptr %cp
  %r1 = add i64 %r, 1
  %more = icmp slt i64 %r1, %rounds
  br i1 %more, label %round, label %done
done:
  ret void
}
"""


@pytest.fixture(scope="module")
def drive():
    threadpool.ensure_pool()
    if threadpool.pool_size() < 2:
        pytest.skip("one thread: the pool runs regions serially")
    text = (_IR.replace("{PER_ROUND}", str(2 * SLOTS)).replace("{SLOTS}", str(SLOTS))
            .replace("{N0}", str(COUNTS[0])).replace("{N1}", str(COUNTS[1])))
    mod = llvm.parse_assembly(text)
    mod.verify()
    tm = host_target_machine(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                             llvm.get_host_cpu_features().flatten(), opt=2)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(engine.get_function_address("drive"))
    yield fn
    del engine


@pytest.mark.parametrize("spin", [0, 30])
def test_back_to_back_regions_run_each_task_once_and_in_time(drive, spin):
    rounds = 40000
    counts = np.zeros((rounds + LATE) * 2 * SLOTS, np.int64)
    old = threadpool.set_num_threads(threadpool.pool_size())
    try:
        drive(counts.ctypes.data, rounds, spin)
    finally:
        threadpool.set_num_threads(old)
    per_round = counts[:rounds * 2 * SLOTS].reshape(rounds, 2, SLOTS)
    for j, n in enumerate(COUNTS):
        ran = per_round[:, j, :n]
        wrong = np.argwhere(ran != 1)
        assert not len(wrong), (f"region {j} ({n} tasks): task (round, index) {wrong[:5].tolist()} ran "
                                f"{ran[tuple(wrong[0])]} times")
        assert not per_round[:, j, n:].any(), f"region {j}: an index past its {n} tasks ran"
    assert not counts[rounds * 2 * SLOTS:].any(), "a task ran after mb_parallel_for returned"

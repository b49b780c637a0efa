"""Compiled code, Executable files and cache entries never take the process down (issue 12, items 1-3).

- the object code loads wherever the JIT places its sections: no 32-bit PC-relative relocation;
- a damaged Executable is refused (digest, header, bytecode, object structure, manifest, target)
  before any byte reaches LLVM, never a signal;
- a cache entry holding other object code, a FIFO or a device is a miss, never loaded.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import builder
from runtime import Executable, VirtualMachine
from runtime.elf import ALLOWED_RELOCATIONS, read_object

ROOT = Path(__file__).resolve().parents[2]
SMALL = str(ROOT / "recipes" / "llama_mlp_small.yaml")
TINY = """\
name: tiny
model:
  layers:
    fc: {type: Linear, in_features: 8, out_features: 4, bias: true}
  forward: return relu(fc(x)) * 2.0
functions:
  forward:
    x: {shape: [batch, 8], dtype: float32}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """``(saved bytes, call arguments, reference output)`` of a small compiled model."""
    path = tmp_path_factory.mktemp("tiny") / "tiny.yaml"
    path.write_text(TINY)
    m = builder.build(path)
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    args = [x] + [m.params[n] for n in m.param_names]
    w, b = m.params["fc.weight"].astype(np.float64), m.params["fc.bias"].astype(np.float64)
    ref = np.maximum(x.astype(np.float64) @ w.T + b, 0) * 2.0
    y = m["forward"](x)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    return m.exe.save(), args, y


def _resaved(data: bytes, change) -> bytes:
    exe = Executable.load(data)
    change(exe)
    return exe.save()


# --- item 1: the code model ----------------------------------------------------------------------

@pytest.mark.parametrize("overrides", [["quantization=q4f16_1"], ["dtype=float32"]])
def test_object_code_has_only_64bit_relocations(overrides):
    """The large code model with static relocations: every reference from code to its constants and
    to external functions is an absolute 64-bit address, so no section placement can overflow it."""
    m = builder.build(SMALL, overrides)
    obj = read_object(m.exe.object_code)
    kinds = {r.type_name for r in obj.relocations}
    assert obj.relocations, "the kernels reference constants and functions through relocations"
    assert {r.type for r in obj.relocations} <= ALLOWED_RELOCATIONS, kinds
    assert not kinds & {"R_X86_64_PC32", "R_X86_64_PLT32", "R_X86_64_GOTPCREL", "R_X86_64_32", "R_X86_64_32S"}


def test_small_code_model_object_is_refused_before_llvm():
    import llvmlite.binding as llvm

    from builder.codegen import Target, manifest_ir

    init = Target.host()
    tm = llvm.Target.from_triple(init.triple).create_target_machine(
        cpu=init.cpu, features=init.features, opt=2, reloc="pic", codemodel="default")
    meta = {"f": {"name": "f", "params": [], "sym_vars": [], "errors": [], "error_params": []}}
    mod = llvm.parse_assembly("@c = internal constant [4 x float] [float 1.0, float 2.0, float 3.0, float 4.0]\n"
                              "define i32 @f(ptr %d, ptr %s) {\n  %p = getelementptr [4 x float], ptr @c, i64 0,"
                              " i64 2\n  %v = load volatile float, ptr %p\n  %i = fptosi float %v to i32\n"
                              "  ret i32 %i\n}\n" + manifest_ir("t", meta))
    obj = tm.emit_object(mod)
    from runtime.native import NativeLibrary

    with pytest.raises(ValueError, match="R_X86_64_PC32"):
        NativeLibrary(obj, meta)


# --- item 2: damaged executables -------------------------------------------------------------------

def test_every_damaged_byte_is_refused_by_the_digest(tiny):
    data, args, y = tiny
    n = len(data)
    header_end = 48 + int.from_bytes(data[8:16], "little")
    for pos in sorted({8, 20, 47, 48, 60, header_end - 1, header_end, header_end + 100, n - 1}):
        bad = bytearray(data)
        bad[pos] ^= 0x10
        with pytest.raises(ValueError, match="damaged|truncated|corrupt|version|magic"):
            Executable.load(bytes(bad))
    for cut in (0, 7, 30, 48, header_end, n - 1):
        with pytest.raises(ValueError):
            Executable.load(data[:cut])
    with pytest.raises(ValueError, match="damaged"):
        Executable.load(data + b"\0")
    old = b"MBEXEC\x00\x01" + data[8:]
    with pytest.raises(ValueError, match="version 1 is not supported.*rebuild"):
        Executable.load(old)
    np.testing.assert_array_equal(VirtualMachine(Executable.load(data))["forward"](*args), y)


def _call(exe) -> list:
    return next(ins for ins in exe.functions["forward"]["instructions"] if ins[0] == "call")


def _bytecode_changes():
    def reg_out_of_range(exe):
        fn = exe.functions["forward"]
        _call(exe)[2][0] = fn["num_registers"] + 3

    def read_before_write(exe):
        fn = exe.functions["forward"]
        fn["num_registers"] += 1
        fn["instructions"][-1][1] = fn["num_registers"] - 1

    def unknown_kernel(exe):
        _call(exe)[1] = "no_such_kernel"

    def arity(exe):
        _call(exe)[2].append(0)

    def no_ret(exe):
        exe.functions["forward"]["instructions"].pop()

    def num_input(exe):
        exe.functions["forward"]["num_input"] = 99

    def opcode(exe):
        exe.functions["forward"]["instructions"].insert(0, ["jump", 0])

    def const_index(exe):
        exe.functions["forward"]["instructions"].insert(0, ["const", 0, 5])

    def out_dtype(exe):
        _call(exe)[4][0][0] = "float64"

    def dim_tree(exe):
        _call(exe)[4][0][1] = [["pow", 2, 3]]

    return {f.__name__: f for f in (reg_out_of_range, read_before_write, unknown_kernel, arity, no_ret, num_input,
                                     opcode, const_index, out_dtype, dim_tree)}


@pytest.mark.parametrize("name", sorted(_bytecode_changes()))
def test_malformed_bytecode_is_refused_on_load(tiny, name):
    bad = _resaved(tiny[0], _bytecode_changes()[name])
    with pytest.raises(ValueError, match="corrupt executable header"):
        Executable.load(bad)


def _host_lacks():
    import llvmlite.binding as llvm

    from runtime.host import init_llvm

    init_llvm()
    have = {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}
    return next(f for f in ("avx512f", "avx512bw", "amx-tile", "avx10.1-512", "sha512") if f not in have)


def test_executable_for_another_machine_is_refused(tiny):
    data, args, _ = tiny
    other = _resaved(data, lambda e: e.target.update(triple="aarch64-unknown-linux-gnu", cpu="cortex-a53"))
    with pytest.raises(ValueError, match="compiled for aarch64-unknown-linux-gnu.*rebuild it here"):
        VirtualMachine(Executable.load(other))
    feature = _host_lacks()
    wider = _resaved(data, lambda e: e.target.update(features=e.target["features"] + f",+{feature}"))
    with pytest.raises(ValueError, match=f"{feature}.*lacks"):
        VirtualMachine(Executable.load(wider))


def test_kernel_metadata_that_does_not_match_the_object_is_refused(tiny):
    data, args, _ = tiny

    def change(exe):
        name = next(iter(exe.kernels))
        exe.kernels[name]["params"][0]["shape"] = [["var", "n"], 99]
    with pytest.raises(ValueError, match="other signatures"):
        VirtualMachine(Executable.load(_resaved(data, change)))


_DAMAGED_OBJECTS = textwrap.dedent("""
    import json, struct, sys
    from runtime import Executable, VirtualMachine
    data = open(sys.argv[1], "rb").read()
    exe = Executable.load(data)
    obj = exe.object_code
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shnum, shstrndx = struct.unpack_from("<HH", obj, 0x3C)
    def patch(offset, fmt, value):
        b = bytearray(obj); struct.pack_into(fmt, b, offset, value); return bytes(b)
    cases = {
        "shstrndx 2049": patch(0x3E, "<H", 2049),
        "shnum 0": patch(0x3C, "<H", 0),
        "shoff past the end": patch(0x28, "<Q", len(obj) + 64),
        "section offset huge": patch(shoff + 64 + 0x18, "<Q", 1 << 40),
        "section size huge": patch(shoff + 64 + 0x20, "<Q", 1 << 40),
        "link to a missing section": patch(shoff + 64 * 2 + 0x28, "<I", 500),
        "thread-local code": patch(shoff + 64 * 3 + 0x8, "<Q", 0x406),
        "machine aarch64": patch(0x12, "<H", 183),
        "COFF magic": b"\\x64\\x86" + obj[2:],
        "type executable": patch(0x10, "<H", 2),
        "truncated": obj[: len(obj) // 2],
        "empty": b"",
    }
    # every symbol-table and relocation entry pointing nowhere
    for k in range(shnum):
        sh_type, = struct.unpack_from("<I", obj, shoff + 64 * k + 4)
        off, size = struct.unpack_from("<QQ", obj, shoff + 64 * k + 0x18)
        if sh_type == 4 and size:
            cases[f"relocation symbol of section {k}"] = patch(off + 8, "<Q", (1 << 40) | 1)
            cases[f"relocation offset of section {k}"] = patch(off, "<Q", 1 << 40)
        if sh_type == 3 and size:   # a string table whose last NUL is gone, or that is empty (LLVM aborts)
            cases[f"string table {k} not NUL-terminated"] = patch(off + size - 1, "<B", 0x41)
            cases[f"string table {k} empty"] = patch(shoff + 64 * k + 0x20, "<Q", 0)
        if sh_type == 2 and size > 24:
            cases[f"symbol name of section {k}"] = patch(off + 24, "<I", 1 << 30)
            cases[f"symbol section of section {k}"] = patch(off + 24 + 6, "<H", 4000)
            cases[f"symbol type TLS in section {k}"] = patch(off + 24 + 4, "<B", 0x16)
            cases[f"symbol value past its section in {k}"] = patch(off + 24 * 3 + 8, "<Q", 1 << 40)
    results = {}
    for name, broken in cases.items():
        exe.object_code = broken
        try:
            VirtualMachine(Executable.load(exe.save()))
            results[name] = "loaded"
        except ValueError as err:
            results[name] = "ValueError: " + str(err)
    print(json.dumps(results))
""")


def test_damaged_object_code_with_a_recomputed_digest_never_reaches_llvm(tiny, tmp_path):
    """The file's digest was recomputed after the object code was damaged (as an attacker would):
    the structural check refuses every case, in a process that must not die."""
    path = tmp_path / "tiny.mbexe"
    path.write_bytes(tiny[0])
    out = subprocess.run([sys.executable, "-c", _DAMAGED_OBJECTS, str(path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout)
    assert len(results) >= 12
    for name, what in results.items():
        assert what.startswith("ValueError: "), (name, what)
    assert "does not exist" in results["shstrndx 2049"]
    assert "x86-64" in results["machine aarch64"]
    strtabs = [what for name, what in results.items() if name.startswith("string table")]
    assert len(strtabs) >= 2 and any("does not end with a NUL byte" in what for what in strtabs)


def test_executable_save_is_atomic(tiny, tmp_path):
    data = tiny[0]
    exe = Executable.load(data)
    path = tmp_path / "m.mbexe"
    exe.save(path)
    exe.constants = [object()]            # cannot be serialized: the save fails midway
    with pytest.raises(Exception):
        exe.save(path)
    assert path.read_bytes() == data
    assert [p.name for p in tmp_path.iterdir()] == ["m.mbexe"]


def test_a_fifo_is_not_an_executable(tmp_path):
    fifo = tmp_path / "x.mbexe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="FIFO"):
        Executable.load(fifo)


# --- item 3: the object cache ------------------------------------------------------------------------

_SWAP = textwrap.dedent("""
    import os, sys, json, numpy as np
    from pathlib import Path
    import builder
    cache = Path(os.environ["MB_CACHE_DIR"])
    x = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
    def run(overrides):
        m = builder.build(sys.argv[1], overrides)
        return m(x.astype(np.float16) if "quantization=q4f16_1" in overrides else x)
    a_over, b_over = ["quantization=q4f16_1"], ["dtype=float32"]
    ref_a = run(a_over); a_files = set(cache.glob("*.mbo"))
    ref_b = run(b_over); b_files = set(cache.glob("*.mbo")) - a_files
    (fa,), (fb,) = a_files, b_files
    da, db = fa.read_bytes(), fb.read_bytes()
    fa.write_bytes(db); fb.write_bytes(da)      # each entry now holds the other model's valid object
    same_a = bool((run(a_over) == ref_a).all()); same_b = bool((run(b_over) == ref_b).all())
    rebuilt = fa.read_bytes() == da and fb.read_bytes() == db
    # a FIFO and a symlink to /dev/zero as entries: misses, rebuilt quickly
    fa.unlink(); os.mkfifo(fa)
    fb.unlink(); os.symlink("/dev/zero", fb)
    fifo_ok = bool((run(a_over) == ref_a).all()); zero_ok = bool((run(b_over) == ref_b).all())
    regular = fa.is_file() and not fa.is_symlink() and fb.is_file() and not fb.is_symlink()
    print(json.dumps({"same_a": same_a, "same_b": same_b, "rebuilt": rebuilt, "fifo": fifo_ok,
                      "zero": zero_ok, "regular": regular}))
""")


def test_swapped_fifo_and_device_cache_entries_are_misses(tmp_path):
    env = {**os.environ, "MB_CACHE_DIR": str(tmp_path / "cache"), "MB_CACHE": "1"}
    out = subprocess.run([sys.executable, "-c", _SWAP, SMALL], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "same_a": True, "same_b": True, "rebuilt": True, "fifo": True, "zero": True, "regular": True}

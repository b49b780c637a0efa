"""Hypothesis strategies for the fuzzers: recipe mutants, overrides, damaged safetensors, executables and
ONNX models.

Each strategy starts from something valid (a seed recipe, a good file) and damages it the way users
and attackers do: odd values in every field, deleted and invented keys, generated ``forward`` programs
(including deep nesting and long chains), YAML alias and ``${var}`` bombs, byte flips, truncation,
headers with bad offsets / dtypes / shapes, executables whose bytecode, kernel metadata, target or
object code were changed and saved again with valid checksums, ONNX models with extreme shape values,
damaged initializers and attributes, swapped ops, dangling inputs and external data pointing anywhere.
"""
from __future__ import annotations

import json
import struct

import yaml
from hypothesis import strategies as st

# --- seed recipes (small: each compiles in well under a second) ----------------------------------------

SEEDS = {
    "mlp": """\
name: mlp
vars: {hidden_size: 16, intermediate_size: 24, dtype: float32}
model:
  layers:
    gate_proj: {type: Linear, in_features: '${hidden_size}', out_features: '${intermediate_size}', bias: false}
    up_proj: {type: Linear, in_features: '${hidden_size}', out_features: '${intermediate_size}', bias: false}
    down_proj: {type: Linear, in_features: '${intermediate_size}', out_features: '${hidden_size}', bias: false}
  forward: |
    gate = gate_proj(x)
    up = up_proj(x)
    return down_proj(silu(gate) * up)
functions:
  forward:
    x: {shape: [batch_size, '${hidden_size}'], dtype: '${dtype}'}
dtype: '${dtype}'
quantization: none
""",
    "conv": """\
name: conv_stack
vars: {channels: 8, width: 16, dtype: float32}
model:
  layers:
    conv: {type: Conv1D, in_channels: 4, out_channels: '${channels}', kernel_size: 3, padding: 1}
    act: {type: GELU}
    norm: {type: LayerNorm, normalized_shape: '${width}', eps: 1.0e-5}
  forward: |
    h = act(conv(x))
    return norm(h)
functions:
  forward:
    x: {shape: [batch, 4, '${width}'], dtype: '${dtype}'}
dtype: '${dtype}'
""",
    "embed": """\
name: embed_head
vars: {vocab: 32, dim: 16}
model:
  layers:
    tok: {type: Embedding, num: '${vocab}', dim: '${dim}'}
    norm: {type: RMSNorm, hidden_size: '${dim}', epsilon: 1.0e-5}
    head: {type: Linear, in_features: '${dim}', out_features: '${vocab}', bias: true}
  forward: |
    h = norm(tok(ids))
    return softmax(head(h), axis=-1)
functions:
  forward:
    ids: {shape: [batch, seq], dtype: int64}
  last:
    ids: {shape: [1, seq], dtype: int64}
""",
    # padding removal: a count bound at run time (vm.builtin.nonzero, match_shape) sizing what follows
    "packed": """\
name: packed_encoder
vars: {vocab: 32, hidden: 16, heads: 2}
model:
  layers:
    tok: {type: Embedding, num: '${vocab}', dim: '${hidden}'}
    attn: {type: Attention, hidden_size: '${hidden}', num_heads: '${heads}', bias: true}
    norm: {type: LayerNorm, normalized_shape: '${hidden}', eps: 1.0e-5}
  forward: |
    tokens, idx = unpad_input(tok(ids), mask)
    h = norm(tokens + attn(tokens, attention_mask=mask, token_indices=idx))
    return pad_input(h, idx, batch, seq)
functions:
  forward:
    ids: {shape: [batch, seq], dtype: int64}
    mask: {shape: [batch, seq], dtype: int64}
""",
}

OPS = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "matmul", "permute_dims",
       "reshape", "astype", "relu", "silu", "gelu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "sin",
       "cos", "negative", "softmax", "erf", "sum", "mean", "take", "concat", "where", "max_pool1d", "max_pool2d",
       "avg_pool2d", "adaptive_avg_pool2d", "batch_norm", "floor_divide", "floor_mod", "round", "sign",
       "interpolate", "conv2d_transpose", "sort", "argsort", "topk", "scatter_elements", "scatter_nd", "pad",
       "unpad_input", "pad_input",
       "print", "open",
       "__import__", "eval", "getattr", "type"]
FIELD_NAMES = ["type", "in_features", "out_features", "bias", "dtype", "out_dtype", "normalized_shape", "eps",
               "hidden_size", "axes", "epsilon", "in_channels", "out_channels", "kernel_size", "stride",
               "padding", "dilation", "groups", "num", "dim", "shape", "forward", "layers", "kind", "bits",
               "group_size", "model_dtype", "exclude", "storage_dtype", "activation_quantization", "path",
               "prefix", "map", "repeat", "blocks", "inputs", "__dict__", "export_tvm", "named_parameters",
               "x", "y", "forward_", "0", ""]

INTS = [0, 1, 2, 3, -1, -7, 4, 8, 16, 24, 31, 32, 33, 64, 127, 2**31 - 1, 2**31, 2**40, 2**53 + 1, 2**62,
        2**63 - 1, 2**63, 2**64, 10**30]
FLOATS = [0.0, -0.0, 1e-12, 0.5, 1.5, 1e308, float("inf"), float("-inf"), float("nan"), -1.0]
STRINGS = ["", "x", "batch", "batch_size", "float16", "bfloat16", "int8", "int64", "float64", "bool",
           "complex64", "Linear", "Conv1D", "LayerNorm", "Embedding", "q4f16_1", "q4f32_1", "q8f32_pc", "q0bf16",
           "none", "group", "${dtype}", "${hidden_size}", "${dim}", "${nope}", "$${x}", "${a.b}", "${}", "[/]",
           "[bold red]x[/]", "a b\n@R.function", "__dict__", "export_tvm", "named_parameters", "forward",
           "silu", "x" * 300, "\u00e9t\u00e9", "\u202eabc", "*.norm*", "[", "-1", "1e3", "0x10"]


def scalars() -> st.SearchStrategy:
    """Odd scalar values for any field."""
    return st.one_of(st.sampled_from(INTS), st.sampled_from(FLOATS), st.sampled_from(STRINGS),
                     st.sampled_from([None, True, False]), st.integers(-(2**70), 2**70))


def values() -> st.SearchStrategy:
    """Scalars, and lists / mappings of them (a few levels deep)."""
    return st.recursive(scalars(), lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(FIELD_NAMES), inner, max_size=3)),
        max_leaves=8)


def _paths(data, prefix=()):
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, prefix + (i,))
    return out


# --- forward programs --------------------------------------------------------------------------------

@st.composite
def expressions(draw, names: list[str], depth: int = 3) -> str:
    """A forward expression over ``names``: calls of ops and layers, operators, constants, subscripts
    and a few constructs the language must refuse."""
    leaf = st.one_of(st.sampled_from(names), st.sampled_from(["1", "2.0", "-1", "0", "'s'", "None", "True",
                                                              "1e400", "[1, -1]", "(2, 3)", "[batch, -1]"]))
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return draw(leaf)
    kind = draw(st.integers(0, 9))
    sub = lambda: draw(expressions(names, depth - 1))  # noqa: E731
    if kind <= 3:
        fn = draw(st.sampled_from(OPS + names))
        args = [sub() for _ in range(draw(st.integers(0, 3)))]
        if draw(st.booleans()):
            args.append(draw(st.sampled_from(["axis=-1", "axis=7", "name='h'", "name=x", "dtype='float16'",
                                              "shape=[2, -1]", "axes=[1, 0]", "name='a b\\n@R.function'"])))
        return f"{fn}({', '.join(args)})"
    if kind <= 6:
        op = draw(st.sampled_from(["+", "-", "*", "/", "@", "%", "**", "//", "<", "and"]))
        return f"({sub()} {op} {sub()})"
    if kind == 7:
        return draw(st.sampled_from(["-", "+", "not ", "~"])) + sub()
    if kind == 8:
        return f"{sub()}[{draw(st.sampled_from(['0', '-1', ':, -1', '0:2', 'x', '...']))}]"
    return draw(st.sampled_from(["x.shape", "lambda: x", "[i for i in x]", "f'{x}'", "x if x else x",
                                 "__import__('os')", "(yield)", "{1: 2}"]))


@st.composite
def forward_programs(draw, inputs: list[str], layers: list[str]) -> str:
    """A forward text: a few assignments and a return, or a stress form (deep nesting, long sums,
    long chains, unary-minus towers, huge text)."""
    stress = draw(st.integers(0, 6))
    x = inputs[0] if inputs else "x"
    if stress == 0:
        n = draw(st.sampled_from([5, 8, 40, 60]))
        return "return " + "silu(" * n + x + ")" * n + "\n"
    if stress == 1:
        n = draw(st.sampled_from([50, 400, 1200]))
        return "return " + " + ".join([x] * n) + "\n"
    if stress == 2:
        n = draw(st.sampled_from([100, 1000, 100_000]))
        return "return " + "-" * n + x + "\n"
    if stress == 3:
        n = draw(st.sampled_from([20, 200, 400]))
        lines = [f"y0 = {x}"] + [f"y{i} = {draw(st.sampled_from(['silu', 'relu', 'exp', 'tanh']))}(y{i - 1})"
                                 for i in range(1, n + 1)]
        return "\n".join(lines) + f"\nreturn y{n}\n"
    names = list(inputs)
    lines = []
    for i in range(draw(st.integers(0, 4))):
        lines.append(f"v{i} = {draw(expressions(names + layers, 3))}")
        names.append(f"v{i}")
    lines.append(f"return {draw(expressions(names + layers, 3))}")
    return "\n".join(lines) + "\n"


# --- text-level damage -------------------------------------------------------------------------------

def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A YAML "billion laughs": each level is a list of ``width`` aliases of the previous one."""
    rows = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        rows.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(rows) + "\n"


def with_var_bomb(text: str, levels: int) -> str:
    """``text`` with variables that each reference the previous one twice (``2**levels`` bytes when
    expanded), the last one used as the recipe's name."""
    rows = ["v0: lol"] + [f"v{i}: '${{v{i - 1}}}${{v{i - 1}}}'" for i in range(1, levels)]
    if "vars: {" in text:
        text = text.replace("vars: {", "vars: {" + ", ".join(rows) + ", ", 1)
    elif "\nvars:\n" in text:
        text = text.replace("\nvars:\n", "\nvars:\n" + "".join(f"  {r}\n" for r in rows), 1)
    else:
        text = "vars: {" + ", ".join(rows) + "}\n" + text
    lines = [ln for ln in text.splitlines() if not ln.startswith("name:")]
    return f"name: '${{v{levels - 1}}}'\n" + "\n".join(lines) + "\n"


@st.composite
def text_damage(draw, text: str) -> str:
    """Damage at the text level: bombs, deep nesting, tags, truncation, byte flips, junk."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return text + alias_bomb(draw(st.sampled_from([3, 9, 12])), draw(st.sampled_from([3, 9])))
    if kind == 1:
        return with_var_bomb(text, draw(st.sampled_from([4, 24, 40])))
    if kind == 2:
        depth = draw(st.sampled_from([50, 500, 5000]))
        return text + "deep: " + "[" * depth + "]" * depth + "\n"
    if kind == 3:
        tag = draw(st.sampled_from(["!!int 1e3", "!!python/object:os.system x", "!!binary aGk=", "!!float abc",
                                    "!!timestamp 2001-13-45", "!!set {a, b}", "!custom 1", "!!str 3"]))
        return text.replace("bias: false", f"bias: {tag}", 1).replace("eps: 1.0e-5", f"eps: {tag}", 1) \
            .replace("num: '${vocab}'", f"num: {tag}", 1)
    if kind == 4:
        cut = draw(st.integers(0, len(text)))
        return text[:cut]
    if kind == 5:
        data = bytearray(text.encode())
        for _ in range(draw(st.integers(1, 6))):
            pos = draw(st.integers(0, len(data) - 1))
            data[pos] ^= 1 << draw(st.integers(0, 6))
        return data.decode("utf-8", errors="replace")
    if kind == 6:
        return text.replace("name: ", "name: '\\ud800' #", 1) if draw(st.booleans()) else \
            text.replace("name: ", 'name: "\\ud800"\n_name: ', 1)
    if kind == 7:
        return text + "\n" + draw(st.sampled_from(["x: 1\nx: 2", "? [a]\n: 1", "<<: 3", "&a a: *a", "- 1",
                                                   "%YAML 1.1\n---", "--- \n...", "\t: tab"])) + "\n"
    if kind == 8:
        return text.replace("16", str(draw(st.sampled_from(INTS))), 1)
    return text + draw(st.text(max_size=40))


# --- recipes and overrides ---------------------------------------------------------------------------

@st.composite
def recipe_mutants(draw) -> tuple[str, str]:
    """``(seed name, recipe text)``: a seed changed by 1-3 data-level edits and maybe text damage."""
    seed = draw(st.sampled_from(sorted(SEEDS)))
    data = yaml.safe_load(SEEDS[seed])
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        parent = data
        for seg in path[:-1]:
            parent = parent[seg]
        op = draw(st.integers(0, 5))
        if path[-1] == "forward" or op == 5:
            model = data.get("model") if isinstance(data.get("model"), dict) else {}
            layers = model.get("layers") if isinstance(model.get("layers"), dict) else {}
            layers = [k for k in layers if isinstance(k, str)]
            inputs = ["x"] if seed != "embed" else ["ids"]
            if isinstance(data.get("model"), dict):
                data["model"]["forward"] = draw(forward_programs(inputs, layers))
        elif op <= 2:
            parent[path[-1]] = draw(values())
        elif op == 3 and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(FIELD_NAMES))] = draw(values())
    try:
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    except yaml.YAMLError:
        text = SEEDS[seed]
    if draw(st.integers(0, 3)) == 0:
        text = draw(text_damage(text))
    return seed, text


OVERRIDE_KEYS = ["hidden_size", "intermediate_size", "dtype", "channels", "width", "vocab", "dim", "name",
                 "quantization", "functions", "model", "weights", "description", "vars", "quantization.group_size",
                 "quantization.bits", "quantization.kind", "quantization.activation_quantization",
                 "quantization.exclude", "model.forward", "model.layers.gate_proj.bias", "model.layers.conv.stride",
                 "model.layers.tok.num", "model.layers.zz.bias", "functions.forward.x.shape.0",
                 "functions.forward.x.shape.9", "functions.forward.ids.dtype", "weights.path", "a.b.c", "",
                 "model..layers", "vars.dtype", "model.layers.head.in_features", "functions.last"]
OVERRIDE_VALUES = ["1", "0", "-1", "18446744073709551616", "1e3", "!!int 1e3", "[1, 2]", "{a: 1}", "&a [*a]",
                   "${dtype}", "${nope}", '"\\ud800"', "q4f16_1", "q4f32_1", "q8f32_1", "none", "float16",
                   "bfloat16", "int8", "''", "~", ".nan", "[/]", "abc", "64", "3", "4096", "1048576", "true",
                   "/dev/zero", "/nonexistent.safetensors", "return x", "return silu(x, 'a b')",
                   "{type: Linear, in_features: 2, out_features: 2}", "!!python/name:os.system"]


def flow_alias_bomb(levels: int = 9) -> str:
    """An alias bomb in YAML flow style, small enough for one ``KEY=VALUE`` override."""
    parts = ["&a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        parts.append(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "[" + ", ".join(parts) + "]"


@st.composite
def overrides(draw) -> tuple[str, list[str]]:
    """``(seed name, [KEY=VALUE, ...])``."""
    seed = draw(st.sampled_from(sorted(SEEDS)))
    out = []
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.one_of(st.sampled_from(OVERRIDE_KEYS), st.text(max_size=12)))
        kind = draw(st.integers(0, 9))
        if kind == 0:
            value = flow_alias_bomb(draw(st.sampled_from([3, 9, 12])))
        elif kind == 1:
            depth = draw(st.sampled_from([100, 1000, 10000]))
            value = "[" * depth + "]" * depth
        elif kind == 2:
            value = draw(st.text(max_size=20))
        else:
            value = draw(st.sampled_from(OVERRIDE_VALUES))
        out.append(f"{key}={value}" if draw(st.integers(0, 15)) else key)
    return seed, out


@st.composite
def raw_damage(draw, good: bytes) -> bytes:
    """Byte-level damage to a file (a safetensors file, a saved executable): flips, a truncation, an overwritten range, junk."""
    data = bytearray(good)
    kind = draw(st.integers(0, 3))
    if kind == 0:
        for _ in range(draw(st.integers(1, 6))):
            pos = draw(st.integers(0, len(data) - 1))
            data[pos] ^= 1 << draw(st.integers(0, 7))
    elif kind == 1:
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif kind == 2:
        start = draw(st.integers(0, len(data) - 1))
        data[start:start + draw(st.integers(1, 64))] = draw(st.binary(min_size=1, max_size=64))
    else:
        data += draw(st.binary(min_size=1, max_size=64))
    return bytes(data)


# --- damaged safetensors -----------------------------------------------------------------------------

def split_safetensors(data: bytes) -> tuple[dict, bytes]:
    """The header (parsed) and the data section of a good safetensors file."""
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


@st.composite
def damaged_safetensors(draw, good: bytes) -> bytes:
    """A damaged copy of the good file ``good``: raw byte damage, or an edited header re-encoded with
    a right or wrong length."""
    if draw(st.booleans()):
        return draw(raw_damage(good))
    header, body = split_safetensors(good)
    names = [k for k in header if k != "__metadata__"]
    kind = draw(st.integers(0, 8))
    name = draw(st.sampled_from(names))
    entry = header[name]
    if kind == 0:
        i = draw(st.integers(0, 1))
        entry["data_offsets"][i] += draw(st.sampled_from([-1, 1, -4, 4, -(2**40), 2**40, 2**63, -(2**63)]))
    elif kind == 1:
        entry["data_offsets"] = draw(st.sampled_from([[0, 0], [-8, 4], [4, 0], [0, 2**64], "x", [1], None,
                                                      [0.5, 1], [True, False]]))
    elif kind == 2:
        entry["dtype"] = draw(st.sampled_from(["F64", "F32", "F16", "BF16", "I64", "I8", "U8", "BOOL", "F8_E4M3",
                                               "Q4", "", 5, None, "f32"]))
    elif kind == 3:
        entry["shape"] = draw(st.sampled_from([[], [0], [-1, 4], [2**40, 2**40], [3, 4, 1], ["3"], None, 7,
                                               [[3]], [1.5]]))
    elif kind == 4:
        del header[name]
    elif kind == 5:
        other = draw(st.sampled_from(names))
        header[name]["data_offsets"], header[other]["data_offsets"] = \
            header[other]["data_offsets"], header[name]["data_offsets"]
    elif kind == 6:
        header["__metadata__"] = draw(st.sampled_from([None, 5, "x", {"a": 1}, {"a": {"b": "c"}}, [1]]))
    elif kind == 7:
        depth = draw(st.sampled_from([10, 1000, 100_000]))
        text = ("[" * depth + "]" * depth).encode()
        return struct.pack("<Q", len(text)) + text + body
    else:
        header = draw(st.sampled_from([[], "x", 5, None]))
    try:
        text = json.dumps(header).encode()
    except (TypeError, ValueError):
        text = b"{}"
    text += b" " * (-len(text) % 8)
    length = len(text) + draw(st.sampled_from([0, 0, 0, 1, -1, 8, -8, 2**40, -len(text)]))
    return struct.pack("<Q", length % 2**64) + text + body


# --- damaged executables -----------------------------------------------------------------------------

def _walk_ints(value, path=()):
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _walk_ints(v, path + (k,))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _walk_ints(v, path + (i,))]
    return []


@st.composite
def resaved_damage(draw, exe_loader):
    """``(bytes, call)``: an Executable changed in memory and saved again (valid checksums): bytecode
    integers, kernel metadata, the target, constants, or the object code's ELF structure (then
    ``call`` is False: only loading is judged). ``exe_loader()`` gives a fresh copy."""
    exe = exe_loader()
    kind = draw(st.integers(0, 4))
    if kind == 0:
        fn = draw(st.sampled_from(sorted(exe.functions)))
        spots = _walk_ints(exe.functions[fn])
        for _ in range(draw(st.integers(1, 3))):
            path = draw(st.sampled_from(spots))
            node = exe.functions[fn]
            for seg in path[:-1]:
                node = node[seg]
            node[path[-1]] = draw(st.sampled_from([-1, 0, 1, 2, 3, 5, 99, 2**31, 2**63, node[path[-1]] + 1]))
    elif kind == 1:
        name = draw(st.sampled_from(sorted(exe.kernels)))
        meta = exe.kernels[name]
        params = meta.get("params", [])
        if params and draw(st.booleans()):
            p = draw(st.sampled_from(params))
            field_ = draw(st.sampled_from(["dtype", "shape", "name", "written"]))
            p[field_] = draw(st.sampled_from(["float16", "int64", "bfloat16", "x", [], [1], [["var", "n"]],
                                              [2**62, 2**62], True, None]))
        else:
            meta[draw(st.sampled_from(["params", "errors", "error_params", "kernel"]))] = \
                draw(st.sampled_from([[], None, "x", [1, 2], {}]))
    elif kind == 2:
        exe.target = dict(exe.target)
        field_ = draw(st.sampled_from(["triple", "cpu", "features"]))
        exe.target[field_] = draw(st.sampled_from(["aarch64-unknown-linux-gnu", "cortex-a53", "+avx512f,+avx512bw",
                                                   "x86_64-pc-windows-msvc", "", "+neon", "znver5"]))
    elif kind == 3 and exe.constants:
        import numpy as np

        i = draw(st.integers(0, len(exe.constants) - 1))
        exe.constants[i] = np.zeros(draw(st.sampled_from([(0,), (1,), (3, 3), (1000,)])),
                                    dtype=draw(st.sampled_from(["float32", "float16", "int64"])))
    else:
        # the object's structure (ELF header, section headers, symbol table): what LLVM parses when the
        # object is loaded. The code's own bytes are not damaged here: changed code runs as changed (an
        # executable is code; see docs/SECURITY.md), so only loading is judged for this kind.
        obj = bytearray(exe.object_code)
        shoff, = struct.unpack_from("<Q", obj, 0x28)
        shnum, = struct.unpack_from("<H", obj, 0x3C)
        spots = list(range(0, 64)) + list(range(shoff, min(shoff + 64 * shnum, len(obj))))
        for k in range(shnum):
            sh_type, = struct.unpack_from("<I", obj, shoff + 64 * k + 4)
            off, size = struct.unpack_from("<QQ", obj, shoff + 64 * k + 0x18)
            if sh_type == 2:
                spots += [off + 24 * j + f for j in range(size // 24) for f in (0, 1, 2, 3, 4, 6, 7)]
        for _ in range(draw(st.integers(1, 4))):
            pos = draw(st.sampled_from(spots))
            obj[pos] ^= 1 << draw(st.integers(0, 7))
        exe.object_code = bytes(obj)
        return exe.save(), False
    return exe.save(), True


# --- ONNX models (from_onnx reads untrusted files) ----------------------------------------------------------

def onnx_seeds() -> dict:
    """Small valid ONNX models (serialized) covering the converters whose inputs size what they allocate:
    shape arithmetic into Reshape / Expand / ConstantOfShape / Range / Tile / Pad / Resize / Slice, and a
    matmul / conv / normalization body. Built with ``onnx.helper`` (imported here: only the ONNX fuzzer
    needs onnx)."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    def model(nodes, ins, outs, inits, opset=18):
        g = h.make_graph(nodes, "g", ins, outs, [nh.from_array(np.asarray(v), k) for k, v in inits.items()])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
        m.ir_version = 9
        return m.SerializeToString()

    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    i64 = lambda *v: np.array(v, np.int64)
    x = h.make_tensor_value_info("x", T.FLOAT, ["n", 8])
    y = lambda rank: h.make_tensor_value_info("y", T.FLOAT, [f"o{i}" for i in range(rank)])
    shapes = model([
        h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "zero"], ["n"]),
        h.make_node("Unsqueeze", ["n", "zero1"], ["n1"]), h.make_node("Concat", ["n1", "four"], ["shp"], axis=0),
        h.make_node("MatMul", ["x", "w"], ["mm"]), h.make_node("Add", ["mm", "b"], ["a"]),
        h.make_node("Reshape", ["a", "shp"], ["r"]), h.make_node("Expand", ["r", "exp"], ["e"]),
        h.make_node("ConstantOfShape", ["cshape"], ["c"], value=h.make_tensor("v", T.FLOAT, [1], [0.5])),
        h.make_node("Range", ["zero", "lim", "one"], ["rg"]), h.make_node("Cast", ["rg"], ["rgf"], to=T.FLOAT),
        h.make_node("Tile", ["e", "reps"], ["t"]), h.make_node("Pad", ["t", "pads"], ["p"], mode="constant"),
        h.make_node("Slice", ["p", "st", "en", "ax"], ["sl"]), h.make_node("Add", ["sl", "rgf"], ["sr"]),
        h.make_node("Add", ["sr", "c"], ["y"])],
        [x], [y(3)], {"zero": np.int64(0), "zero1": i64(0), "four": i64(4), "w": f32(8, 4), "b": f32(4), "exp": i64(2, 1, 4),
                   "cshape": i64(4), "lim": np.int64(4), "one": np.int64(1), "reps": i64(1, 1, 2), "pads": i64(0, 0, 1, 0, 0, 1),
                   "st": i64(0), "en": i64(4), "ax": i64(2)})
    img = h.make_tensor_value_info("x", T.FLOAT, ["n", 3, 8, 8])
    conv = model([
        h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        h.make_node("BatchNormalization", ["c", "g", "bb", "m", "v"], ["bn"]), h.make_node("Relu", ["bn"], ["r"]),
        h.make_node("Resize", ["r", "", "sc"], ["rs"], mode="linear"),
        h.make_node("ConvTranspose", ["rs", "wt"], ["ct"], strides=[2, 2], pads=[1, 1, 1, 1]),
        h.make_node("GlobalAveragePool", ["ct"], ["gp"]), h.make_node("Flatten", ["gp"], ["fl"]),
        h.make_node("Softmax", ["fl"], ["y"], axis=-1)],
        [img], [y(2)], {"w": f32(4, 3, 3, 3), "b": f32(4), "g": f32(4), "bb": f32(4), "m": f32(4),
                     "v": np.abs(f32(4)) + 1, "sc": np.array([1, 1, 2, 2], np.float32), "wt": f32(4, 2, 4, 4)})
    seq = h.make_tensor_value_info("x", T.FLOAT, ["n", "t", 6])
    attn = model([
        h.make_node("MatMul", ["x", "wq"], ["q"]), h.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        h.make_node("MatMul", ["q", "xt"], ["s"]), h.make_node("Mul", ["s", "scale"], ["ss"]),
        h.make_node("Softmax", ["ss"], ["p"], axis=-1), h.make_node("MatMul", ["p", "x"], ["o"]),
        h.make_node("LayerNormalization", ["o", "g", "bb"], ["ln"], axis=-1),
        h.make_node("CumSum", ["ln", "ax"], ["cs"]), h.make_node("Split", ["cs", "sp"], ["s1", "s2"], axis=2),
        h.make_node("Concat", ["s2", "s1"], ["cat"], axis=2), h.make_node("Einsum", ["cat", "wq"], ["y"], equation="btd,de->bte")],
        [seq], [y(3)], {"wq": f32(6, 6), "scale": np.array(0.4, np.float32), "g": f32(6), "bb": f32(6),
                     "ax": np.int64(1), "sp": i64(2, 4)})
    return {"shapes": shapes, "conv": conv, "attn": attn}


_ONNX_SEEDS: dict = {}

#: Integer values that stress allocation sizes and index arithmetic.
_BIG_INTS = [0, 1, -1, 2, 3, -2, 7, 255, 65535, 1 << 20, 1 << 31, (1 << 31) - 1, 1 << 40, (1 << 62), -(1 << 62),
             (1 << 63) - 1, -(1 << 63)]


@st.composite
def damaged_onnx(draw) -> tuple[str, bytes]:
    """``(seed name, model bytes)``: a seed model (:func:`onnx_seeds`) with 1-3 structural damages -- an
    initializer's values or dims replaced by extreme ints, its raw bytes truncated or grown, an attribute's
    ints / floats changed, an op type swapped, an input renamed, a value_info dim made huge or negative,
    external data pointing elsewhere -- or raw byte damage of the serialized file."""
    import numpy as np
    import onnx

    if not _ONNX_SEEDS:
        _ONNX_SEEDS.update(onnx_seeds())
    name = draw(st.sampled_from(sorted(_ONNX_SEEDS)))
    good = _ONNX_SEEDS[name]
    if draw(st.integers(0, 5)) == 0:
        return name, draw(raw_damage(good))
    m = onnx.ModelProto()
    m.ParseFromString(good)
    g = m.graph
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["init_values", "init_dims", "init_bytes", "attr", "op_type", "input",
                                     "dim", "external"]))
        if what.startswith("init") and g.initializer:
            t = g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
            if what == "init_values" and t.data_type == onnx.TensorProto.INT64:
                n = min(64, max(1, int(np.prod(t.dims, dtype=object)) if len(t.dims) else 1))
                vals = draw(st.lists(st.sampled_from(_BIG_INTS), min_size=n, max_size=n))
                t.raw_data = np.array(vals, dtype=np.int64).tobytes()
            elif what == "init_dims":
                dims = draw(st.lists(st.sampled_from(_BIG_INTS + [4, 8]), min_size=0, max_size=4))
                del t.dims[:]
                t.dims.extend(dims)
            else:
                raw = t.raw_data
                t.raw_data = raw[:draw(st.integers(0, len(raw)))] if draw(st.booleans()) else raw + bytes(
                    draw(st.integers(1, 64)))
        elif what == "attr":
            nodes = [n for n in g.node if n.attribute]
            if nodes:
                a = draw(st.sampled_from(nodes)).attribute
                at = a[draw(st.integers(0, len(a) - 1))]
                if at.ints:
                    at.ints[draw(st.integers(0, len(at.ints) - 1))] = draw(st.sampled_from(_BIG_INTS))
                elif at.type == onnx.AttributeProto.INT:
                    at.i = draw(st.sampled_from(_BIG_INTS))
                elif at.type == onnx.AttributeProto.FLOAT:
                    at.f = draw(st.sampled_from([float("nan"), float("inf"), -1.0, 0.0, 1e30]))
        elif what == "op_type":
            node = g.node[draw(st.integers(0, len(g.node) - 1))]
            node.op_type = draw(st.sampled_from(["Reshape", "Expand", "Tile", "Range", "ConstantOfShape", "Pad",
                                                 "Resize", "Gather", "Slice", "Concat", "MatMul", "Conv", "Split",
                                                 "Einsum", "CumSum", "Identity", "NonZero", "Compress", "Unique", "If", "Loop", "NoSuchOp"]))
        elif what == "input":
            node = g.node[draw(st.integers(0, len(g.node) - 1))]
            if node.input:
                names = [v for n in g.node for v in n.output] + [t.name for t in g.initializer] + ["", "nope"]
                node.input[draw(st.integers(0, len(node.input) - 1))] = draw(st.sampled_from(names))
        elif what == "dim":
            dims = g.input[0].type.tensor_type.shape.dim
            d = dims[draw(st.integers(0, len(dims) - 1))]
            choice = draw(st.sampled_from(_BIG_INTS + ["n", "m", ""]))
            if isinstance(choice, str):
                d.dim_param = choice
            else:
                d.dim_value = max(min(choice, (1 << 63) - 1), -(1 << 63))
        elif what == "external" and g.initializer:
            t = g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
            t.data_location = onnx.TensorProto.EXTERNAL
            del t.external_data[:]
            for k, v in (("location", draw(st.sampled_from(["w.bin", "../w.bin", "/etc/passwd", "case.onnx", ""]))),
                         ("offset", str(draw(st.sampled_from(_BIG_INTS)))),
                         ("length", str(draw(st.sampled_from(_BIG_INTS))))):
                t.external_data.add(key=k, value=v)
    return name, m.SerializeToString()

"""EliminateCommonSubexpr: repeated pure op calls are bound once, uses follow the first binding,
runtime calls (which may write state) and calls that differ in an argument, a constant or an
attribute stay; the compiled result equals numpy float64; a Llama decode computes its rotary
tables once instead of once per layer."""
from pathlib import Path

import numpy as np

from builder.compile import compile as build
from builder.ir import relax as rx
from builder.ir.parser import parse
from builder.ir.structural import assert_structural_equal
from builder.transform import eliminate_common_subexpr
from runtime import VirtualMachine

ROOT = Path(__file__).resolve().parents[2]


BEFORE = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 8), dtype="float32"), y: R.Tensor(("n", 8), dtype="float32")) -> R.Tensor(("n", 8), dtype="float32"):
        n = T.int64()
        with R.dataflow():
            a: R.Tensor((n, 8), dtype="float32") = R.cos(x)
            b: R.Tensor((n, 8), dtype="float32") = R.cos(x)
            c: R.Tensor((n, 8), dtype="float32") = R.cos(y)
            d: R.Tensor((n, 8), dtype="float32") = R.multiply(a, R.const(2.0, "float32"))
            e: R.Tensor((n, 8), dtype="float32") = R.multiply(b, R.const(2.0, "float32"))
            f: R.Tensor((n, 8), dtype="float32") = R.multiply(b, R.const(3.0, "float32"))
            g: R.Tensor((n, 8), dtype="float32") = R.add(d, e)
            h: R.Tensor((n, 8), dtype="float32") = R.add(g, f)
            s: R.Tuple(R.Tensor((n, 4), dtype="float32"), R.Tensor((n, 4), dtype="float32")) = R.split(h, indices_or_sections=2, axis=1)
            s0: R.Tensor((n, 4), dtype="float32") = s[0]
            s1: R.Tensor((n, 4), dtype="float32") = s[0]
            s2: R.Tensor((n, 4), dtype="float32") = s[1]
            t: R.Tensor((n, 8), dtype="float32") = R.concat((s0, s1), axis=1)
            u: R.Tensor((n, 8), dtype="float32") = R.concat((s1, s2), axis=1)
            v: R.Tensor((n, 8), dtype="float32") = R.concat((s0, s2), axis=-1)
            tu: R.Tensor((n, 8), dtype="float32") = R.add(t, u)
            vc: R.Tensor((n, 8), dtype="float32") = R.add(v, c)
            w: R.Tensor((n, 8), dtype="float32") = R.add(tu, vc)
            R.output(w)
        return w
'''

AFTER = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 8), dtype="float32"), y: R.Tensor(("n", 8), dtype="float32")) -> R.Tensor(("n", 8), dtype="float32"):
        n = T.int64()
        with R.dataflow():
            a: R.Tensor((n, 8), dtype="float32") = R.cos(x)
            c: R.Tensor((n, 8), dtype="float32") = R.cos(y)
            d: R.Tensor((n, 8), dtype="float32") = R.multiply(a, R.const(2.0, "float32"))
            f: R.Tensor((n, 8), dtype="float32") = R.multiply(a, R.const(3.0, "float32"))
            g: R.Tensor((n, 8), dtype="float32") = R.add(d, d)
            h: R.Tensor((n, 8), dtype="float32") = R.add(g, f)
            s: R.Tuple(R.Tensor((n, 4), dtype="float32"), R.Tensor((n, 4), dtype="float32")) = R.split(h, indices_or_sections=2, axis=1)
            s0: R.Tensor((n, 4), dtype="float32") = s[0]
            s2: R.Tensor((n, 4), dtype="float32") = s[1]
            t: R.Tensor((n, 8), dtype="float32") = R.concat((s0, s0), axis=1)
            u: R.Tensor((n, 8), dtype="float32") = R.concat((s0, s2), axis=1)
            v: R.Tensor((n, 8), dtype="float32") = R.concat((s0, s2), axis=-1)
            tu: R.Tensor((n, 8), dtype="float32") = R.add(t, u)
            vc: R.Tensor((n, 8), dtype="float32") = R.add(v, c)
            w: R.Tensor((n, 8), dtype="float32") = R.add(tu, vc)
            R.output(w)
        return w
'''


def _reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = x.astype(np.float64), y.astype(np.float64)
    h = 2 * np.cos(x) + 2 * np.cos(x) + 3 * np.cos(x)
    s0, s2 = h[:, :4], h[:, 4:]
    return (np.concatenate([s0, s0], 1) + np.concatenate([s0, s2], 1)
            + np.concatenate([s0, s2], 1) + np.cos(y))


def test_repeated_calls_bound_once():
    """Equal calls (same op, arguments, constants, attributes) and equal tuple items merge;
    ``cos(y)`` vs ``cos(x)``, ``* 2`` vs ``* 3`` and ``s[0]`` vs ``s[1]`` do not. (``axis=1``
    and ``axis=-1`` are different attributes, so ``u`` and ``v`` stay two calls.)"""
    got = eliminate_common_subexpr(parse(BEFORE))
    assert_structural_equal(got, parse(AFTER))


def test_compiled_result_unchanged():
    """The pipeline (which runs the pass first) computes what numpy float64 does, batch 1 and 3."""
    vm = VirtualMachine(build(parse(BEFORE)))
    rng = np.random.default_rng(0)
    for n in (1, 3):
        x, y = (rng.standard_normal((n, 8)).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(vm["main"](x, y), _reference(x, y), rtol=1e-5, atol=1e-5)


STATEFUL = '''
@I.ir_module
class Module:
    @R.function(pure=False)
    def main(x: R.Tensor((2, 8), dtype="float32"), c: R.Object) -> R.Tuple(R.Tensor((2, 8), dtype="float32"), R.Tensor((2, 8), dtype="float32"), R.Tensor((2, 8), dtype="float32"), R.Tensor((2, 8), dtype="float32"), R.Object, R.Object):
        with R.dataflow():
            a: R.Tensor((2, 8), dtype="float32") = R.call_packed("test.counter", x, sinfo_args=R.Tensor((2, 8), dtype="float32"))
            b: R.Tensor((2, 8), dtype="float32") = R.call_packed("test.counter", x, sinfo_args=R.Tensor((2, 8), dtype="float32"))
            p: R.Tensor((2, 8), dtype="float32") = R.call_pure_packed("test.pure", x, sinfo_args=(R.Tensor((2, 8), dtype="float32"),))
            q: R.Tensor((2, 8), dtype="float32") = R.call_pure_packed("test.pure", x, sinfo_args=(R.Tensor((2, 8), dtype="float32"),))
            o1: R.Object = R.call_pure_packed("test.make", x, sinfo_args=(R.Object,))
            o2: R.Object = R.call_pure_packed("test.make", x, sinfo_args=(R.Object,))
            out: R.Tuple(R.Tensor((2, 8), dtype="float32"), R.Tensor((2, 8), dtype="float32"), R.Tensor((2, 8), dtype="float32"), R.Tensor((2, 8), dtype="float32"), R.Object, R.Object) = (a, b, p, q, o1, o2)
            R.output(out)
        return out
'''


def test_runtime_calls_stay_but_equal_pure_packed_tensor_calls_merge():
    """Two equal impure ``R.call_packed`` calls stay two (the KV cache's update writes its state); two
    equal ``call_pure_packed`` calls of a tensor merge (the cache's positions and mask, computed by every
    layer), two of an object stay two (an object has an identity)."""
    got = eliminate_common_subexpr(parse(STATEFUL))
    want = STATEFUL.replace('            q: R.Tensor((2, 8), dtype="float32") = R.call_pure_packed("test.pure", x, '
                            'sinfo_args=(R.Tensor((2, 8), dtype="float32"),))\n', "").replace("(a, b, p, q, o1, o2)",
                                                                                             "(a, b, p, p, o1, o2)")
    assert want != STATEFUL
    assert_structural_equal(got, parse(want))


def test_llama_decode_rotary_tables_once():
    """A 3-layer Llama decode: ``cos`` and ``sin`` of the positions were bound 6 times each (q and
    k of every layer), now once."""
    import schemas
    from builder.build_model import export_recipe

    recipe = schemas.load_recipe(ROOT / "recipes" / "llama.yaml", [
        "num_layers=3", "hidden_size=64", "intermediate_size=96", "num_heads=4", "num_kv_heads=2",
        "head_dim=16", "vocab_size=50"])
    mod = export_recipe(recipe)[0]
    got = eliminate_common_subexpr(mod)
    for op in ("relax.cos", "relax.sin"):
        assert (_count(mod["decode"], op), _count(got["decode"], op)) == (6, 1)


def _count(func: rx.Function, op: str) -> int:
    return sum(1 for block in func.body.blocks for b in block.bindings
               if isinstance(b.value, rx.Call) and isinstance(b.value.op, rx.Op) and b.value.op.name == op)

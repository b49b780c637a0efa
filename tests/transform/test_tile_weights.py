"""TileWeights (issue 15): a model's float Linear weights read in row tiles made once by a weight
transform the VM keeps; which weights it takes, and the VM's keeping rules (read-only arrays only,
the same arrays, a replaced array computed afresh), against float64 numpy."""
import numpy as np
import pytest

import builder
from builder import nn
from builder.ir.parser import parse
from builder.nn import spec
from builder.transform import SelectKernels, TileWeights
from runtime import VirtualMachine


class _MLP(nn.Module):
    def __init__(self, dtype: str = "float32"):
        self.up = nn.Linear(40, 48, bias=True, dtype=dtype)      # 48 rows: three tiles
        self.down = nn.Linear(48, 20, bias=False, dtype=dtype)   # 20 rows: left row-major

    def forward(self, x):
        return self.down(nn.op.silu(self.up(x)))


SPEC = {"forward": {"x": spec.Tensor(["n", 40], "float32")}}


def _model(seed: int = 0):
    net = _MLP()
    rng = np.random.default_rng(seed)
    params = {}
    for name, p in net.named_parameters():
        params[name] = rng.standard_normal([int(d) for d in p.shape]).astype(np.float32) * 0.2
    mod, named = net.export_tvm(SPEC)
    return mod, [params[n] for n, _ in named], params


def _reference(x, p):
    h = x.astype(np.float64) @ p["up.weight"].T.astype(np.float64) + p["up.bias"]
    h = h / (1 + np.exp(-h))
    return h @ p["down.weight"].T.astype(np.float64)


def _read_only(arrays):
    for a in arrays:
        a.flags.writeable = False
    return arrays


def test_the_pass_tiles_model_weights_of_whole_tiles_only():
    mod, _, _ = _model()
    out = TileWeights()(SelectKernels()(mod))
    text = out.script()
    assert text.count("tile_rows") >= 2          # the PrimFunc and one call
    fn = out["forward"]
    tiled = [b for blk in fn.body.blocks for b in blk.bindings if b.var.name_hint.endswith("_tiled")]
    assert [b.var.name_hint for b in tiled] == ["up_weight_tiled"]
    assert [int(d) for d in tiled[0].var.struct_info.shape] == [3, 40, 16]
    back = parse(text)                           # the tiled spec and the transform's attribute print and parse
    assert back.script() == text and back["tile_rows"].attrs["mb.weight_transform"] is True


class _Three(nn.Module):
    """Three tileable weights of three shapes."""

    def __init__(self):
        self.a = nn.Linear(40, 48, bias=False)
        self.b = nn.Linear(48, 32, bias=False)
        self.c = nn.Linear(32, 64, bias=False)

    def forward(self, x):
        return self.c(nn.op.silu(self.b(self.a(x))))


def test_weights_of_every_shape_share_one_transform_kernel():
    """One ``tile_rows`` PrimFunc of symbolic shape ``(rows, cols)`` serves every float32 weight (each call's
    result static: ``(out / 16, in, 16)``), and the model computes what numpy does."""
    net = _Three()
    rng = np.random.default_rng(5)
    params = {name: (rng.standard_normal([int(d) for d in p.shape]) * 0.2).astype(np.float32)
              for name, p in net.named_parameters()}
    mod, named = net.export_tvm(SPEC)
    out = TileWeights()(SelectKernels()(mod))
    transforms = [name for name, f in out.functions.items() if name.startswith("tile_rows")]
    assert transforms == ["tile_rows"]
    assert [str(d) for d in out["tile_rows"].params[0].shape] == ["rows", "cols"]
    tiled = [b.var for blk in out["forward"].body.blocks for b in blk.bindings if b.var.name_hint.endswith("_tiled")]
    assert [[int(d) for d in v.struct_info.shape] for v in tiled] == [[3, 40, 16], [2, 48, 16], [4, 32, 16]]
    exe = builder.compile(mod)
    assert [n for n, m in exe.kernels.items() if m.get("weight_transform")] == ["tile_rows"]
    x = rng.standard_normal((7, 40)).astype(np.float32)
    got = VirtualMachine(exe)["forward"](x, *_read_only([params[n] for n, _ in named]))
    h = x.astype(np.float64) @ params["a.weight"].T @ params["b.weight"].T
    want = (h / (1 + np.exp(-h))) @ params["c.weight"].T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_weights_that_are_inputs_stay_row_major():
    """A function whose weight is an input (``num_input`` counts it) is not rewritten."""
    mod, _, _ = _model()
    fn = mod["forward"]
    fn.attrs["num_input"] = len(fn.params)
    out = TileWeights()(SelectKernels()(mod))
    assert "tile_rows" not in out.script()


def test_tiled_kernels_compute_the_model_and_the_tiles_are_kept():
    mod, weights, params = _model()
    exe = builder.compile(mod)
    kinds = {name: meta.get("kernel", "") for name, meta in exe.kernels.items()}
    assert any(k.endswith("+tiles") for k in kinds.values()), kinds
    assert [n for n, m in exe.kernels.items() if m.get("weight_transform")] == ["tile_rows"]
    vm = VirtualMachine(exe)
    rng = np.random.default_rng(1)
    weights = _read_only(weights)
    x = rng.standard_normal((13, 40)).astype(np.float32)
    y = vm["forward"](x, *weights)
    np.testing.assert_allclose(y, _reference(x, params), rtol=1e-5, atol=1e-5)
    assert len(vm.kept) == 1
    (src, tiles), = vm.kept.values()
    assert src is weights[0]
    assert vm.transformed_params("forward") == [1]      # up.weight (after x): what the transform reads
    np.testing.assert_array_equal(tiles, weights[0].reshape(3, 16, 40).transpose(0, 2, 1))
    for m in (1, 5, 40):    # the GEMV-like tiles, their remainders and the GEMM: the same tiles
        x = rng.standard_normal((m, 40)).astype(np.float32)
        np.testing.assert_allclose(vm["forward"](x, *weights), _reference(x, params), rtol=1e-5, atol=1e-5)
    assert len(vm.kept) == 1 and next(iter(vm.kept.values()))[1] is tiles


def test_writable_or_replaced_weights_are_transformed_again():
    mod, weights, params = _model()
    vm = VirtualMachine(builder.compile(mod))
    x = np.random.default_rng(2).standard_normal((4, 40)).astype(np.float32)
    np.testing.assert_allclose(vm["forward"](x, *weights), _reference(x, params), rtol=1e-5, atol=1e-5)
    assert not vm.kept                       # writable: may change between calls
    weights[0][:] *= -1.0                    # changed in place: the next call sees it
    params = {**params, "up.weight": weights[0]}
    np.testing.assert_allclose(vm["forward"](x, *weights), _reference(x, params), rtol=1e-5, atol=1e-5)
    _read_only(weights)
    vm["forward"](x, *weights)
    first = next(iter(vm.kept.values()))[1]
    other = _read_only([np.ascontiguousarray(weights[0][::-1])])[0]   # another array, other values
    params = {**params, "up.weight": other}
    y = vm["forward"](x, other, *weights[1:])
    np.testing.assert_allclose(y, _reference(x, params), rtol=1e-5, atol=1e-5)
    assert len(vm.kept) == 1 and next(iter(vm.kept.values()))[1] is not first
    other.flags.writeable = True             # made writable again and changed: computed afresh
    other[:] = 0.5
    params = {**params, "up.weight": other}
    np.testing.assert_allclose(vm["forward"](x, other, *weights[1:]), _reference(x, params), rtol=1e-5, atol=1e-5)


class _TwoFunctions(_MLP):
    def prefill(self, x):
        return self.forward(x)


def test_functions_share_the_kept_tiles():
    """Two functions over the same weights (prefill and decode) tile each weight once."""
    net = _TwoFunctions()
    mod, named = net.export_tvm({"forward": SPEC["forward"], "prefill": SPEC["forward"]})
    rng = np.random.default_rng(4)
    params = {n: (rng.standard_normal([int(d) for d in p.shape]) * 0.2).astype(np.float32) for n, p in named}
    weights = _read_only([params[n] for n, _ in named])
    vm = VirtualMachine(builder.compile(mod))
    x = rng.standard_normal((3, 40)).astype(np.float32)
    for fname in ("forward", "prefill", "forward"):
        np.testing.assert_allclose(vm[fname](x, *weights), _reference(x, params), rtol=1e-5, atol=1e-5)
    assert len(vm.kept) == 1


def test_built_recipes_make_their_weights_read_only():
    """A built model's parameters become read-only when a function is taken (the VM keeps their
    tiles); assigning a new array changes the weight."""
    m = builder.build("recipes/llama_mlp.yaml", ["hidden_size=64", "intermediate_size=96", "dtype=float32"])
    fn = m["forward"]
    name = next(n for n in m.param_names if n.endswith("weight"))
    assert not m.params[name].flags.writeable
    with pytest.raises(ValueError):
        m.params[name][0, 0] = 1.0
    x = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)
    before = fn(x)
    m.params[name] = np.zeros_like(m.params[name])
    assert not np.allclose(m["forward"](x), before)


def test_constant_weights_of_imported_models_are_tiled_at_build_time():
    """Weights that are constants (a torch model through ``from_exported_program``, its parameters bound as
    named constants): tiled in numpy when the module is built, no weight transform left; the 48-row
    Linear on the row tiles, the 20-row one row-major; PyTorch's values."""
    torch = pytest.importorskip("torch")
    from builder.frontend import from_exported_program

    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(40, 48), torch.nn.SiLU(), torch.nn.Linear(48, 20, bias=False)).eval()
    x = torch.randn(5, 40)
    mod = TileWeights()(SelectKernels()(from_exported_program(torch.export.export(model, (x,)))))
    text = mod.script()
    assert "tile_rows" not in text                       # no transform at run time: the constant is tiled
    consts = [c for c in _constants(mod["main"]) if c.data.ndim == 3]
    assert [c.data.shape for c in consts] == [(3, 40, 16)]
    w = model[0].weight.detach().numpy()
    np.testing.assert_array_equal(consts[0].data, w.reshape(3, 16, 40).transpose(0, 2, 1))
    exe = builder.compile(from_exported_program(torch.export.export(model, (x,))))
    fams = sorted(k["kernel"] for k in exe.kernels.values())
    assert any(f.endswith("+tiles") for f in fams), fams
    xs = torch.randn(5, 40)
    with torch.no_grad():
        want = model(xs).numpy()
    np.testing.assert_allclose(np.asarray(VirtualMachine(exe)["main"](xs.numpy())), want, rtol=1e-5, atol=1e-5)


def _constants(fn):
    from builder.ir import relax as rx

    out = []
    for blk in fn.body.blocks:
        for b in blk.bindings:
            v = b.value
            if isinstance(v, rx.Constant):
                out.append(v)
            elif isinstance(v, rx.Call):
                args = v.args[1].fields if len(v.args) > 1 and isinstance(v.args[1], rx.Tuple) else v.args
                out.extend(a for a in args if isinstance(a, rx.Constant))
    return out

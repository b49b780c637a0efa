"""Exported IR printed byte for byte as TVM prints it (files from shared/reference/tvm_ir/)."""
from pathlib import Path

import pytest

from builder import nn
from builder.ir.expr import Var
from helpers.exporter_models import DupModel

DATA = Path(__file__).resolve().parent.parent / "data" / "ir"


def golden(name: str) -> str:
    return (DATA / f"{name}.txt").read_text()


class UserRelu(nn.Module):
    def forward(self, x: nn.Tensor):
        return nn.op.relu(x)


class ReluSilu(nn.Module):
    def forward_relu(self, x: nn.Tensor):
        return nn.relu(x)

    def forward_silu(self, x: nn.Tensor):
        return nn.silu(x)


class LlamaMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, dtype="float16", bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, dtype="float16", bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, dtype="float16", bias=False)

    def forward(self, x: nn.Tensor):
        gate = self.gate_proj(x)
        up = self.up_proj(x)
        return self.down_proj(nn.op.silu(gate) * up)


def T(shape, dtype="float32"):
    return nn.spec.Tensor(shape, dtype)


def _dup_args(kind):
    if kind == "same_python_string":
        return ["hidden_size", "hidden_size"]
    if kind == "different_python_string":
        return ["hidden_size", "intermediate_size"]
    if kind == "same_tir_var":
        d = Var("hidden_size", "int64")
        return [d, d]
    return [Var("hidden_size", "int64"), Var("intermediate_size", "int64")]


CASES = {
    "relu_static": (lambda: nn.ReLU(), {"forward": {"x": T((3, 3))}}, False),
    "user_module_relu": (lambda: UserRelu(), {"forward": {"x": T((3, 3))}}, False),
    "relu_debug": (lambda: nn.ReLU(), {"forward": {"x": T((3, 3))}}, True),
    "relu_dynamic_batch": (lambda: nn.ReLU(), {"forward": {"x": T([Var("batch_size", "int64"), 8])}}, False),
    "relu_silu_shared_dynamic": (
        lambda: ReluSilu(),
        {"forward_relu": {"x": T((Var("batch_size", "int64"), 8))},
         "forward_silu": {"x": T((Var("batch_size", "int64"), 8))}},
        False,
    ),
    "llama_mlp_fp16_dynamic": (lambda: LlamaMLP(4096, 11008),
                               {"forward": {"x": T((Var("batch_size", "int64"), 4096), "float16")}}, False),
    "linear_dynamic_shape_debug": (lambda: nn.Linear(4, "n", bias=True), {"forward": {"x": T((1, 4))}}, True),
    "layernorm_4096": (lambda: nn.LayerNorm(4096), {"forward": {"x": T(("batch_size", "seq_len", 4096))}}, False),
    "rmsnorm_4096": (lambda: nn.RMSNorm(4096, axes=-1, bias=False),
                     {"forward": {"x": T(("batch_size", "seq_len", 4096))}}, False),
    "conv1d_80_384_k3_p1": (lambda: nn.Conv1D(80, 384, kernel_size=3, padding=1),
                            {"forward": {"x": T(("batch_size", 80, 3000))}}, False),
    "embedding_32000_4096": (lambda: nn.Embedding(32000, 4096),
                             {"forward": {"x": T(("batch", "seq"), "int32")}}, False),
}
for _kind in ("same_python_string", "different_python_string", "same_tir_var",
              "distinct_tir_vars_with_distinct_names"):
    CASES[f"duplicate_names_{_kind}"] = (
        (lambda k=_kind: DupModel(*_dup_args(k))),
        {"forward": {"state": T(["batch_size", 1024])}},
        False,
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    make, spec, debug = CASES[name]
    mod, params = make().export_tvm(spec=spec, debug=debug)
    assert mod.script() == golden(name)


def test_golden_files_all_covered():
    assert {p.stem for p in DATA.glob("*.txt")} == set(CASES)


def test_distinct_vars_with_same_name_stay_distinct():
    mod, _ = DupModel(Var("hidden_size", "int64"), Var("hidden_size", "int64")).export_tvm(
        spec={"forward": {"state": T(["batch_size", 1024])}})
    text = mod.script()
    assert 'up_weights: R.Tensor(("hidden_size_1", "hidden_size")' in text
    assert "hidden_size_1 = T.int64()" in text


def test_params_named_by_module_path():
    _, params = LlamaMLP(64, 128).export_tvm(spec={"forward": {"x": T(("n", 64), "float16")}})
    assert [n for n, _ in params] == ["gate_proj.weight", "up_proj.weight", "down_proj.weight"]
    assert params[0][1].shape == [128, 64]

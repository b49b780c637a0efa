"""``nn.Module``\\ s of TVM's exporter tests (seed 001) that several of our tests export."""
from builder import nn


class GateUpMLP(nn.Module):
    """The LlamaMLP of ``test_generate_parameters``: ``gate_up_proj.weight`` is not a parameter of
    its own but the concatenation of ``gate_proj.weight`` and ``up_proj.weight``."""

    def __init__(self, hidden_size: int, intermediate_size: int, dtype: str = "float16"):
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, dtype=dtype, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, dtype=dtype, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, dtype=dtype, bias=False)
        self.gate_up_proj = nn.Linear(hidden_size, intermediate_size, dtype=dtype, bias=False)
        self.gate_up_proj.weight = nn.op.concat(
            [self.gate_proj.weight, self.up_proj.weight], dim=0, name="gate_up_proj_weights")

    def forward(self, x: nn.Tensor):
        concat_gate_up = self.gate_up_proj(x)
        gate, up = nn.op.split(concat_gate_up, 2, axis=-1)
        return self.down_proj(nn.op.silu(gate) * up)


class DupLinear(nn.Module):
    """``state @ weights.T`` with ``weights`` (output_size, input_size), float32."""

    def __init__(self, input_size, output_size):
        self.weights = nn.Parameter([output_size, input_size], dtype="float32")

    def forward(self, state: nn.Tensor):
        return nn.op.matmul(state, nn.op.permute_dims(self.weights))


class DupModel(nn.Module):
    """The model of ``test_duplicate_names``: three :class:`DupLinear` (1024 -> hidden ->
    intermediate -> hidden) whose sizes may be the same or different symbolic variables."""

    def __init__(self, hidden_size, intermediate_size):
        self.embedding = DupLinear(1024, hidden_size)
        self.up = DupLinear(hidden_size, intermediate_size)
        self.down = DupLinear(intermediate_size, hidden_size)

    def forward(self, state: nn.Tensor):
        state = self.embedding(state)
        state = self.up(state)
        state = nn.op.silu(state)
        assert state.dtype == "float32"
        return self.down(state)

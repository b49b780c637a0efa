"""``nn.Module.get_parameter`` (the lookup behind ``fc.weight`` in recipes), ``nn.ParameterLayer`` (a recipe's
``Parameter`` layer) and ``nn.Conv2D``'s settings: shapes, names and the errors they raise."""
import pytest

from builder import nn


def test_get_parameter_finds_dotted_names_and_names_those_it_has():
    tree = nn.ModuleList([nn.Linear(4, 3), nn.Linear(3, 2, bias=False)])
    assert tree.get_parameter("0.bias") is tree[0].bias
    assert tree[1].get_parameter("weight") is tree[1].weight
    with pytest.raises(AttributeError, match=r"^Linear has no parameter 'bias' \(its parameters: weight\)$"):
        tree[1].get_parameter("bias")
    with pytest.raises(AttributeError, match=r"^SiLU has no parameters$"):
        nn.SiLU().get_parameter("weight")
    many = nn.ModuleList([nn.Linear(2, 2) for _ in range(7)])
    with pytest.raises(AttributeError, match=r"5\.bias, \.\.\. \(14 in all\)\)$"):
        many.get_parameter("weight")
    with pytest.raises(AttributeError, match="no parameter 'forward'"):   # never an attribute of the object
        nn.Linear(2, 2).get_parameter("forward")


def test_a_parameter_layer_holds_one_tensor_and_its_init():
    layer = nn.ParameterLayer((1, 5, 8), "float16", init="zeros")
    assert layer.weight.shape == [1, 5, 8] and layer.weight.dtype == "float16"
    assert layer.weight.attrs["init"] == ("zeros", 0.02) and layer() is layer.weight
    with pytest.raises(ValueError, match="init must be one of normal, zeros, ones, got 'uniform'"):
        nn.ParameterLayer((2,), init="uniform")
    with pytest.raises(ValueError, match="std must be > 0"):
        nn.ParameterLayer((2,), std=0.0)


def test_conv2d_weight_shape_and_setting_errors():
    conv = nn.Conv2D(4, 6, [3, 2], stride=2, padding=[1, 0], groups=2, bias=False)
    assert conv.weight.shape == [6, 2, 3, 2] and conv.bias is None
    assert (conv.kernel_size, conv.stride, conv.padding, conv.dilation) == ((3, 2), (2, 2), (1, 0), (1, 1))
    with pytest.raises(ValueError, match=r"channels \(4 in, 6 out\) must be divisible by groups=4"):
        nn.Conv2D(4, 6, 3, groups=4)
    with pytest.raises(ValueError, match="kernel_size must be an int or two ints, got"):
        nn.Conv2D(4, 6, [3, 2, 1])

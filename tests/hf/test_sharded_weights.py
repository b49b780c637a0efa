"""runtime.load_params on a sharded checkpoint (``model.safetensors.index.json``): the tensors come from the
files the index names, exactly; an index that disagrees with its files, names a path outside its folder or
is not JSON is one WeightsError."""
import json

import numpy as np
import pytest

from runtime.weights import WeightsError, load_params, read_safetensors_header

save_file = pytest.importorskip("safetensors.numpy").save_file


def _sharded(tmp_path, wmap=None):
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (5,), (2, 2)))
    save_file({"a": a, "b": b}, str(tmp_path / "m-1.safetensors"))
    save_file({"c": c}, str(tmp_path / "m-2.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": wmap or {"a": "m-1.safetensors", "b": "m-1.safetensors",
                                                                        "c": "m-2.safetensors"}}))
    return index, {"x.a": a, "x.b": b, "x.c": c}


def test_tensors_come_from_their_files(tmp_path):
    index, want = _sharded(tmp_path)
    assert list(read_safetensors_header(index)) == ["a", "b", "c"]
    got = load_params(index, {k: (v.shape, "float32") for k, v in want.items()}, prefix="", name_map={"x.": ""})
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v)


@pytest.mark.parametrize("wmap, message", [
    ({"a": "m-1.safetensors", "b": "m-2.safetensors", "c": "m-2.safetensors"}, "m-1.safetensors holds 'b', which the "
                                                                              "index puts in m-2.safetensors"),
    ({"a": "m-1.safetensors", "c": "m-2.safetensors"}, "holds 'b', which the index does not name"),
    ({"a": "../m-1.safetensors"}, "is not a plain file name"),
    ({"a": "m-3.safetensors"}, "m-3.safetensors"),
])
def test_index_that_disagrees_is_refused(tmp_path, wmap, message):
    index, _ = _sharded(tmp_path, wmap)
    with pytest.raises(WeightsError) as info:
        read_safetensors_header(index)
    assert message in str(info.value)


def test_malformed_index(tmp_path):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text("{\"weight_map\": ")
    with pytest.raises(WeightsError, match="cannot read the index"):
        read_safetensors_header(index)
    index.write_text("{\"weight_map\": [1]}")
    with pytest.raises(WeightsError, match="weight_map"):
        read_safetensors_header(index)

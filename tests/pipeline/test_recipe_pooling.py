"""Pooling in a recipe's ``forward:``: masked mean pooling (sentence embeddings), first-token (CLS) pooling,
``max_pool2d`` / ``avg_pool2d`` on NCHW with kernel, stride and padding; each against float64 numpy."""
import numpy as np

import builder

POOL = """\
name: pooling
model:
  layers:
    fc: {type: Linear, in_features: 4, out_features: 4, bias: false}
functions:
  sentence:
    inputs:
      x: {shape: [batch, seq, 4], dtype: float32}
      mask: {shape: [batch, seq], dtype: int64}
    forward: |
      h = fc(x)
      return mean_pooling(h, mask), h[:, 0, :]
  image:
    inputs:
      x: {shape: [2, 3, 7, 6], dtype: float32}
    forward: |
      a = max_pool2d(x, kernel_size=3, stride=2, padding=1)
      b = avg_pool2d(x, kernel_size=[2, 3], stride=[2, 1], padding=[1, 0], count_include_pad=False)
      return a, b
"""


def _pool(x, kh, kw, sh, sw, ph, pw, reduce):
    """Pool (N, C, H, W) ``x`` as torch.nn.functional.max_pool2d / avg_pool2d (count_include_pad=False): the
    padding is NaN, which ``np.nanmax`` / ``np.nanmean`` skip."""
    n, c, H, W = x.shape
    padded = np.full((n, c, H + 2 * ph, W + 2 * pw), np.nan)
    padded[:, :, ph:ph + H, pw:pw + W] = x
    oh, ow = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(padded[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw].reshape(n, c, -1), axis=-1)
    return out


def test_pooling_ops_in_a_recipe_match_numpy(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(POOL)
    m = builder.build(path)
    w = m.params["fc.weight"].astype(np.float64)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=np.int64)
    h = x.astype(np.float64) @ w.T
    mean, cls = m["sentence"](x, mask)
    ref = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    np.testing.assert_allclose(mean, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cls, h[:, 0, :], rtol=1e-5, atol=1e-6)
    img = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    a, b = m["image"](img)
    x64 = img.astype(np.float64)
    np.testing.assert_allclose(a, _pool(x64, 3, 3, 2, 2, 1, 1, np.nanmax), rtol=1e-6)
    np.testing.assert_allclose(b, _pool(x64, 2, 3, 2, 1, 1, 0, np.nanmean), rtol=1e-5, atol=1e-6)
    assert a.shape == (2, 3, 4, 3) and b.shape == (2, 3, 4, 4)

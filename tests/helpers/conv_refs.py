"""Float64 numpy references of 2-D convolutions (PyTorch's definitions), shared by the op and the
lowering tests."""
import numpy as np


def conv2d_ref(x, w, b=None, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1):
    """torch.nn.functional.conv2d; pad = (top, left, bottom, right)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    n, c, h, wd = xp.shape
    o, cg, kh, kw = w.shape
    oh = (h - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dil[1] * (kw - 1) - 1) // stride[1] + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for ky in range(kh):
            for kx in range(kw):
                y0, x0 = ky * dil[0], kx * dil[1]
                patch = xs[:, :, y0:y0 + stride[0] * (oh - 1) + 1:stride[0],
                           x0:x0 + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, g * og:(g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, ky, kx])
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    return out


def conv_transpose2d_ref(x, w, b=None, stride=(1, 1), pad=(0, 0, 0, 0), out_pad=(0, 0), dil=(1, 1), groups=1):
    """``torch.nn.functional.conv_transpose2d`` in float64 as a scatter: input pixel (i, j) adds
    ``x * w[c, o, ky, kx]`` at ``(i*sH + ky*dH, j*sW + kx*dW)``; then the padding is cropped."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    fh = (h - 1) * stride[0] + dil[0] * (kh - 1) + 1 + out_pad[0]
    fw = (wd - 1) * stride[1] + dil[1] * (kw - 1) + 1 + out_pad[1]
    out = np.zeros((n, og * groups, fh, fw))
    for g in range(groups):
        for ky in range(kh):
            for kx in range(kw):
                contrib = np.einsum("nchw,co->nohw", x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg, :, ky, kx])
                y0, x0 = ky * dil[0], kx * dil[1]
                out[:, g * og:(g + 1) * og, y0:y0 + stride[0] * (h - 1) + 1:stride[0],
                    x0:x0 + stride[1] * (wd - 1) + 1:stride[1]] += contrib
    out = out[:, :, pad[0]:fh - pad[2], pad[1]:fw - pad[3]]
    return out if b is None else out + b.astype(np.float64)[None, :, None, None]

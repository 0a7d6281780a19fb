"""A small CNN in plain numpy: convolution, relu, 2x2 max pooling with tied windows, then a
linear read-out, differentiated by asd with respect to all its weights.

The convolution is a sum over kernel offsets of shifted slices times weights (a loop over the
9 offsets, never over pixels); max pooling is numpy's reshape-then-max. The image has flat
regions, so whole pooling windows tie, and a bias puts some feature-map entries exactly at the
relu kink. asd's subgradient is compared with the exact limiting gradient (the same numpy
function evaluated on power series in δ by asd.testing), and the script exits non-zero if they
differ.

Run: python examples/cnn_pooling.py
"""

from __future__ import annotations

import numpy as np

import asd
from asd.testing import limiting_gradient

IMAGE = np.array([[1.0, 1.0, 1.0, 1.0, 0.0, 0.0],
                  [1.0, 1.0, 1.0, 1.0, 0.0, 0.0],
                  [1.0, 1.0, 2.0, 2.0, 0.0, 0.0],
                  [0.0, 0.0, 2.0, 2.0, 1.0, 1.0],
                  [0.0, 0.0, 0.0, 0.0, 1.0, 1.0],
                  [0.0, 0.0, 0.0, 0.0, 1.0, 1.0]])
CHANNELS, K = 2, 3
SHAPES = {"kernel": (CHANNELS, K, K), "bias": (CHANNELS,), "readout": (CHANNELS * 2 * 2,)}


def unpack(theta):
    params, start = {}, 0
    for name, shape in SHAPES.items():
        size = int(np.prod(shape))
        params[name] = theta[start:start + size].reshape(shape)
        start += size
    return params


def conv2d(image, kernel, bias):
    """'Valid' cross-correlation: (C, K, K) kernels over an (H, W) image -> (C, H-K+1, W-K+1)."""
    h, w = image.shape[0] - K + 1, image.shape[1] - K + 1
    out = bias[:, None, None] + 0.0 * image[:h, :w]
    for i in range(K):
        for j in range(K):
            out = out + kernel[:, i:i + 1, j:j + 1] * image[i:i + h, j:j + w]
    return out


def max_pool_2x2(fmap):
    c, h, w = fmap.shape
    return fmap.reshape(c, h // 2, 2, w // 2, 2).max(axis=(2, 4))


def cnn_loss(theta):
    p = unpack(theta)
    fmap = np.maximum(conv2d(IMAGE, p["kernel"], p["bias"]), 0.0)
    pooled = max_pool_2x2(fmap)
    score = pooled.reshape(-1) @ p["readout"]
    return (score - 1.0) * (score - 1.0)


def initial_parameters() -> np.ndarray:
    kernel = np.zeros((CHANNELS, K, K))
    kernel[0] = [[0.25, 0.0, 0.0], [0.0, 0.25, 0.0], [0.0, 0.0, 0.25]]
    kernel[1] = [[0.5, -0.5, 0.0], [0.5, -0.5, 0.0], [0.5, -0.5, 0.0]]
    bias = np.array([-0.5, 0.0])
    readout = np.array([1.0, -0.5, 0.5, 1.0, 0.25, 0.5, -1.0, 0.5])
    return np.concatenate([kernel.ravel(), bias, readout])


def main() -> None:
    theta = initial_parameters()
    p = unpack(theta)
    pre = conv2d(IMAGE, p["kernel"], p["bias"])
    fmap = np.maximum(pre, 0.0)
    windows = fmap.reshape(CHANNELS, 2, 2, 2, 2).transpose(0, 1, 3, 2, 4).reshape(-1, 4)
    tied = int(np.sum(np.sum(windows == windows.max(1, keepdims=True), 1) > 1))
    print(f"feature-map entries exactly at the relu kink: {int(np.sum(pre == 0))} of {pre.size}")
    print(f"pooling windows whose maximum is tied: {tied} of {len(windows)}")
    assert tied > 0 and np.any(pre == 0)

    rng = np.random.default_rng(2)
    for trial in range(3):
        v = rng.integers(-256, 257, size=theta.shape) / 256  # dyadic: exact in float64
        value, g = asd.value_and_subgrad(cnn_loss, direction=v)(theta)
        exact_value, exact_g = limiting_gradient(cnn_loss, theta, v)
        exact_g = np.asarray(exact_g, dtype=float)
        err = float(np.max(np.abs(g - exact_g)))
        print(f"direction {trial}: loss {value:.6f}, |subgradient| {np.linalg.norm(g):.6f}, "
              f"max |asd - exact| = {err:.1e}")
        assert value == float(exact_value)
        np.testing.assert_allclose(g, exact_g, rtol=1e-12, atol=1e-12)
    print("ok: asd's subgradient of the CNN equals the exact limiting gradient")


if __name__ == "__main__":
    main()

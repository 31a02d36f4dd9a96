"""Small real models built from the example ops, each with fixed seeded weights and input.

Every model is a `tunecache.tune.Model` whose `run` performs one inference (1-50 ms here) and
returns its output, so a run can be checked for determinism. Shapes are what such models use,
not picked to make every op win: in some models the heuristic is already the best everywhere.

Where the issue's measured crossovers live:

- `filterbank`, `edges`: 31x31 kernels on a 128x128 image, where FFT convolution wins big;
- `cnn`: 16 channels at 64x64 with 3x3 kernels, where direct and im2col are close (mixed 7, 5,
  3 and 1 kernels around it); `separable`: 7x7 depthwise kernels, between im2col and direct;
- `regression`, `smoother`: matrix chains whose best order is not left to right (and one where
  it is);
- `mlp`, `attention`, `denoiser`: products from 32 to 1024 on a side, across the ~192^3 point
  from which two BLAS threads beat one on a quiet machine.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tunecache.examples.ops import chain3, chain4, conv2d, matmul
from tunecache.tune import Model

__all__ = [
    "ATTENTION",
    "CNN",
    "DENOISER",
    "EDGES",
    "FILTERBANK",
    "HELD_OUT",
    "MLP",
    "MODELS",
    "REGRESSION",
    "SEPARABLE",
    "SMOOTHER",
    "TUNED",
]

Array = np.ndarray[Any, np.dtype[Any]]
F32 = np.float32


def _weights(rng: np.random.Generator, *shape: int, fan_in: int) -> Array:
    """He-initialised float32 weights: activations keep their scale through the layers."""
    out: Array = rng.standard_normal(shape, dtype=F32) * F32(math.sqrt(2.0 / fan_in))
    return out


def _relu(x: Array) -> Array:
    out: Array = np.maximum(x, 0, out=x)
    return out


def _pool2(x: Array) -> Array:
    """2x2 max pooling of (c, h, w), as the maximum of four strided views (a reshape and a
    max over two short axes takes 30x longer)."""
    _, h, w = x.shape
    x = x[:, : h // 2 * 2, : w // 2 * 2]
    top = np.maximum(x[:, 0::2, 0::2], x[:, 0::2, 1::2])
    out: Array = np.maximum(top, np.maximum(x[:, 1::2, 0::2], x[:, 1::2, 1::2]), out=top)
    return out


def _conv_weights(rng: np.random.Generator, co: int, ci: int, k: int) -> Array:
    return _weights(rng, co, ci, k, k, fan_in=ci * k * k)


# --- cnn: a small image classifier with mixed kernel sizes ----------------------------------


class _CNN:
    """3x64x64 image -> 7x7 stem, 3x3, pool, 5x5, 1x1, pool, 3x3, global pool, 10 logits."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.image = rng.standard_normal((3, 64, 64)).astype(F32)
        self.convs = [
            _conv_weights(rng, 16, 3, 7),
            _conv_weights(rng, 16, 16, 3),
            _conv_weights(rng, 32, 16, 5),
            _conv_weights(rng, 32, 32, 1),
            _conv_weights(rng, 32, 32, 3),
        ]
        self.head = _weights(rng, 32, 10, fan_in=32)

    def __call__(self) -> Array:
        stem, mid, wide, point, last = self.convs
        x = _relu(conv2d(self.image, stem))
        x = _pool2(_relu(conv2d(x, mid)))
        x = _relu(conv2d(x, wide))
        x = _pool2(_relu(conv2d(x, point)))
        x = _relu(conv2d(x, last))
        out: Array = x.mean(axis=(1, 2)) @ self.head
        return out


# --- separable: a depthwise-separable (inverted residual) block -----------------------------


class _Separable:
    """16x64x64 features -> 3x3 conv, then 1x1 expand to 32, 7x7 depthwise, 1x1 project, add.

    Depthwise convolution is one single-channel conv2d per channel: the op has no groups, and
    every channel's call shares one key, so one decision serves all 32.
    """

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.features = rng.standard_normal((16, 64, 64)).astype(F32)
        self.stem = _conv_weights(rng, 16, 16, 3)
        self.expand = _conv_weights(rng, 32, 16, 1)
        self.depthwise = _conv_weights(rng, 32, 1, 7)
        self.project = _conv_weights(rng, 16, 32, 1)

    def __call__(self) -> Array:
        x = _relu(conv2d(self.features, self.stem))
        h = _relu(conv2d(x, self.expand))
        h = np.concatenate(
            [conv2d(h[c : c + 1], self.depthwise[c : c + 1]) for c in range(h.shape[0])]
        )
        out: Array = x + conv2d(_relu(h), self.project)
        return out


# --- filterbank and edges: long kernels on one channel --------------------------------------


def _gabor_bank(size: int, orientations: int, wavelength: float, sigma: float) -> Array:
    """Real Gabor kernels (orientations, 1, size, size): oriented edge and texture detectors."""
    half = (size - 1) / 2
    y, x = np.mgrid[-half : half + 1, -half : half + 1]
    kernels = []
    for i in range(orientations):
        theta = math.pi * i / orientations
        along = x * math.cos(theta) + y * math.sin(theta)
        envelope = np.exp(-(x**2 + y**2) / (2 * sigma**2))
        kernel = envelope * np.cos(2 * math.pi * along / wavelength)
        kernels.append(kernel - kernel.mean())
    return np.asarray(kernels, dtype=F32)[:, None]


def _gaussians(size: int, sigmas: tuple[float, ...]) -> Array:
    """Normalised Gaussian blur kernels (len(sigmas), 1, size, size)."""
    half = (size - 1) / 2
    y, x = np.mgrid[-half : half + 1, -half : half + 1]
    kernels = [np.exp(-(x**2 + y**2) / (2 * s**2)) for s in sigmas]
    return np.asarray([k / k.sum() for k in kernels], dtype=F32)[:, None]


class _FilterBank:
    """1x128x128 image -> 8 Gabor filters of 31x31 -> local energy pooled 8x8 -> 16 scores."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.image = rng.standard_normal((1, 128, 128)).astype(F32)
        self.bank = _gabor_bank(31, 8, wavelength=10.0, sigma=6.0)
        self.readout = _weights(rng, 8 * 16 * 16, 16, fan_in=8 * 16 * 16)

    def __call__(self) -> Array:
        responses = conv2d(self.image, self.bank)
        energy = (responses * responses).reshape(8, 16, 8, 16, 8).mean(axis=(2, 4))
        out: Array = energy.reshape(1, -1) @ self.readout
        return out


class _Edges:
    """1x128x128 image -> 4 Gaussian blurs of 31x31 -> 3 differences of Gaussians -> Sobel
    gradients (3x3) of each -> edge strength per scale."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.image = rng.standard_normal((1, 128, 128)).astype(F32)
        self.blurs = _gaussians(31, (1.0, 2.0, 4.0, 8.0))
        sobel = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], dtype=F32)
        gradients = np.zeros((6, 3, 3, 3), dtype=F32)
        for c in range(3):
            gradients[2 * c, c] = sobel
            gradients[2 * c + 1, c] = sobel.T
        self.gradients = gradients

    def __call__(self) -> Array:
        blurred = conv2d(self.image, self.blurs)
        dog = blurred[1:] - blurred[:-1]
        g = conv2d(np.ascontiguousarray(dog), self.gradients)
        out: Array = np.sqrt(g[0::2] ** 2 + g[1::2] ** 2)
        return out


# --- attention: one transformer block with a symbolic sequence length -----------------------


def _layer_norm(x: Array) -> Array:
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    out: Array = (x - mean) / np.sqrt(var + 1e-5)
    return out


def _softmax(x: Array) -> Array:
    """Row softmax, in place: at s=1024 the exponentials alone rival the products' time."""
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


class _Attention:
    """s tokens of width 128 -> 2-head self-attention -> 512-wide feed-forward, pre-norm."""

    width = 128
    heads = 2
    hidden = 512
    longest = 1024

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        d = self.width
        self.tokens = rng.standard_normal((self.longest, d)).astype(F32)
        self.wq, self.wk, self.wv, self.wo = (_weights(rng, d, d, fan_in=d) for _ in range(4))
        self.w1 = _weights(rng, d, self.hidden, fan_in=d)
        self.w2 = _weights(rng, self.hidden, d, fan_in=self.hidden)

    def __call__(self, s: int) -> Array:
        if not 1 <= s <= self.longest:
            raise ValueError(f"attention takes 1 to {self.longest} tokens, got {s}")
        x = self.tokens[:s]
        h = _layer_norm(x)
        q, k, v = matmul(h, self.wq), matmul(h, self.wk), matmul(h, self.wv)
        dh = self.width // self.heads
        scale = F32(1 / math.sqrt(dh))
        heads = []
        for i in range(self.heads):
            cols = slice(i * dh, (i + 1) * dh)
            scores = matmul(q[:, cols] * scale, np.ascontiguousarray(k[:, cols].T))
            heads.append(matmul(_softmax(scores), v[:, cols]))
        x = x + matmul(np.concatenate(heads, axis=1), self.wo)
        ff = _relu(matmul(_layer_norm(x), self.w1))
        out: Array = x + matmul(ff, self.w2)
        return out


# --- mlp ----------------------------------------------------------------------------------


class _MLP:
    """A batch of 256 vectors of 128 -> 512 -> 512 -> 128, ReLU between."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.batch = rng.standard_normal((256, 128)).astype(F32)
        self.layers = [
            _weights(rng, 128, 512, fan_in=128),
            _weights(rng, 512, 512, fan_in=512),
            _weights(rng, 512, 128, fan_in=512),
        ]

    def __call__(self) -> Array:
        x = self.batch
        for i, w in enumerate(self.layers):
            x = matmul(x, w)
            if i < len(self.layers) - 1:
                x = _relu(x)
        return x


# --- denoiser: frame-based spectral gating -------------------------------------------------


def _dct_basis(n: int) -> Array:
    """Orthonormal DCT-II basis (n, n): frames @ basis gives each frame's coefficients."""
    k = np.arange(n)[None, :]
    t = np.arange(n)[:, None]
    basis = np.cos(math.pi * (t + 0.5) * k / n) * math.sqrt(2.0 / n)
    basis[:, 0] /= math.sqrt(2.0)
    return basis.astype(F32)


class _Denoiser:
    """A noisy signal of 32768 samples -> 255 windowed frames of 256 (hop 128) -> DCT ->
    a gain from the coefficients' power smoothed over 9 frames x 9 bins -> inverse DCT ->
    overlap-add."""

    frame = 256
    hop = 128

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        n = 32768
        t = np.arange(n) / 8000.0
        clean = np.sin(2 * math.pi * 440 * t) + 0.5 * np.sin(2 * math.pi * 1250 * t)
        self.signal = (clean + 0.5 * rng.standard_normal(n)).astype(F32)
        # A sine window, applied at analysis and synthesis: its square overlap-adds to 1.
        self.window = np.sin(math.pi * (np.arange(self.frame) + 0.5) / self.frame).astype(F32)
        self.basis = _dct_basis(self.frame)
        self.inverse = np.ascontiguousarray(self.basis.T)
        self.smooth = np.full((1, 1, 9, 9), 1 / 81, dtype=F32)
        self.noise_power = F32(0.25)

    def __call__(self) -> Array:
        frames = np.lib.stride_tricks.sliding_window_view(self.signal, self.frame)[:: self.hop]
        coeffs = matmul(frames * self.window, self.basis)
        power = conv2d((coeffs * coeffs)[None], self.smooth)[0]
        gain = np.maximum(power - self.noise_power, 0) / (power + 1e-6)
        frames_out = matmul(coeffs * gain, self.inverse) * self.window
        out = np.zeros(self.signal.shape[0], dtype=F32)
        count, hop = frames_out.shape[0], self.hop
        out[: count * hop].reshape(count, hop)[:] += frames_out[:, :hop]
        out[hop : (count + 1) * hop].reshape(count, hop)[:] += frames_out[:, hop:]
        return out


# --- regression and smoother: matrix chains of very different shapes ------------------------


class _Regression:
    """Ridge regression of 8 targets on 32 features over 2000 samples: the coefficients
    G X^T y, the fitted values X G X^T y (the hat matrix applied to y), and one new point's
    prediction variance u X G (G = (X^T X + lambda I)^-1)."""

    def __init__(self, seed: int, samples: int = 2000, basis: bool = False) -> None:
        rng = np.random.default_rng(seed)
        features = 32
        if basis:
            # A Fourier basis over time instead of random features: a smoother, not a fit.
            t = np.arange(samples)[:, None] / samples
            f = np.arange(1, features // 2 + 1)[None, :]
            x = np.concatenate([np.cos(2 * math.pi * f * t), np.sin(2 * math.pi * f * t)], 1)
            self.x = x.astype(F32)
        else:
            self.x = rng.standard_normal((samples, features)).astype(F32)
        self.xt = np.ascontiguousarray(self.x.T)
        truth = rng.standard_normal((features, 8)).astype(F32)
        self.y = self.x @ truth + rng.standard_normal((samples, 8)).astype(F32)
        self.u = rng.standard_normal((1, samples)).astype(F32) / samples
        self.ridge = F32(1e-2 * samples)

    def __call__(self) -> Array:
        gram = matmul(self.xt, self.x)
        g = np.linalg.inv(gram + self.ridge * np.eye(gram.shape[0], dtype=F32)).astype(F32)
        coef = chain3(g, self.xt, self.y)
        fitted = chain4(self.x, g, self.xt, self.y)
        spread = chain3(self.u, self.x, g)
        out: Array = np.concatenate([coef.ravel(), fitted.ravel(), spread.ravel()])
        return out


# --- the models -------------------------------------------------------------------------------

CNN = Model("cnn", _CNN(seed=1))
SEPARABLE = Model("separable", _Separable(seed=2))
FILTERBANK = Model("filterbank", _FilterBank(seed=3))
EDGES = Model("edges", _Edges(seed=4))
ATTENTION = Model("attention", _Attention(seed=5), scenarios={"s": (1, 64, 256, 1024)})
MLP = Model("mlp", _MLP(seed=6))
DENOISER = Model("denoiser", _Denoiser(seed=7))
REGRESSION = Model("regression", _Regression(seed=8))
SMOOTHER = Model("smoother", _Regression(seed=9, samples=2048, basis=True))

#: every example model, in the order the demo runs them
MODELS: list[Model] = [
    CNN,
    SEPARABLE,
    FILTERBANK,
    EDGES,
    ATTENTION,
    MLP,
    DENOISER,
    REGRESSION,
    SMOOTHER,
]

# The held-out protocol: tune on TUNED, then apply the shared cache to HELD_OUT as it is. Each
# held-out model shares keys or signatures with a tuned one, which is what a shared cache is for:
# - edges <- filterbank: conv2d ci1 h128 w128 kh31 kw31, with co4 against co8 (a nearest-shape
#   borrow at distance 1);
# - attention <- mlp: matmul m256_k128_n512 and m256_k512_n128 exactly at s=256, and the other
#   sizes of the same signature by nearest shape;
# - smoother <- regression: chain4 a2048_b32_c32_d2048_e8 against a2000_b32_c32_d2000_e8,
#   chain3 a32_b32_c2048_d8 against a32_b32_c2000_d8 and the gram matmul m32_k2048_n32 against
#   m32_k2000_n32 (nearest shapes, distance 0.03-0.07);
# - separable <- cnn: conv2d ci16_co16_h64_w64_kh3_kw3 exactly (its 3x3 stem).
#: the models the held-out protocol tunes
TUNED: list[Model] = [CNN, FILTERBANK, MLP, DENOISER, REGRESSION]
#: the models that get the tuned models' shared cache, untuned
HELD_OUT: list[Model] = [SEPARABLE, EDGES, ATTENTION, SMOOTHER]

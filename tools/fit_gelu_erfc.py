#!/usr/bin/env python3
"""fit_gelu_erfc.py - regenerates the polynomial coefficients of the erf-form GELU in
src/backends/cpu/cpu_gelu_avx2.h (cpu_gelu_erf8). Not part of the build or the tests.

erfc(z) = t Q(t) e^(-z^2), t = 1 / (1 + p z) (Hastings' form, as in Abramowitz & Stegun
7.1.26), with Q of degree 7 fitted for minimax *relative* error over z in [0, 12.5/sqrt 2]
(the kernel masks x < -12 to 0 and clamps x at 12). p enters the kernel as the float
c = fl(p / sqrt 2) multiplying |x|, so the fit uses the p that float really gives.
Minimax by Lawson's algorithm (iteratively reweighted least squares) on Chebyshev nodes,
reference erfc from mpmath at 30 digits. Coefficients are rounded to float one at a time,
highest degree first, refitting the rest after each, so the rounding costs little.
Also fits e^r on |r| <= ln2/2 (degree 6, relative) for the exp of -x^2/2.

Usage: python3 tools/fit_gelu_erfc.py [p ...]   (default 0.428; needs numpy and mpmath)
"""
import sys

import mpmath as mp
import numpy as np

mp.mp.dps = 30
ZMAX = 12.5 / np.sqrt(2)


def lawson(V, y, w0, iters=300):
    """Weighted minimax fit of y by the columns of V (error weight w0)."""
    w = np.ones(len(y))
    for _ in range(iters):
        W = np.sqrt(w) * w0
        c, *_ = np.linalg.lstsq(V * W[:, None], y * W, rcond=None)
        e = np.abs((V @ c - y) * w0)
        w = w * e
        w /= w.sum()
    return c, e.max()


def chebyshev_nodes(lo, hi, n):
    u = np.cos(np.pi * (np.arange(n) + 0.5) / n)
    return (lo + hi) / 2 + (hi - lo) / 2 * u


def fit_q(p, deg=7, n=3000):
    c32 = np.float32(p / np.sqrt(2))
    peff = float(c32) * np.sqrt(2)
    t = chebyshev_nodes(1 / (1 + peff * ZMAX), 1.0, n)
    z = (1 / t - 1) / peff
    y = np.array([float(mp.erfc(v) * mp.exp(v * v)) for v in z]) / t  # Q(t) = erfcx(z) / t
    w0 = 1 / y
    V = np.vander(t, deg + 1, increasing=True)
    fixed = {}
    for j in range(deg, -1, -1):
        free = [i for i in range(deg + 1) if i not in fixed]
        rest = y - sum(fixed[i] * V[:, i] for i in fixed) if fixed else y
        c, _ = lawson(V[:, free], rest, w0)
        fixed[j] = float(np.float32(c[free.index(j)]))
    cf = np.array([fixed[i] for i in range(deg + 1)])
    return c32, cf, np.abs((V @ cf - y) * w0).max()


def fit_exp(deg=6, n=2000):
    r = chebyshev_nodes(-0.3466 * 1.002, 0.3466 * 1.002, n)
    y = np.exp(r)
    c, _ = lawson(np.vander(r, deg + 1, increasing=True), y, 1 / y, iters=200)
    cf = np.array([float(np.float32(v)) for v in c])
    return cf, np.abs(np.vander(r, deg + 1, increasing=True) @ cf / y - 1).max()


def main():
    for p in [float(a) for a in sys.argv[1:]] or [0.428]:
        c32, cf, err = fit_q(p)
        print(f"p = {p}: c = {c32:.9e}f, max relative error of Q (float coefficients) {err:.3g}")
        print("  Q, c0 first: " + ", ".join(f"{np.float32(v):.9e}f" for v in cf))
    ce, erre = fit_exp()
    print(f"e^r degree 6, max relative error {erre:.3g}: " + ", ".join(f"{np.float32(v):.9e}f" for v in ce))


if __name__ == "__main__":
    main()

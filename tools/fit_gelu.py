"""Fit the float32 GELU polynomials in codegen-cpu/src/fastmath.rs.

GELU's tail T(a) = Phi(-a) = erfc(a / sqrt 2) / 2 is 2^Q(a) for a = |x| up to
4 sqrt 2 (beyond, T < 2^-26 and is dropped); Q fits log2 T with its error
weighted by T, so that the absolute error of Phi is what is minimised.
2^f on [-1/2, 1/2] is fitted for relative error. Both by the weighted
minimax of tools/fit_erf.py. Prints the coefficients, highest degree first
as fastmath wants them, and the errors of a float32 evaluation.

    python tools/fit_gelu.py [degree of Q] [degree of 2^f]   (8 6)
"""

import math
import sys

import numpy as np

from fit_erf import horner32, lawson

CLAMP = 4.0 * math.sqrt(2.0)


def main():
    deg_q, deg_e = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (8, 6)
    erfc = np.vectorize(math.erfc)
    erf = np.vectorize(math.erf)
    a = np.linspace(0, CLAMP, 12000)
    tail = 0.5 * erfc(a / math.sqrt(2))
    q, err_q = lawson(a, np.log2(tail), tail * math.log(2), deg_q, iters=500)
    f = np.linspace(-0.5, 0.5, 4000)
    p, err_p = lawson(f, np.exp2(f), 1 / np.exp2(f), deg_e, iters=500)
    print(f"fit: Q (Phi absolute) {err_q:.2e}, 2^f relative {err_p:.2e}")
    print("Q =", [str(np.float32(c)) for c in q[::-1]])
    print("2^f =", [str(np.float32(c)) for c in p[::-1]])

    xs = np.linspace(-9, 9, 3_000_001).astype(np.float32)
    ax = np.abs(xs)
    v = horner32(q, np.minimum(ax, np.float32(CLAMP)))
    n = ((v + np.float32(12582912.0)).astype(np.float32) - np.float32(12582912.0)).astype(np.float32)
    t = (horner32(p, (v - n).astype(np.float32)) * np.exp2(n)).astype(np.float32)
    t = np.where(ax > np.float32(CLAMP), np.float32(0), t)
    phi = np.where(xs < 0, t, (np.float32(1) - t).astype(np.float32))
    got = (xs * phi).astype(np.float32).astype(np.float64)
    x64 = xs.astype(np.float64)
    want = 0.5 * x64 * (1 + erf(x64 / math.sqrt(2)))
    err = np.abs(got - want)
    rel = err / np.maximum(np.abs(want), 1e-30)
    print(f"float32: max |error| {err.max():.2e} at {xs[err.argmax()]}")
    for lo, hi in [(-1, 1), (-3, 3), (-5.6, -3)]:
        m = (xs > lo) & (xs < hi)
        print(f"  max relative error on ({lo}, {hi}): {rel[m].max():.2e}")


if __name__ == "__main__":
    main()

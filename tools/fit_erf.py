"""Fit the float32 erf polynomials in codegen-cpu/src/fastmath.rs.

erf(x) = x * P(x^2) below the split (relative error minimised) and
1 - exp(Q(|x|)) from the split to 4 (Q fits ln erfc, its error weighted by
erfc so that the error in erf is what is minimised). Each fit is a weighted
minimax by Lawson's iteration: least squares whose weights grow where the
error is largest. Prints the coefficients, highest degree first as fastmath
wants them, and the worst error of a float32 evaluation on 2M points.

    python tools/fit_erf.py [split] [degree of P] [degree of Q]   (0.7 4 6)
"""

import math
import sys

import numpy as np


def lawson(x, f, weight, degree, iters=300):
    basis = np.stack([x**k for k in range(degree + 1)], 1)
    u = np.full_like(x, 1.0 / len(x))
    for _ in range(iters):
        s = np.sqrt(u) * weight
        coeffs, *_ = np.linalg.lstsq(basis * s[:, None], f * s, rcond=None)
        err = np.abs((basis @ coeffs - f) * weight)
        u = u * err
        u /= u.sum()
    return coeffs, err.max()


def horner32(coeffs, v):
    r = np.full_like(v, np.float32(coeffs[-1]))
    for c in coeffs[-2::-1]:
        r = (r * v + np.float32(c)).astype(np.float32)
    return r


def main():
    split, deg_p, deg_q = (float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (0.7, 4, 6)
    erf = np.vectorize(math.erf)
    erfc = np.vectorize(math.erfc)
    x = np.linspace(1e-4, split, 4000)
    p, err_p = lawson(x * x, erf(x) / x, x / erf(x), deg_p)
    t = np.linspace(split, 4.0, 4000)
    q, err_q = lawson(t, np.log(erfc(t)), erfc(t), deg_q)
    print(f"fit: P relative {err_p:.2e}, Q (erf absolute) {err_q:.2e}")
    print("P =", [str(np.float32(c)) for c in p[::-1]])
    print("Q =", [str(np.float32(c)) for c in q[::-1]])
    xs = np.linspace(0, 6, 2_000_001).astype(np.float32)
    small = xs * horner32(p, (xs * xs).astype(np.float32))
    large = np.float32(1) - np.exp(horner32(q, np.minimum(xs, np.float32(4))))
    got = np.where(xs < np.float32(split), small, large).astype(np.float32)
    want = erf(xs.astype(np.float64))
    err = np.abs(got - want)
    rel = (err / np.maximum(want, 1e-30))[xs < split]
    print(f"float32: max |error| {err.max():.2e} at {xs[err.argmax()]}, max relative below the split {rel.max():.2e}")


if __name__ == "__main__":
    main()

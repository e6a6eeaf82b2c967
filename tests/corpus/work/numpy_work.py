# numpy: sort, cumulative sums, FFT, a matrix product (OpenBLAS threads) and
# a solve. Prints exact hashes where the result is exact and 9 significant
# digits where it is floating-point arithmetic.
import hashlib
import sys

import numpy as np

n = int(sys.argv[1])
rng = np.random.default_rng(7)
a = rng.standard_normal(n)
b = np.sort(a)
print("sorted", hashlib.sha256(b.tobytes()).hexdigest())
i = np.argsort(rng.integers(0, 1 << 40, n), kind="stable")
print("argsort", hashlib.sha256(i.tobytes()).hexdigest())
print("cumsum %.9e" % np.cumsum(b)[-1])
f = np.fft.rfft(a[: 1 << 20])
print("fft %.9e %.9e" % (np.abs(f).sum(), np.angle(f[1:100]).sum()))
m = rng.standard_normal((900, 900))
q = m @ m.T
print("matmul %.9e" % np.trace(q))
x = np.linalg.solve(q + 900 * np.eye(900), m[:, 0])
print("solve %.9e" % x.sum())
u, c = np.unique(rng.integers(0, 100000, n // 2), return_counts=True)
print("unique", len(u), int(c.max()))

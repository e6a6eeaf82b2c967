import numpy as np
n = 8_000_000                      # 64 MiB per array
a = np.arange(n, dtype=np.float64)
b = np.sqrt(a) * 2.0
c = a + b
s = float(c.sum())
want = float(n * (n - 1) / 2) + 2.0 * float(np.sqrt(np.arange(n, dtype=np.float64)).sum())
assert abs(s - want) / want < 1e-9, (s, want)
m = np.random.default_rng(1).standard_normal((1500, 1500))
q = m @ m.T
assert np.allclose(q, q.T)
print("numpy ok", s)

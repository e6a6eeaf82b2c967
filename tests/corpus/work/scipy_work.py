# scipy: a sparse 2-D Laplacian solved with SuperLU, its smallest
# eigenvalues with ARPACK (Fortran), a DCT and an image filter.
import sys

import numpy as np
import scipy.fft
import scipy.ndimage
import scipy.sparse
import scipy.sparse.linalg

k = int(sys.argv[1])
one = scipy.sparse.diags([-1, 2, -1], [-1, 0, 1], shape=(k, k))
eye = scipy.sparse.identity(k)
lap = (scipy.sparse.kron(one, eye) + scipy.sparse.kron(eye, one)).tocsc()
rhs = np.sin(np.arange(k * k) * 0.001)
x = scipy.sparse.linalg.spsolve(lap, rhs)
print("spsolve %.9e" % x.sum())
w = scipy.sparse.linalg.eigsh(lap, k=4, sigma=0, return_eigenvectors=False)
print("eigsh", " ".join("%.9e" % v for v in sorted(w)))
img = np.cos(np.arange(2 * k * 3 * k).reshape(2 * k, 3 * k) * 0.0007)
d = scipy.fft.dctn(img, norm="ortho")
print("dctn %.9e" % np.abs(d).sum())
g = scipy.ndimage.gaussian_filter(img, 3.0)
print("gaussian %.9e" % g.sum())

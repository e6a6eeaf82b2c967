# mlockall(MCL_CURRENT | MCL_FUTURE) at start (as real-time codes and MPI
# libraries do), then ordinary work on large buffers.
import ctypes
import hashlib
import sys

libc = ctypes.CDLL(None, use_errno=True)
if libc.mlockall(3) != 0:
    print("mlockall failed, errno", ctypes.get_errno())
    sys.exit(1)
N = int(sys.argv[1]) << 20
a = bytearray(N)
for off in range(0, N, 1 << 20):
    a[off : off + (1 << 20)] = hashlib.sha256(b"%d" % off).digest() * (1 << 15)
b = bytes(a[::-1])
print(hashlib.sha256(a).hexdigest(), hashlib.sha256(b).hexdigest())

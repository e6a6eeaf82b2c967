# A thread pool compressing and hashing 4 MiB slices of a large buffer
# (zlib, lzma and hashlib release the GIL: the threads run at once).
import concurrent.futures
import hashlib
import lzma
import sys
import zlib

data = open(sys.argv[1], "rb").read()
S = 4 << 20
parts = [memoryview(data)[i : i + S] for i in range(0, len(data), S)]


def work(p):
    z = zlib.compress(p, 6)
    x = lzma.compress(p[: S // 4], preset=1)
    return len(z), zlib.crc32(z), len(x), hashlib.sha256(p).hexdigest()[:16], zlib.decompress(z) == p


with concurrent.futures.ThreadPoolExecutor(2) as ex:
    for r in ex.map(work, parts):
        print(*r)

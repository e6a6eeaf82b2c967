# Pure Python: dictionaries, lists and strings (pymalloc's 1 MiB arenas and
# the large blocks of lists and dicts).
import hashlib
import sys

words = open(sys.argv[1]).read().split()
count = {}
for w in words:
    count[w] = count.get(w, 0) + 1
top = sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))
print(len(words), len(count), top[:5])
big = [(len(w) * 7919 + i) % 1000003 for i, w in enumerate(words)]
big.sort()
text = "\n".join(map(str, big))
print(hashlib.sha256(text.encode()).hexdigest())
pairs = {w: i for i, w in enumerate(words)}
print(sum(pairs.values()) % 1000000007)

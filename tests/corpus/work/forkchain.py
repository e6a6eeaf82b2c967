# A fork of a fork: each generation overwrites a large buffer and forks the
# next one; every generation must see exactly what its parent wrote (and
# its own writes). Prints, per generation, the hash of what it saw.
import hashlib
import os
import sys

N = int(sys.argv[1]) << 20
DEPTH = 3
buf = bytearray(N)


def fill(gen):
    block = hashlib.sha256(b"gen%d" % gen).digest() * (1 << 15)  # 1 MiB
    for off in range(0, N, 1 << 20):
        buf[off : off + (1 << 20)] = block
        buf[off : off + 8] = (off + gen).to_bytes(8, "little")


def expect(gen):
    block = hashlib.sha256(b"gen%d" % gen).digest() * (1 << 15)
    h = hashlib.sha256()
    for off in range(0, N, 1 << 20):
        h.update((off + gen).to_bytes(8, "little") + block[8:])
    return h.hexdigest()


def generation(gen):
    seen = hashlib.sha256(buf).hexdigest()  # what the parent left
    fill(gen)  # then our own writes
    mine = hashlib.sha256(buf).hexdigest()
    line = "gen %d inherited %s own %s" % (gen, seen == expect(gen - 1) if gen else "-", mine == expect(gen))
    if gen < DEPTH:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            out = generation(gen + 1)
            os.write(w, out.encode())
            os._exit(0)
        os.close(w)
        child = b""
        while True:
            c = os.read(r, 65536)
            if not c:
                break
            child += c
        _, status = os.waitpid(pid, 0)
        line += " child-status %d\n" % status + child.decode()
        # The parent's data after the child's writes: still its own.
        line += "\ngen %d after child %s" % (gen, hashlib.sha256(buf).hexdigest() == expect(gen))
    return line


print(generation(0))

# Threads doing socket I/O at the same time on large buffers: a TCP server
# thread and a client exchange data in both directions, and two threads of
# a socketpair (three rounds) send and receive at once (one blocked in recv_into while the
# other sends). Arguments: MiB to move each way, MiB per call (default 4).
# An error in any thread ends the process at once (its peers would block).
import hashlib
import os
import socket
import sys
import threading
import traceback

N = int(sys.argv[1]) << 20
CHUNK = int(sys.argv[2]) << 20 if len(sys.argv) > 2 else 4 << 20
src = bytearray(N)
for off in range(0, N, 1 << 20):
    src[off : off + (1 << 20)] = hashlib.sha256(b"%d" % off).digest() * (1 << 15)
want = hashlib.sha256(src).hexdigest()
results = {}


def fatal(f):
    def run(*a):
        try:
            f(*a)
        except BaseException:
            traceback.print_exc()
            sys.stdout.flush()
            os._exit(3)

    return run


def receive(sock, name, n):
    buf = bytearray(CHUNK)
    h = hashlib.sha256()
    got = 0
    while got < n:
        k = sock.recv_into(buf, min(CHUNK, n - got))
        if k == 0:
            break
        h.update(memoryview(buf)[:k])
        got += k
    results[name] = (got, h.hexdigest() == want)


def send(sock):
    view = memoryview(src)
    for off in range(0, N, CHUNK):
        sock.sendall(view[off : off + CHUNK])


srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)


def server():
    conn, _ = srv.accept()
    receive(conn, "tcp up", N)
    send(conn)
    conn.close()


t = threading.Thread(target=fatal(server))
t.start()
cli = socket.create_connection(srv.getsockname())
fatal(send)(cli)
fatal(receive)(cli, "tcp down", N)
t.join()
for r in range(3):
    a, b = socket.socketpair()
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    ts = [
        threading.Thread(target=fatal(receive), args=(b, "pair %d b" % r, N)),
        threading.Thread(target=fatal(send), args=(a,)),
        threading.Thread(target=fatal(receive), args=(a, "pair %d a" % r, N)),
        threading.Thread(target=fatal(send), args=(b,)),
    ]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    a.close()
    b.close()
for k in sorted(results):
    print(k, *results[k])

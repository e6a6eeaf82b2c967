# A git fast-import stream: COMMITS commits on one branch, each changing a
# few of FILES text files of WORDS words (deterministic content and dates).
import sys

commits, files, words = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
state = 12345


def rnd():
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    return state >> 33


vocab = ["w%x" % (rnd() % 100000) for _ in range(5000)]
content = [[vocab[rnd() % 5000] for _ in range(words)] for _ in range(files)]
out = sys.stdout.buffer
for c in range(commits):
    out.write(b"commit refs/heads/main\n")
    out.write(b"committer Corpus <corpus@example.org> %d +0000\n" % (1700000000 + c * 60))
    msg = b"commit %d\n" % c
    out.write(b"data %d\n%s\n" % (len(msg), msg))
    for _ in range(3):
        f = rnd() % files
        words = content[f]
        for _ in range(max(40, len(words) // 100)):
            words[rnd() % len(words)] = vocab[rnd() % 5000]
        words.insert(rnd() % len(words), vocab[rnd() % 5000])
        body = (" ".join(words) + "\n").encode()
        out.write(b"M 644 inline dir%d/file%d.txt\ndata %d\n%s\n" % (f % 8, f, len(body), body))

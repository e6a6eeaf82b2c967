# A parent feeding children through pipes from large buffers and reading
# their large outputs back (fork + exec, pipe I/O on tiered memory).
import hashlib
import subprocess
import sys

data = open(sys.argv[1], "rb").read()
out = subprocess.run(["sort", "-S", "16M"], input=data, capture_output=True, check=True).stdout
print("sort", len(out), hashlib.sha256(out).hexdigest())
out = subprocess.run(["cat"], input=data, capture_output=True, check=True).stdout
print("cat", out == data)
p = subprocess.Popen(["gzip", "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
z, _ = p.communicate(data)
back = subprocess.run(["gzip", "-dc"], input=z, capture_output=True, check=True).stdout
print("gzip", p.returncode, back == data)

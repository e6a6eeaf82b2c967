// Node.js file I/O through libuv's io_uring (UV_USE_IO_URING=1): reads into
// and writes from large Buffers (their backing stores come from calloc),
// with several requests in flight, then the files read back and hashed.
// Under tiermem run io_uring is refused and libuv falls back to its thread
// pool (before, reads into evicted pages failed with EFAULT in-context).
const crypto = require('crypto');
const fs = require('fs');
const src = process.argv[2];
const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
(async () => {
  const text = await fs.promises.readFile(src);
  console.log('read', text.length, sha(text));
  // 1 MiB pieces read in parallel into one large buffer, out of order.
  const fh = await fs.promises.open(src, 'r');
  const whole = Buffer.alloc(text.length);
  const piece = 1 << 20;
  const reads = [];
  for (let off = 0; off < text.length; off += piece) {
    reads.push(fh.read(whole, off, Math.min(piece, text.length - off), off));
  }
  await Promise.all(reads.reverse());
  await fh.close();
  console.log('pieces', sha(whole), whole.equals(text));
  // Transformed copies written in parallel, then read back.
  const names = [];
  await Promise.all([0, 1, 2, 3].map(async (k) => {
    const b = Buffer.from(whole);
    for (let i = k; i < b.length; i += 4093) b[i] ^= 0x5a;
    const name = `copy${k}.bin`;
    names.push(name);
    await fs.promises.writeFile(name, b);
  }));
  names.sort();
  for (const name of names) {
    const back = await fs.promises.readFile(name);
    console.log(name, back.length, sha(back));
  }
})().catch((e) => { console.error('error', e.message); process.exit(1); });

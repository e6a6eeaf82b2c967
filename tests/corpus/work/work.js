// Node.js: typed arrays (their backing stores come from calloc), a sort, a
// reversed copy, a large JSON round trip and Buffer operations.
const crypto = require('crypto');
const fs = require('fs');
const n = Number(process.argv[2]);
const a = new Float64Array(n);
let x = 12345;
for (let i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; a[i] = x / 7; }
a.sort();
const h = crypto.createHash('sha256').update(Buffer.from(a.buffer)).digest('hex');
console.log('sorted', h);
const r = a.slice().reverse();
for (let i = 0; i < n; i += 4096) r[i] += a[n - 1 - i];
console.log('reversed', crypto.createHash('sha256').update(Buffer.from(r.buffer)).digest('hex'));
const objs = [];
for (let i = 0; i < n / 16; i++) objs.push({ i, v: a[i * 16], s: 'k' + (i % 977) });
const j = JSON.stringify(objs);
const back = JSON.parse(j);
console.log('json', j.length, back.length, back[back.length - 1].s);
const text = fs.readFileSync(process.argv[3]);
const up = Buffer.from(text.toString('latin1').toUpperCase(), 'latin1');
console.log('text', crypto.createHash('sha256').update(up).digest('hex'));

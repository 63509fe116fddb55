/*
 * The queue page's proof-of-work solver (GET /q/{event}/pow.js), run as a Web Worker so
 * the page stays responsive. docs/api.md "Proof of work" is the algorithm: find a nonce,
 * here a decimal number, such that SHA-256(challenge ‖ nonce) over their ASCII text starts
 * with `difficulty` zero bits. A file of its own because the page's Content-Security-Policy
 * allows no inline or eval'd script; it runs nothing but this loop.
 *
 * In: {challenge, difficulty}. Out: {tried} every 16,384 hashes, then {nonce, tried}.
 * The challenge is 46 characters, so challenge ‖ nonce fits one SHA-256 block for nonces
 * of up to 9 digits (a billion tries, ~2^30: far beyond any difficulty we ask).
 */
'use strict';

var K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
]);
var W = new Int32Array(64);
var block = new Uint8Array(64);
var H = new Int32Array(8);

/* SHA-256 of the one padded block in `block`; the digest's words in H. */
function compress() {
  var i, a, b, c, d, e, f, g, h, t1, t2, x, y;
  for (i = 0; i < 16; i++)
    W[i] = (block[4 * i] << 24) | (block[4 * i + 1] << 16) | (block[4 * i + 2] << 8) | block[4 * i + 3];
  for (i = 16; i < 64; i++) {
    x = W[i - 15];
    y = W[i - 2];
    W[i] = (((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3)) + W[i - 7] +
           (((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10)) + W[i - 16] | 0;
  }
  a = 0x6a09e667; b = 0xbb67ae85 | 0; c = 0x3c6ef372; d = 0xa54ff53a | 0;
  e = 0x510e527f; f = 0x9b05688c | 0; g = 0x1f83d9ab; h = 0x5be0cd19;
  for (i = 0; i < 64; i++) {
    t1 = h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
         ((e & f) ^ (~e & g)) + K[i] + W[i] | 0;
    t2 = (((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
         ((a & b) ^ (a & c) ^ (b & c)) | 0;
    h = g; g = f; f = e; e = d + t1 | 0; d = c; c = b; b = a; a = t1 + t2 | 0;
  }
  H[0] = a + 0x6a09e667 | 0;
  H[1] = b + 0xbb67ae85 | 0;
}

/* Leading zero bits of the digest's first 64 bits (enough for any difficulty we ask). */
function zeroBits() {
  if (H[0] !== 0) return Math.clz32(H[0]);
  return 32 + Math.clz32(H[1]);
}

function solve(challenge, bits) {
  var n = challenge.length, i, tried = 0, nonce, len, digits;
  if (n > 46) throw new Error('unexpected challenge length');
  for (i = 0; i < n; i++) block[i] = challenge.charCodeAt(i) & 0x7f;
  for (nonce = 0; nonce < 1e9; nonce++) {
    digits = String(nonce);
    len = n + digits.length;
    for (i = 0; i < digits.length; i++) block[n + i] = digits.charCodeAt(i);
    block[len] = 0x80;
    for (i = len + 1; i < 62; i++) block[i] = 0;
    block[62] = (len * 8) >>> 8;
    block[63] = (len * 8) & 0xff;
    compress();
    tried++;
    if (zeroBits() >= bits) return { nonce: digits, tried: tried };
    if ((tried & 16383) === 0) self.postMessage({ tried: tried });
  }
  return { nonce: null, tried: tried };
}

self.onmessage = function (ev) {
  var m = ev.data || {};
  if (typeof m.challenge !== 'string' || typeof m.difficulty !== 'number') return;
  self.postMessage(solve(m.challenge, m.difficulty));
};

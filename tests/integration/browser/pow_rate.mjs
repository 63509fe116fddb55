#!/usr/bin/env node
// The queue page's proof-of-work worker (gateway/www/pow_worker.js) timed in headless
// Chromium: for each difficulty, a few fresh random challenges solved in a Web Worker,
// the wall time and hashes of each (docs/design.md, "Bot defences", has the figures).
//
//   node pow_rate.mjs [--chromium /usr/bin/chromium] [--bits 16,18,20] [--runs 5]
//
// Prints one JSON line: {"runs":[{"bits","ms","tried"}…],"ns_per_hash"}.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const arg = (k, d) => { const i = process.argv.indexOf(`--${k}`); return i > 0 ? process.argv[i + 1] : d; };
const worker = fs.readFileSync(path.join(HERE, '../../../gateway/www/pow_worker.js'), 'utf8');
const bits = arg('bits', '16,18,20').split(',').map(Number);
const runs = Number(arg('runs', '5'));

const browser = await chromium.launch({ executablePath: arg('chromium', '/usr/bin/chromium'),
                                        args: ['--no-sandbox'] });
try {
  const page = await browser.newPage();
  const out = await page.evaluate(async ({ src, bits, runs }) => {
    const url = URL.createObjectURL(new Blob([src], { type: 'text/javascript' }));
    const one = (b) => new Promise((resolve) => {
      const r = new Uint8Array(34);
      crypto.getRandomValues(r);
      const ch = btoa(String.fromCharCode(...r)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
      const w = new Worker(url), t0 = performance.now();
      w.onmessage = (ev) => {
        if (typeof ev.data.nonce !== 'string') return;
        w.terminate();
        resolve({ bits: b, ms: Math.round(performance.now() - t0), tried: ev.data.tried });
      };
      w.postMessage({ challenge: ch, difficulty: b });
    });
    const res = [];
    for (const b of bits) for (let i = 0; i < runs; i++) res.push(await one(b));
    return res;
  }, { src: worker, bits, runs });
  const ms = out.reduce((a, r) => a + r.ms, 0), tried = out.reduce((a, r) => a + r.tried, 0);
  console.log(JSON.stringify({ runs: out, ns_per_hash: Math.round(ms * 1e6 / tried) }));
} finally {
  await browser.close();
}

#!/usr/bin/env node
// The operator dashboard in a real headless browser: its charts open with the
// history the gateway kept, and their y axes label distinct values.
//
//   node dashboard.mjs --url https://127.0.0.1:G --ca ca.pem --token-file admin-token --event E
//
// Pastes the admin token, opens room E, and reads back what the page drew: each chart's
// aria-label (points, lowest, highest) and the y-axis labels it wrote (data-ticks).
// Prints one JSON line; exit 0 = pass, 1 = a check failed, 2 = setup problem.
// Screenshot: out/dashboard.png.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const OUT = path.join(HERE, 'out');

function parseArgs(argv) {
  const a = { url: null, ca: null, 'token-file': null, event: null,
              chromium: process.env.CHROMIUM || '/usr/bin/chromium' };
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
    if (!(k in a) || v === undefined) throw new Error(`unknown or incomplete option ${argv[i]}`);
    a[k] = v;
  }
  for (const k of ['url', 'ca', 'token-file', 'event']) if (!a[k]) throw new Error(`--${k} is required`);
  return a;
}

const result = { checks: [] };
function check(ok, what, detail) {
  result.checks.push({ ok: !!ok, what, ...(detail !== undefined ? { detail } : {}) });
  if (!ok) throw new Error(`check failed: ${what}${detail !== undefined ? ` (${JSON.stringify(detail)})` : ''}`);
}

async function main() {
  let args, chromium;
  try {
    args = parseArgs(process.argv);
    ({ chromium } = await import('playwright-core'));
  } catch (e) {
    console.error(`dashboard: ${e.message}`);
    process.exit(2);
  }
  fs.mkdirSync(OUT, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'onsale-dash-'));
  const home = path.join(tmp, 'home');
  const db = path.join(home, '.pki', 'nssdb');
  fs.mkdirSync(db, { recursive: true, mode: 0o700 });
  let context = null, exit = 0;
  try {
    execFileSync('certutil', ['-N', '-d', `sql:${db}`, '--empty-password'], { stdio: 'pipe' });
    execFileSync('certutil', ['-A', '-d', `sql:${db}`, '-n', 'onsale dev CA', '-t', 'C,,', '-i', args.ca],
      { stdio: 'pipe' });
    context = await chromium.launchPersistentContext(path.join(tmp, 'profile'), {
      executablePath: args.chromium, headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
      env: { ...process.env, HOME: home }, viewport: { width: 1280, height: 900 }, locale: 'en-US',
    });
    const page = context.pages()[0] || await context.newPage();
    page.setDefaultTimeout(20000);
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    let history = null, statsPolls = 0;
    page.on('response', async (r) => {
      const u = new URL(r.url());
      if (u.pathname.endsWith('/history')) history = { status: r.status(), body: await r.json().catch(() => null) };
      else if (u.pathname === `/admin/events/${args.event}`) statsPolls++;
    });
    await page.goto(`${args.url}/admin/#${encodeURIComponent(args.event)}`);
    await page.locator('#token').fill(fs.readFileSync(args['token-file'], 'utf8').trim());
    await page.locator('#token-save').click();
    await page.locator(`#c-queue_size`).waitFor({ state: 'attached' });
    await page.waitForFunction(() => {
      const c = document.getElementById('c-queue_size');
      return c && /lowest/.test(c.getAttribute('aria-label') || '');
    });
    check(history && history.status === 200, 'the dashboard fetched the room history', history && history.status);
    const n = history.body.samples.length;
    result.history_samples = n;
    check(n >= 3, 'the gateway had kept several samples', n);
    // the charts already hold the history: more points than this page's own polls
    const points = await page.evaluate(() => {
      /* the page keeps its series private; count the samples it drew via its label */
      const c = document.getElementById('c-queue_size');
      return c.getAttribute('aria-label');
    });
    result.first_label = points;
    result.stats_polls_at_first_draw = statsPolls;
    check(statsPolls <= 2, 'the chart was drawn with data before the page had polled more than twice', statsPolls);
    const note = await page.locator('#hist-note').innerText();
    check(/kept by the gateway/.test(note), 'the page says where the history comes from', note);
    const ticks = await page.evaluate(() => Array.from(document.querySelectorAll('canvas[data-ticks]'))
      .map((c) => ({ id: c.id, ticks: c.getAttribute('data-ticks').split('|') })));
    result.ticks = ticks;
    check(ticks.length === 5, 'every chart drew its axis', ticks.length);
    for (const t of ticks) {
      check(t.ticks.length >= 2, `${t.id}: at least two y labels`, t.ticks);
      check(new Set(t.ticks).size === t.ticks.length, `${t.id}: the y labels are distinct`, t.ticks);
    }
    await page.screenshot({ path: path.join(OUT, 'dashboard.png'), fullPage: true });
    check(errors.length === 0, 'no script errors', errors);
  } catch (e) {
    result.error = String(e && e.message || e).split('\n')[0].slice(0, 500);
    exit = /check failed/.test(result.error) ? 1 : 2;
    if (context && context.pages()[0])
      await context.pages()[0].screenshot({ path: path.join(OUT, 'dashboard-failure.png'), fullPage: true }).catch(() => {});
  } finally {
    if (context) await context.close().catch(() => {});
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  result.ok = exit === 0;
  console.log(JSON.stringify(result));
  process.exit(exit);
}

main();

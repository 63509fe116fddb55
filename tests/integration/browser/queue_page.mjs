#!/usr/bin/env node
// The queue page in a real headless browser (issue 3): Debian's chromium driven by
// playwright-core. Opens GET /q/{event} on the real gateway over HTTPS, checks that the
// position and the progress bar are shown, then waits — touching nothing — until the page
// advances by itself to admission and forwards to redirect_url with the admission token.
// Saves screenshots under out/.
//
//   node queue_page.mjs --url https://127.0.0.1:8443 --event e1 --ca .onsale/ca.pem \
//        --redirect https://shop.test/checkout [--mode js|nojs] [--timeout 90]
//
// --redirect is the redirect_url the event was configured with. Its host need not exist:
// requests to it are answered inside the browser (page.route) with a stub landing page,
// so the test needs loopback only. --mode nojs runs the same path with JavaScript off:
// the server-rendered page and its meta refresh must get there on their own.
//
// TLS: the stack's dev CA is trusted properly — imported into a private NSS database
// (certutil, Debian libnss3-tools) in a throw-away HOME that only this chromium sees.
// Only when certutil is missing does it fall back to ignoring certificate errors, and it
// says so in its output ("tls": "ignored").
//
// Prints one JSON line with what it saw; exit 0 = pass, 1 = a check failed, 2 = setup.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const a = {
    url: process.env.ONSALE_GATEWAY_URL, event: process.env.ONSALE_EVENT,
    ca: process.env.ONSALE_CA, redirect: process.env.ONSALE_REDIRECT_URL,
    mode: 'js', timeout: 90, chromium: process.env.CHROMIUM || '/usr/bin/chromium',
    out: path.join(HERE, 'out'),
  };
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
    if (!(k in a) || v === undefined) throw new Error(`unknown or incomplete option ${argv[i]}`);
    a[k] = k === 'timeout' ? Number(v) : v;
  }
  for (const k of ['url', 'event', 'redirect']) if (!a[k]) throw new Error(`--${k} is required`);
  if (!['js', 'nojs'].includes(a.mode)) throw new Error('--mode is js or nojs');
  return a;
}

// A throw-away HOME whose NSS database trusts the CA (what chromium on Linux reads for
// locally added roots). Returns null when certutil is not installed.
function trustStore(ca, home) {
  if (!ca) return null;
  try {
    execFileSync('certutil', ['--help'], { stdio: 'ignore' });
  } catch (e) {
    if (e.code === 'ENOENT') return null;
  }
  const db = path.join(home, '.pki', 'nssdb');
  fs.mkdirSync(db, { recursive: true, mode: 0o700 });
  execFileSync('certutil', ['-N', '-d', `sql:${db}`, '--empty-password'], { stdio: 'pipe' });
  execFileSync('certutil', ['-A', '-d', `sql:${db}`, '-n', 'onsale dev CA', '-t', 'C,,', '-i', ca],
    { stdio: 'pipe' });
  return db;
}

function decodeJwt(tok) {
  const parts = tok.split('.');
  if (parts.length !== 3) return null;
  try {
    const dec = (s) => JSON.parse(Buffer.from(s, 'base64url').toString('utf8'));
    return { header: dec(parts[0]), claims: dec(parts[1]) };
  } catch (e) {
    return null;
  }
}

async function main() {
  let args;
  try {
    args = parseArgs(process.argv);
  } catch (e) {
    console.error(`queue_page: ${e.message}`);
    process.exit(2);
  }
  let chromium;
  try {
    ({ chromium } = await import('playwright-core'));
  } catch (e) {
    console.error('queue_page: playwright-core is not installed (npm install in tests/integration/browser)');
    process.exit(2);
  }
  if (!fs.existsSync(args.chromium)) {
    console.error(`queue_page: no chromium at ${args.chromium} (apt-get install chromium)`);
    process.exit(2);
  }
  fs.mkdirSync(args.out, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'onsale-browser-'));
  const home = path.join(tmp, 'home'), profile = path.join(tmp, 'profile');
  fs.mkdirSync(home);
  const result = { mode: args.mode, event: args.event, checks: [], tls: 'ca', seen: [] };
  const check = (ok, what, detail) => {
    result.checks.push({ ok: !!ok, what, ...(detail !== undefined ? { detail } : {}) });
    if (!ok) throw new Error(`check failed: ${what}${detail !== undefined ? ` (${JSON.stringify(detail)})` : ''}`);
  };
  const deadline = Date.now() + args.timeout * 1000;
  const left = () => Math.max(1000, deadline - Date.now());
  const suffix = args.mode === 'js' ? '' : '-nojs';
  for (const f of [`failure${suffix}.png`, `admitted${suffix}.png`])
    fs.rmSync(path.join(args.out, f), { force: true });
  let context = null, exit = 0;
  try {
    const db = trustStore(args.ca, home);
    if (!db) result.tls = 'ignored';
    context = await chromium.launchPersistentContext(profile, {
      executablePath: args.chromium,
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
             '--disable-component-update', '--disable-sync', '--no-first-run',
             '--disable-dev-shm-usage'],
      env: { ...process.env, HOME: home },
      ignoreHTTPSErrors: !db,
      javaScriptEnabled: args.mode === 'js',
      viewport: { width: 1024, height: 800 },
      locale: 'en-US',
      timeout: 30000,
    });
    const page = context.pages()[0] || await context.newPage();
    page.setDefaultTimeout(20000);
    const consoleErrors = [];
    page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
    page.on('pageerror', (e) => consoleErrors.push(String(e)));

    // Count what the page does by itself: status polls (js) or page loads (nojs).
    const queuePath = `/q/${encodeURIComponent(args.event)}`;
    let polls = 0, joins = 0, loads = 0;
    page.on('request', (r) => {
      const u = new URL(r.url());
      if (u.pathname === `${queuePath}/status`) polls++;
      if (u.pathname === `${queuePath}/join`) joins++;
      if (u.pathname === queuePath && r.isNavigationRequest()) loads++;
    });

    // The redirect target: answered in the browser, the URL recorded.
    const target = new URL(args.redirect);
    let landed = null;
    await context.route((u) => u.origin === target.origin && u.pathname === target.pathname,
      async (route) => {
        landed = route.request().url();
        await route.fulfill({ status: 200, contentType: 'text/html',
          body: '<!doctype html><title>shop</title><h1 id="landing">Checkout</h1>' });
      });

    const resp = await page.goto(args.url + queuePath, { waitUntil: 'domcontentloaded' });
    check(resp && resp.status() === 200, 'GET /q/{event} answers 200', resp && resp.status());
    check(/^text\/html/.test(resp.headers()['content-type'] || ''), 'the queue page is HTML',
      resp.headers()['content-type']);
    check(/no-store/.test(resp.headers()['cache-control'] || ''), 'the queue page is no-store');
    result.tls_verified = resp.securityDetails() !== null && result.tls === 'ca';

    // Landmarks and live region, whatever the state.
    check(await page.locator('main').count() === 1, 'a <main> landmark');
    check(await page.locator('header').count() === 1, 'a <header> landmark');
    check(await page.locator('h1').count() === 1, 'one <h1>');

    // Queued: position and progress shown.
    await page.locator('#s-queued').waitFor({ state: 'visible', timeout: left() });
    const position = (await page.locator('#position').innerText()).trim();
    const progress = await page.locator('#progress').getAttribute('aria-valuenow');
    const size = (await page.locator('#queue-size').innerText()).trim();
    const eta = (await page.locator('#eta').innerText()).trim();
    result.first = { position, queue_size: size, eta, progress };
    check(/^[1-9][\d,]*$/.test(position), 'the position is shown as a number', position);
    check(/^[1-9][\d,]*$/.test(size), 'the queue size is shown as a number', size);
    check(eta.length > 0, 'an estimated wait is shown', eta);
    check(await page.locator('#progress').isVisible(), 'the progress bar is visible');
    check(await page.locator('#progress').getAttribute('role') === 'progressbar',
      'the progress bar has role=progressbar');
    check(/^\d{1,3}$/.test(progress || '') && +progress <= 100,
      'the progress bar has a value 0–100', progress);
    check(await page.locator('#status-line').getAttribute('role') === 'status',
      'the position sentence is a live region');
    await page.screenshot({ path: path.join(args.out, `queue${suffix}.png`), fullPage: true });
    if (args.mode === 'js') {
      await page.setViewportSize({ width: 390, height: 844 });
      await page.screenshot({ path: path.join(args.out, 'queue-phone.png'), fullPage: true });
      await page.setViewportSize({ width: 1024, height: 800 });
    }

    // Wait, touching nothing, while recording what the page shows, until it forwards.
    let lastShot = 0;
    while (!landed && Date.now() < deadline) {
      try {
        const s = await page.evaluate(() => {
          const m = document.getElementById('main');
          const p = document.getElementById('position');
          const b = document.getElementById('progress');
          return m && { state: m.getAttribute('data-state'), position: p && p.textContent.trim(),
                        progress: b && b.getAttribute('aria-valuenow') };
        });
        if (s) {
          const prev = result.seen[result.seen.length - 1];
          if (!prev || prev.state !== s.state || prev.position !== s.position) {
            result.seen.push({ t: Date.now(), ...s });
            if (result.seen.length > 200) result.seen.shift();
          }
          if (s.state === 'admitted' && Date.now() - lastShot > 5000 &&
              new URL(page.url()).pathname === queuePath) {
            lastShot = Date.now();
            await page.screenshot({ path: path.join(args.out, `admitted${suffix}.png`) })
              .catch(() => {});
          }
        }
      } catch (e) {
        // the page is navigating (reload or forward): ask again
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    check(landed, 'the page forwarded to redirect_url on its own', page.url());
    const to = new URL(landed);
    check(to.origin === target.origin && to.pathname === target.pathname,
      'the forward goes to redirect_url', landed);
    for (const [k, v] of target.searchParams)
      check(to.searchParams.get(k) === v, `redirect_url's own query parameter ${k} is kept`);
    const token = to.searchParams.get('admission_token');
    check(token, 'the forward carries admission_token');
    const jwt = decodeJwt(token);
    check(jwt, 'admission_token is a JWT');
    check(jwt.header.alg === 'ES256' && jwt.header.kid, 'the JWT is ES256 with a kid', jwt.header);
    check(jwt.claims.evt === args.event, 'the JWT is for this event', jwt.claims.evt);
    check(jwt.claims.aud === 'onsale-reserve' ||
          (Array.isArray(jwt.claims.aud) && jwt.claims.aud.includes('onsale-reserve')),
      'the JWT audience is onsale-reserve', jwt.claims.aud);
    result.token_claims = Object.keys(jwt.claims).sort();
    await page.waitForLoadState('domcontentloaded').catch(() => {});
    await page.screenshot({ path: path.join(args.out, `landed${suffix}.png`) }).catch(() => {});

    const positions = result.seen.filter((s) => s.state === 'queued' && s.position)
      .map((s) => Number(s.position.replace(/,/g, '')));
    result.polls = polls;
    result.joins = joins;
    result.page_loads = loads;
    if (args.mode === 'js') {
      check(polls >= 1, 'the page polled /status by itself', polls);
      check(loads === 1, 'with JavaScript the page never reloads itself (polls instead)', loads);
      check(consoleErrors.length === 0, 'no script errors', consoleErrors);
    } else {
      check(polls === 0 && joins === 0, 'without JavaScript nothing is fetched by script');
      check(loads >= 2, 'without JavaScript the meta refresh re-requested the page', loads);
    }
    for (let i = 1; i < positions.length; i++)
      check(positions[i] <= positions[i - 1], 'the position never goes backwards', positions);
    result.positions = positions;
  } catch (e) {
    /* the first line is the point; playwright appends a long call log */
    result.error = String(e && e.message || e).split('\n')[0].slice(0, 500);
    exit = result.error.startsWith('check failed') ? 1 : 2;
    if (context) {
      const p = context.pages()[0];
      if (p) await p.screenshot({ path: path.join(args.out, `failure${suffix}.png`), fullPage: true })
        .catch(() => {});
    }
  } finally {
    if (context) await context.close().catch(() => {});
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  result.ok = exit === 0;
  console.log(JSON.stringify(result));
  process.exit(exit);
}

main();

#!/usr/bin/env node
// The queue page in a real headless browser: Debian's chromium driven by
// playwright-core. Opens GET /q/{event} on the real gateway over HTTPS, checks that the
// position and the progress bar are shown, then waits — touching nothing — until the page
// advances by itself to admission and hands the admission token to redirect_url.
// Saves screenshots under out/.
//
//   node queue_page.mjs --url https://127.0.0.1:8443 --event e1 --ca .onsale/ca.pem \
//        --redirect https://shop.test/checkout [--mode js|nojs] [--handoff fragment|post] \
//        [--timeout 90]
//
// --handoff is the room's hand-off (docs/api.md v1.1): "fragment" must land on
// redirect_url#admission_token=<JWT>, "post" must POST the form field admission_token to
// redirect_url (by itself with JavaScript; without it the fan presses the button, which
// this script does). Either way the token must never appear in a URL the shop's server
// sees, and the page's Content-Security-Policy must block nothing the page does (a
// violation is a console error, and console errors fail the js run).
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
// --site <file> starts at the sale site instead: the file (docs/examples/enqueue.py's form
// page) is served at https://shop.example/waiting-room and posts the customer's enqueue
// token to the room; with --customer the admission token's sub must be that customer.
//
// --mode dashboard opens the operator dashboard (GET /admin/) instead, connects with the
// admin token from the environment (ONSALE_ADMIN_TOKEN, never argv) and checks that its
// script ran and reached the admin API under the page's Content-Security-Policy.
//
// Prints one JSON line with what it saw; exit 0 = pass, 1 = a check failed, 2 = setup.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SITE_URL = 'https://shop.example/waiting-room'; // where --site's page is served

function parseArgs(argv) {
  const a = {
    url: process.env.ONSALE_GATEWAY_URL, event: process.env.ONSALE_EVENT,
    ca: process.env.ONSALE_CA, redirect: process.env.ONSALE_REDIRECT_URL,
    mode: 'js', handoff: 'fragment', code: '', 'next-phase': '', site: '', customer: '',
    timeout: 90, chromium: process.env.CHROMIUM || '/usr/bin/chromium',
    out: path.join(HERE, 'out'),
  };
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
    if (!(k in a) || v === undefined) throw new Error(`unknown or incomplete option ${argv[i]}`);
    a[k] = k === 'timeout' ? Number(v) : v;
  }
  if (!['js', 'nojs', 'dashboard'].includes(a.mode)) throw new Error('--mode is js, nojs or dashboard');
  const need = a.mode === 'dashboard' ? ['url', 'event'] : ['url', 'event', 'redirect'];
  for (const k of need) if (!a[k]) throw new Error(`--${k} is required`);
  if (!['fragment', 'post'].includes(a.handoff)) throw new Error('--handoff is fragment or post');
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

// The queue page: queued, then admitted, then handed to redirect_url (module comment).
async function queueFlow({ page, context, args, check, consoleErrors, result, deadline, left,
                           suffix }) {
  // Count what the page does by itself: status polls (js) or page loads (nojs).
  const queuePath = `/q/${encodeURIComponent(args.event)}`;
  let polls = 0, joins = 0, loads = 0;
  let challengeBits = null;
  page.on('response', async (r) => {
    if (new URL(r.url()).pathname !== `${queuePath}/challenge`) return;
    try { challengeBits = (await r.json()).difficulty; } catch (e) { /* ignore */ }
  });
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.pathname === `${queuePath}/status`) polls++;
    if (u.pathname === `${queuePath}/join`) joins++;
    if (u.pathname === queuePath && r.isNavigationRequest()) loads++;
  });

  // The redirect target: answered in the browser; what its server would see recorded.
  const target = new URL(args.redirect);
  let landed = null, landedMethod = null, landedBody = null;
  await context.route((u) => u.origin === target.origin && u.pathname === target.pathname,
    async (route) => {
      landed = route.request().url();
      landedMethod = route.request().method();
      landedBody = route.request().postData();
      await route.fulfill({ status: 200, contentType: 'text/html',
        body: '<!doctype html><title>shop</title><h1 id="landing">Checkout</h1>' });
    });
  // Waits for an element to show; result.waiting_for names it, so a run that times out says
  // which step of the journey never came (and what the page showed: result.state_at_timeout).
  const visible = async (selector) => {
    result.waiting_for = selector;
    try {
      await page.locator(selector).waitFor({ state: 'visible', timeout: left() });
    } catch (e) {
      result.state_at_timeout = await page.evaluate(() => {
        const m = document.getElementById('main');
        return { url: location.pathname, state: m && m.getAttribute('data-state') };
      }).catch(() => null);
      throw e;
    }
    delete result.waiting_for;
  };
  const cspHeaders = [];
  page.on('response', (r) => {
    const u = new URL(r.url());
    if (u.pathname === queuePath) cspHeaders.push(r.headers()['content-security-policy'] || '');
  });

  // From the sale site (--site <its page, HTML>): its page, served at SITE_URL as its own
  // server would, posts the customer's enqueue token to the room; the fan arrives on the
  // queue page with the customer's place. Else straight to the queue page.
  let resp;
  if (args.site) {
    const html = fs.readFileSync(args.site, 'utf8');
    const site = new URL(SITE_URL);
    await context.route((u) => u.origin === site.origin && u.pathname === site.pathname,
      (route) => route.fulfill({ status: 200, contentType: 'text/html', body: html }));
    [resp] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === queuePath &&
        r.request().method() === 'GET', { timeout: left() }),
      page.goto(SITE_URL, { waitUntil: 'commit' }),
    ]);
    await page.waitForLoadState('domcontentloaded');
  } else {
    resp = await page.goto(args.url + queuePath, { waitUntil: 'domcontentloaded' });
  }
  check(resp && resp.status() === 200, 'GET /q/{event} answers 200', resp && resp.status());
  check(/^text\/html/.test(resp.headers()['content-type'] || ''), 'the queue page is HTML',
    resp.headers()['content-type']);
  check(/no-store/.test(resp.headers()['cache-control'] || ''), 'the queue page is no-store');
  result.tls_verified = resp.securityDetails() !== null && result.tls === 'ca';

  // Landmarks and live region, whatever the state.
  check(await page.locator('main').count() === 1, 'a <main> landmark');
  check(await page.locator('header').count() === 1, 'a <header> landmark');
  check(await page.locator('h1').count() === 1, 'one <h1>');

  // A presale phase ending while the fan is asked for a code (--next-phase <name>, js): the
  // page follows the schedule by itself, names the next phase and, as it needs no code,
  // takes the place without one.
  if (args['next-phase']) {
    await visible('#code-form');
    result.phase = (await page.locator('#phase-name').innerText()).trim();
    await page.waitForFunction((name) => {
      const e = document.getElementById('phase-name');
      return e && e.textContent.trim() === name;
    }, args['next-phase'], { timeout: left() });
    result.next_phase = (await page.locator('#phase-name').innerText()).trim();
    check(await page.locator('#code-form').isHidden(), 'the code field goes with its phase');
  }

  // A presale phase (--code): the page names the phase and asks for the code; a typo is
  // refused on the page with its reason and takes nothing; the fan's code takes the place.
  if (args.code) {
    const submit = async () => {
      if (args.mode === 'nojs')
        await Promise.all([page.waitForNavigation({ waitUntil: 'domcontentloaded' }),
                           page.click('#code-submit')]);
      else
        await page.click('#code-submit');
    };
    await visible('#code-form');
    const phase = (await page.locator('#phase-name').innerText()).trim();
    check(phase.length > 0, 'the page names the phase in force', phase);
    result.phase = phase;
    await page.screenshot({ path: path.join(args.out, `code${suffix}.png`), fullPage: true });
    await page.fill('#code', 'AAAA-AAAA-AAAA-AAAAA');
    await submit();
    await visible('#code-error');
    const why = (await page.locator('#code-error').innerText()).trim();
    check(why.length > 0, 'a wrong code is refused on the page with its reason', why);
    result.code_error = why;
    await page.fill('#code', args.code);
    await submit();
  }

  // Without JavaScript the page takes no place by itself (a GET never queues): the fan
  // presses its button, a same-origin form POST answered 303 back to the page.
  if (args.mode === 'nojs' && !args.code) {
    const button = page.locator('#join-form button');
    check(await button.count() === 1, 'without JavaScript the page offers a join button');
    await Promise.all([page.waitForNavigation({ waitUntil: 'domcontentloaded' }),
                       button.click()]);
  }

  // Queued: position and progress shown.
  await visible('#s-queued');
  const position = (await page.locator('#position').innerText()).trim();
  const progress = await page.locator('#progress').getAttribute('aria-valuenow');
  const size = (await page.locator('#queue-size').innerText()).trim();
  const eta = (await page.locator('#eta').innerText()).trim();
  result.first = { position, queue_size: size, eta, progress };
  // A room with proof of work: how long the page's Web Worker took, and how many hashes.
  const powMs = await page.locator('main').getAttribute('data-pow-ms');
  if (powMs !== null) {
    result.pow = { ms: +powMs, tried: +(await page.locator('main').getAttribute('data-pow-tried')),
                   bits: challengeBits !== null ? challengeBits   // a GET /challenge, or the page's
                     : +(await page.locator('main').getAttribute('data-pow-bits')) };
  }
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
  let lastShot = 0, pressed = false;
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
        if (s.state === 'admitted' && args.mode === 'nojs' && args.handoff === 'post' &&
            !pressed && new URL(page.url()).pathname === queuePath) {
          pressed = true; /* without JavaScript the fan presses "Continue to the sale" */
          await page.locator('#handoff button').click({ noWaitAfter: true });
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
  check(!to.searchParams.has('admission_token') && !/admission_token/.test(landed),
    'the token is not in any URL the shop\'s server sees', landed);
  await page.waitForLoadState('domcontentloaded').catch(() => {});
  let token;
  if (args.handoff === 'post') {
    check(landedMethod === 'POST', 'the post hand-off is a POST', landedMethod);
    token = new URLSearchParams(landedBody || '').get('admission_token');
    check(token, 'the POST body carries the form field admission_token', landedBody);
    result.csp_form_action = cspHeaders.map((h) => (h.match(/form-action [^;]*/) || [''])[0]);
  } else {
    check(landedMethod === 'GET', 'the fragment hand-off is a navigation', landedMethod);
    await page.waitForURL((u) => u.origin === target.origin && u.pathname === target.pathname,
      { timeout: 10000, waitUntil: 'commit' }).catch(() => {});
    const at = new URL(page.url());
    check(at.pathname === target.pathname, 'the browser is on redirect_url', page.url());
    token = new URLSearchParams(at.hash.replace(/^#/, '')).get('admission_token');
    check(token, 'the landed URL carries #admission_token in its fragment', page.url());
  }
  check(cspHeaders.length >= 1 && cspHeaders.every((h) => /script-src 'sha256-/.test(h) &&
      /style-src 'sha256-/.test(h) && /form-action /.test(h) && !/unsafe/.test(h)),
    'every queue page has a hash-based CSP without unsafe-*', cspHeaders);
  const jwt = decodeJwt(token);
  check(jwt, 'admission_token is a JWT');
  check(jwt.header.alg === 'ES256' && jwt.header.kid, 'the JWT is ES256 with a kid', jwt.header);
  check(jwt.claims.evt === args.event, 'the JWT is for this event', jwt.claims.evt);
  if (args.customer)
    check(jwt.claims.sub === args.customer, 'the JWT\'s sub is the sale site\'s customer',
      jwt.claims.sub);
  check(jwt.claims.aud === 'onsale-reserve' ||
        (Array.isArray(jwt.claims.aud) && jwt.claims.aud.includes('onsale-reserve')),
    'the JWT audience is onsale-reserve', jwt.claims.aud);
  result.token_claims = Object.keys(jwt.claims).sort();
  await page.screenshot({ path: path.join(args.out, `landed${suffix}.png`) }).catch(() => {});

  const positions = result.seen.filter((s) => s.state === 'queued' && s.position)
    .map((s) => Number(s.position.replace(/,/g, '')));
  result.polls = polls;
  result.joins = joins;
  result.page_loads = loads;
  if (args.mode === 'js') {
    check(polls >= 1, 'the page polled /status by itself', polls);
    /* the post hand-off reloads once: the admitted page brings the policy its form needs */
    const reloads = args.handoff === 'post' ? 1 : 0;
    check(loads === 1 + reloads, 'with JavaScript the page reloads itself only for a post ' +
      'hand-off (polls instead)', loads);
    // the wrong code's 400 is the one failed resource a presale journey may log
    const errors = consoleErrors.filter((e) => !(args.code && /status of 400/.test(e)));
    check(errors.length === 0, 'no script errors', consoleErrors);
  } else {
    // the joins are the fan's own presses of the form's button (the wrong code, then theirs)
    const presses = args.code ? 2 : 1;
    check(polls === 0 && joins === presses, 'without JavaScript nothing is fetched by script',
      { polls, joins });
    check(loads >= 2, 'without JavaScript the meta refresh re-requested the page', loads);
  }
  for (let i = 1; i < positions.length; i++)
    check(positions[i] <= positions[i - 1], 'the position never goes backwards', positions);
  result.positions = positions;
}

// The operator dashboard under its Content-Security-Policy: the script runs, reaches the
// admin API with the token, lists the room, and nothing is refused.
async function dashboard({ page, args, check, consoleErrors, result }) {
  const token = process.env.ONSALE_ADMIN_TOKEN;
  check(token, 'ONSALE_ADMIN_TOKEN is set');
  const resp = await page.goto(`${args.url}/admin/`, { waitUntil: 'domcontentloaded' });
  check(resp && resp.status() === 200, 'GET /admin/ answers 200', resp && resp.status());
  const csp = resp.headers()['content-security-policy'] || '';
  result.csp = csp;
  check(/script-src 'sha256-/.test(csp) && !/unsafe/.test(csp),
    'the dashboard has a hash-based CSP without unsafe-*', csp);
  await page.locator('#token').fill(token);
  await page.locator('#token-save').click();
  await page.waitForFunction(() => /^Connected/.test(document.getElementById('conn').textContent),
    null, { timeout: 20000 }).catch(() => {});
  result.conn = await page.locator('#conn').innerText();
  check(/^Connected/.test(result.conn), 'the dashboard connected to the admin API',
    { conn: result.conn, consoleErrors });
  await page.locator('#event-list').getByText(args.event).first().waitFor({ timeout: 20000 });
  await page.screenshot({ path: path.join(args.out, 'dashboard.png'), fullPage: true })
    .catch(() => {});
  check(consoleErrors.length === 0, 'no script errors or CSP violations', consoleErrors);
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
  const result = { mode: args.mode, handoff: args.handoff, event: args.event, checks: [], tls: 'ca',
                   seen: [] };
  const check = (ok, what, detail) => {
    result.checks.push({ ok: !!ok, what, ...(detail !== undefined ? { detail } : {}) });
    if (!ok) throw new Error(`check failed: ${what}${detail !== undefined ? ` (${JSON.stringify(detail)})` : ''}`);
  };
  const deadline = Date.now() + args.timeout * 1000;
  const left = () => Math.max(1000, deadline - Date.now());
  const suffix = args.mode === 'dashboard' ? '-dashboard'
    : (args.mode === 'js' ? '' : '-nojs') + (args.handoff === 'post' ? '-post' : '');
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
      javaScriptEnabled: args.mode !== 'nojs',
      viewport: { width: 1024, height: 800 },
      locale: 'en-US',
      timeout: 30000,
    });
    const page = context.pages()[0] || await context.newPage();
    page.setDefaultTimeout(20000);
    const consoleErrors = [];
    page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
    page.on('pageerror', (e) => consoleErrors.push(String(e)));

    if (args.mode === 'dashboard')
      await dashboard({ page, args, check, consoleErrors, result });
    else
      await queueFlow({ page, context, args, check, consoleErrors, result, deadline, left, suffix });

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

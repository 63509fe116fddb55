#!/usr/bin/env node
// The fan's whole night in a real headless browser: Debian's chromium driven
// by playwright-core against the real gateway and reserve of a private stack.
//
//   node shop_journey.mjs --spec spec.json [--scenario all|journey|loser|declined|slow|cors|
//                                             threedsApprove|threedsFail|threedsAbandon]
//
// spec.json (written by tests/integration/test_shop_browser.py):
//   {"gateway": "https://127.0.0.1:G", "reserve": "https://127.0.0.1:R", "ca": "ca.pem",
//    "chromium": "/usr/bin/chromium", "timeout": 120,
//    "journey":  {"event": "…"},                                  (a room that redirects to the storefront)
//    "loser":    {"event": "…", "token": "<JWT>", "rival": "<JWT of another fan>"},
//    "declined": {"event": "…", "token": "<JWT>"},
//    "slow":     {"event": "…", "token": "<JWT>"},
//    "expired":  {"event": "…", "token": "<JWT>"},             (an event whose holds last 3 s)
//    "cors":     {"event": "…", "token": "<JWT>", "allowed": "https://localhost:G",
//                 "denied": "https://127.0.0.1:G"}}
//
// journey: queue page → admitted → storefront (token in the fragment, gone from the address
//   bar) → two seats chosen with the keyboard → hold → countdown → checkout extends the
//   hold → card → booked → leave the sale (done).
// loser: a seat picked in the browser is taken by another fan first; the storefront says
//   so, marks it, and the fan holds another seat and books it.
// declined: the bank declines the card; the seats stay held; another card books them.
// slow: the bank answers after the reserve's provider timeout: "pending", then booked.
// expired: the hold runs out on screen: told so, back to the map, the seat free again.
// cors: the buyer API called by script from a page of another origin (the gateway's
//   /healthz, once as https://localhost:G, listed in the reserve's cors_origins, once as
//   https://127.0.0.1:G, not listed): the listed origin reads availability and takes and
//   releases a hold (preflighted), the other is blocked by the browser. Both origins are
//   real loopback servers, so the browser's local-network rules stay out of the way.
//
// TLS is verified: the stack's CA goes into a private NSS database (certutil) in a
// throw-away HOME. Screenshots go to out/shop-*.png. Prints one JSON line; exit 0 = pass,
// 1 = a check failed, 2 = setup problem.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const OUT = path.join(HERE, 'out');

function parseArgs(argv) {
  const a = { spec: null, scenario: 'all' };
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
    if (!(k in a) || v === undefined) throw new Error(`unknown or incomplete option ${argv[i]}`);
    a[k] = v;
  }
  if (!a.spec) throw new Error('--spec is required');
  return a;
}

function trustStore(ca, home) {
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

// A request from "another fan" straight to the reserve (node, not the browser).
function apiCall(base, ca, method, p, token, body) {
  return new Promise((resolve, reject) => {
    const u = new URL(p, base);
    const data = body ? JSON.stringify(body) : null;
    const req = https.request(u, {
      method, ca: fs.readFileSync(ca),
      headers: { Authorization: `Bearer ${token}`,
                 ...(data ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } : {}) },
    }, (res) => {
      let t = '';
      res.on('data', (c) => { t += c; });
      res.on('end', () => {
        let j = null;
        try { j = JSON.parse(t); } catch (e) { j = null; }
        resolve({ status: res.statusCode, json: j });
      });
    });
    req.on('error', reject);
    req.setTimeout(15000, () => req.destroy(new Error('timeout')));
    if (data) req.write(data);
    req.end();
  });
}

const result = { checks: [], scenarios: {}, tls: 'ca' };
function check(ok, what, detail) {
  result.checks.push({ ok: !!ok, what, ...(detail !== undefined ? { detail } : {}) });
  if (!ok) throw new Error(`check failed: ${what}${detail !== undefined ? ` (${JSON.stringify(detail)})` : ''}`);
}
const shot = (page, name, full = true) =>
  page.screenshot({ path: path.join(OUT, `shop-${name}.png`), fullPage: full });

function watchErrors(page) {
  const errors = [];
  // the browser logs every 4xx answer as "Failed to load resource": expected here
  page.on('console', (m) => {
    if (m.type() === 'error' && !/^Failed to load resource/.test(m.text())) errors.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  return errors;
}

async function landmarks(page) {
  check(await page.locator('main').count() === 1, 'the storefront has a <main> landmark');
  check(await page.locator('header').count() === 1, 'the storefront has a <header> landmark');
  check(await page.locator('h1').count() === 1, 'the storefront has one <h1>');
  check(await page.locator('#alert').getAttribute('role') === 'alert', 'errors are announced (role=alert)');
}

async function pickSeat(page, id) {
  await page.locator(`.seat[data-seat="${id}"]`).click();
  check(await page.locator(`.seat[data-seat="${id}"]`).getAttribute('aria-pressed') === 'true',
    `seat ${id} is selected`);
}

async function countdownSeconds(page) {
  const t = (await page.locator('#countdown').innerText()).trim();
  const m = /^(\d+):(\d\d)$/.exec(t);
  check(m, 'the countdown reads m:ss', t);
  return Number(m[1]) * 60 + Number(m[2]);
}

async function holdAndCheckout(page, name) {
  await page.locator('#hold-btn').click();
  await page.locator('#s-hold').waitFor({ state: 'visible' });
  const before = await countdownSeconds(page);
  check(await page.locator('#countdown').getAttribute('role') === 'timer', 'the countdown is a timer');
  check(await page.locator('#countdown-live').getAttribute('aria-live') === 'polite',
    'the time left is announced through an aria-live region');
  check((await page.locator('#countdown-live').innerText()).includes('held for'),
    'the live region says how long the seats are held', await page.locator('#countdown-live').innerText());
  if (name) await shot(page, name);
  await page.locator('#checkout-btn').click();
  await page.locator('#pay-form').waitFor({ state: 'visible' });
  const after = await countdownSeconds(page);
  check(after > before + 30, 'checkout extended the hold (the countdown jumped)', { before, after });
  return { before, after };
}

async function pay(page, card) {
  await page.locator(`#pay-form input[value="${card}"]`).check();
  await page.locator('#pay-btn').click();
}

async function booked(page, timeout) {
  await page.locator('#s-done').waitFor({ state: 'visible', timeout });
  const booking = (await page.locator('#done-booking').innerText()).trim();
  check(booking.length > 0, 'the booking reference is shown', booking);
  return booking;
}

async function openShop(context, spec, sc) {
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  const errors = watchErrors(page);
  const url = `${spec.reserve}/shop/?event=${encodeURIComponent(sc.event)}#admission_token=${sc.token}`;
  await page.goto(url, { waitUntil: 'domcontentloaded' });
  await page.locator('#s-pick').waitFor({ state: 'visible' });
  check(!page.url().includes('admission_token'), 'the token is removed from the address bar', page.url());
  return { page, errors };
}

// --- scenarios ------------------------------------------------------------------------

async function journey(context, spec, sc) {
  const r = { };
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  const errors = watchErrors(page);
  const shopUrl = new URL('/shop/', spec.reserve);
  let landing = null;
  let shopCsp = null;
  page.on('response', (resp) => {
    if (resp.request().isNavigationRequest() && resp.url().startsWith(shopUrl.href))
      shopCsp = resp.headers()['content-security-policy'] || '';
  });
  page.on('framenavigated', (f) => {
    if (f === page.mainFrame() && !landing && f.url().startsWith(shopUrl.href)) landing = f.url();
  });
  const resp = await page.goto(`${spec.gateway}/q/${encodeURIComponent(sc.event)}`, { waitUntil: 'domcontentloaded' });
  check(resp && resp.status() === 200, 'the queue page answers 200', resp && resp.status());
  // The room admits at once, so the page may hand off to the shop while it is being
  // photographed: a picture of a page already gone is no failure of the journey (CI saw
  // "Not attached to an active page" once), anything else is.
  await shot(page, 'queue').catch((e) => {
    if (!/Not attached to an active page|Target closed|navigat/i.test(String(e))) throw e;
  });
  await page.waitForURL((u) => u.href.startsWith(shopUrl.href), { timeout: spec.timeout * 500 });
  await page.locator('#s-pick').waitFor({ state: 'visible' });
  check(landing, 'the admitted fan reached the storefront', page.url());
  const lu = new URL(landing);
  r.landing_query = lu.search;
  check(!lu.searchParams.has('admission_token'), 'the token is not in the query string', lu.search);
  check(/admission_token=/.test(lu.hash), 'the token arrived in the URL fragment');
  check(!page.url().includes('admission_token'), 'the storefront removed the token from the address bar', page.url());
  const csp = shopCsp || '';
  check(csp && !csp.includes('unsafe-inline') && csp.includes("script-src 'self'"),
    'the storefront has a strict CSP', csp);
  await landmarks(page);
  await shot(page, 'map');

  // keyboard: focus a seat, Space selects, the arrow key moves, Enter selects
  await page.locator('.seat[data-seat="A-1-1"]').focus();
  await page.keyboard.press('Space');
  await page.keyboard.press('ArrowRight');
  const focused = await page.evaluate(() => document.activeElement && document.activeElement.dataset.seat);
  check(focused === 'A-1-2', 'the arrow key moves to the next seat', focused);
  await page.keyboard.press('Enter');
  for (const id of ['A-1-1', 'A-1-2'])
    check(await page.locator(`.seat[data-seat="${id}"]`).getAttribute('aria-pressed') === 'true',
      `seat ${id} selected with the keyboard`);
  check((await page.locator('#cart-text').innerText()).includes('2 seats'), 'the cart shows two seats');

  // phone-sized screen: nothing wider than the screen
  await page.setViewportSize({ width: 390, height: 844 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
  check(overflow <= 391, 'no horizontal scrolling on a 390 px wide screen', overflow);
  await shot(page, 'phone');
  await page.setViewportSize({ width: 1024, height: 800 });

  r.countdown = await holdAndCheckout(page, 'hold');
  check((await page.locator('#hold-items').innerText()).includes('A-1-1, A-1-2'), 'the hold lists both seats');
  await shot(page, 'checkout');
  await page.locator('#pay-email').fill('fan@example.org');   // kept for the box office
  await pay(page, 'pm_card_visa');
  r.booking = await booked(page, 30000);
  await shot(page, 'booked');
  // done: the fan leaves the sale (POST /v1/events/{event}/done), the token is forgotten
  await page.locator('#leave-done-btn').click();
  await page.locator('#s-left').waitFor({ state: 'visible', timeout: 10000 });
  check(/left the sale/.test(await page.locator('#left-h').innerText()), 'the fan is told they left the sale');
  const kept = await page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith('onsale.admission.')));
  check(kept.length === 0, 'the admission token is forgotten after leaving', kept);
  await shot(page, 'left');
  check(errors.length === 0, 'no script errors', errors);
  await page.close();
  return r;
}

// A "dpop" room: the storefront's key is named on its link to the queue (?bind=), the
// admission token comes back bound to it, holds go with the storefront's proofs, and the
// token alone (a copied link) buys nothing.
function claimsOf(token) {
  return JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());
}

async function bound(context, spec, sc) {
  const r = {};
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  const errors = watchErrors(page);
  await page.goto(`${spec.reserve}/shop/?event=${encodeURIComponent(sc.event)}`, { waitUntil: 'domcontentloaded' });
  await page.locator('#s-gate').waitFor({ state: 'visible' });
  const href = await page.locator('#gate-link').getAttribute('href');
  const bind = new URL(href).searchParams.get('bind');
  check(/^[A-Za-z0-9_-]{43}$/.test(bind || ''), 'the link to the queue names the storefront key', href);
  await page.locator('#gate-link').click();
  const shopUrl = new URL('/shop/', spec.reserve);
  await page.waitForURL((u) => u.href.startsWith(shopUrl.href) && u.href !== `${shopUrl.href}?event=${sc.event}`,
    { timeout: spec.timeout * 500 }).catch(() => {});
  await page.locator('#s-pick').waitFor({ state: 'visible', timeout: spec.timeout * 500 });
  const token = await page.evaluate((ev) => sessionStorage.getItem(`onsale.admission.${ev}`), sc.event);
  check(token, 'the storefront holds an admission token');
  const cnf = claimsOf(token).cnf;
  check(cnf && cnf.jkt === bind, "the token is bound to the storefront's key", cnf);
  r.jkt = bind;
  await pickSeat(page, 'A-2-1');
  await page.locator('#hold-btn').click();
  await page.locator('#s-hold').waitFor({ state: 'visible' });
  check((await page.locator('#hold-items').innerText()).includes('A-2-1'), 'the hold was taken with a proof');
  await shot(page, 'bound-hold');
  const copied = await apiCall(spec.reserve, spec.ca, 'POST', `/v1/events/${sc.event}/holds`, token,
    { seats: ['A-2-2'] });
  check(copied.status === 401 && copied.json && copied.json.error === 'proof_required',
    'the token alone, copied elsewhere, holds nothing', copied);
  r.copied = copied.status;
  check(errors.length === 0, 'no script errors', errors);
  await page.close();

  // a token bound to a key this storefront does not hold: said plainly
  const other = await context.newPage();
  other.setDefaultTimeout(20000);
  await other.goto(`${spec.reserve}/shop/?event=${encodeURIComponent(sc.event)}#admission_token=${sc.foreign}`,
    { waitUntil: 'domcontentloaded' });
  await other.locator('#alert').waitFor({ state: 'visible' });
  const text = await other.locator('#alert').innerText();
  check(/another browser/.test(text), 'a token bound to another key is named as such', text);
  await shot(other, 'bound-foreign');
  await other.close();
  return r;
}

async function loser(context, spec, sc) {
  const { page, errors } = await openShop(context, spec, sc);
  await pickSeat(page, 'A-1-3');
  const rival = await apiCall(spec.reserve, spec.ca, 'POST', `/v1/events/${sc.event}/holds`, sc.rival,
    { seats: ['A-1-3'] });
  check(rival.status === 201, 'the other fan holds A-1-3 first', rival);
  await page.locator('#hold-btn').click({ timeout: 3000 }).catch(() => {});
  await page.locator('#alert').waitFor({ state: 'visible' });
  const text = await page.locator('#alert').innerText();
  check(/A-1-3/.test(text) && /just taken/.test(text), 'the fan is told the seat was just taken', text);
  check(/[Pp]ick another seat/.test(text), 'and what to do next', text);
  await page.waitForFunction(() => {
    const b = document.querySelector('.seat[data-seat="A-1-3"]');
    return b && b.getAttribute('aria-disabled') === 'true' && b.getAttribute('aria-pressed') === 'false';
  });
  await shot(page, 'taken');
  await pickSeat(page, 'A-1-4');
  await holdAndCheckout(page, null);
  await pay(page, 'pm_card_visa');
  const booking = await booked(page, 30000);
  check(errors.length === 0, 'no script errors', errors);
  await page.close();
  return { booking };
}

async function best(context, spec, sc) {
  const { page, errors } = await openShop(context, spec, sc);
  const rival = await apiCall(spec.reserve, spec.ca, 'POST', `/v1/events/${sc.event}/holds`, sc.rival,
    { seats: ['A-1-2', 'A-1-4'] });
  check(rival.status === 201, 'the other fan holds A-1-2 and A-1-4 first', rival);
  await page.locator('#best-q-A').fill('2');
  await page.locator('#best-btn-A').click();
  await page.locator('#alert').waitFor({ state: 'visible' });
  const text = await page.locator('#alert').innerText();
  check(/No 2 seats together/.test(text) && /3 seats are still free/.test(text),
    'the fan is told no two seats together are left, and how many are apart', text);
  await page.getByRole('button', { name: 'Seats apart are fine' }).click();
  await page.locator('#s-hold').waitFor({ state: 'visible' });
  const items = (await page.locator('#hold-items').innerText()).trim();
  check(/A-1-3/.test(items) && items.split(',').length === 2,
    'two seats apart are held, the best free one among them', items);
  check(errors.length === 0, 'no script errors', errors);
  await page.close();
  return { items };
}

async function declined(context, spec, sc) {
  const { page, errors } = await openShop(context, spec, sc);
  await pickSeat(page, 'A-2-1');
  await holdAndCheckout(page, null);
  await pay(page, 'pm_card_chargeDeclined');
  await page.locator('#alert').waitFor({ state: 'visible' });
  const text = await page.locator('#alert').innerText();
  check(/declined/.test(text) && /another card/.test(text), 'the fan is told the card was declined and what to do', text);
  check(await page.locator('#s-hold').isVisible(), 'the seats stay held after a decline');
  await shot(page, 'declined');
  await pay(page, 'pm_card_visa');
  const booking = await booked(page, 30000);
  check(errors.length === 0, 'no script errors', errors);
  await page.close();
  return { booking };
}

async function slow(context, spec, sc) {
  const { page, errors } = await openShop(context, spec, sc);
  await pickSeat(page, 'A-2-2');
  await holdAndCheckout(page, null);
  await pay(page, 'slow');
  await page.waitForFunction(() => /longer than usual/.test(document.getElementById('pay-status').textContent),
    null, { timeout: 30000 });
  await shot(page, 'pending');
  const booking = await booked(page, 60000);
  check(errors.length === 0, 'no script errors', errors);
  await page.close();
  return { booking };
}

// The hold runs out while the fan looks at it (an event with 3 s holds): told so, back to
// the seat map, the seat free again.
async function expired(context, spec, sc) {
  const { page, errors } = await openShop(context, spec, sc);
  await pickSeat(page, 'A-3-1');
  await page.locator('#hold-btn').click();
  await page.locator('#s-hold').waitFor({ state: 'visible' });
  await page.locator('#alert').waitFor({ state: 'visible', timeout: 15000 });
  const text = await page.locator('#alert').innerText();
  check(/expired/.test(text) && /[Cc]hoose again/.test(text), 'the fan is told the hold expired and what to do', text);
  check(await page.locator('#s-pick').isVisible(), 'back on the seat map');
  await page.waitForFunction(() => {
    const b = document.querySelector('.seat[data-seat="A-3-1"]');
    return b && b.getAttribute('aria-disabled') === 'false';
  }, null, { timeout: 15000 });
  await shot(page, 'expired');
  check(errors.length === 0, 'no script errors', errors);
  await page.close();
  return {};
}

async function cors(context, spec, sc) {
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  const call = (args) => page.evaluate(async ({ base, ev, token, method, body }) => {
    try {
      const h = { Authorization: `Bearer ${token}` };
      if (body) h['Content-Type'] = 'application/json';
      const r = await fetch(base + (method === 'POST' ? `/v1/events/${ev}/holds` : `/v1/events/${ev}/availability`),
        { method, headers: h, body: body ? JSON.stringify(body) : undefined });
      const j = await r.json().catch(() => null);
      return { ok: true, status: r.status, json: j };
    } catch (e) {
      return { ok: false, error: String(e) };
    }
  }, { base: spec.reserve, ev: sc.event, token: sc.token, ...args });
  const preflights = [];
  page.on('request', (r) => { if (r.method() === 'OPTIONS') preflights.push(r.url()); });

  await page.goto(`${sc.allowed}/healthz`);
  const get = await call({ method: 'GET' });
  check(get.ok && get.status === 200 && get.json && get.json.event === sc.event,
    'an allowed origin reads availability from the browser', get);
  const post = await call({ method: 'POST', body: { seats: ['B-1-1'] } });
  check(post.ok && post.status === 201 && post.json.hold_id, 'an allowed origin takes a hold (preflighted POST)', post);
  const del = await page.evaluate(async ({ base, id, token }) => {
    try {
      const r = await fetch(`${base}/v1/holds/${encodeURIComponent(id)}`, { method: 'DELETE', headers: { Authorization: `Bearer ${token}` } });
      return { ok: true, status: r.status };
    } catch (e) { return { ok: false, error: String(e) }; }
  }, { base: spec.reserve, id: post.json.hold_id, token: sc.token });
  check(del.ok && (del.status === 200 || del.status === 204), 'an allowed origin releases the hold (preflighted DELETE)', del);

  await page.goto(`${sc.denied}/healthz`);
  const blocked = await call({ method: 'GET' });
  check(!blocked.ok && /TypeError/.test(blocked.error), 'another origin is blocked by the browser', blocked);
  const blockedPost = await call({ method: 'POST', body: { seats: ['B-1-2'] } });
  check(!blockedPost.ok, 'another origin cannot take a hold', blockedPost);
  await page.close();
  return { get: get.status, post: post.status, del: del.status, blocked: blocked.error };
}

// 3-D Secure: the card needs the bank's confirmation. The storefront sends the fan to the
// simulator's challenge page (next_action), the fan answers there (or walks away), the page
// sends the browser back to the storefront (pay_return_url), which polls the checkout.
async function toBank(page) {
  await pay(page, 'pm_card_threeDSecure2Required');
  await page.waitForURL(/\/v1\/sim\/authenticate\//, { timeout: 20000 });
  check(await page.locator('#approve').count() === 1 && await page.locator('#fail').count() === 1,
    'the bank\'s page offers Approve and Fail');
  check(await page.locator('script').count() === 0, 'the bank\'s page runs no script');
}

async function threedsApprove(context, spec, sc) {
  const { page, errors } = await openShop(context, spec, sc);
  await pickSeat(page, 'A-1-5');
  await holdAndCheckout(page, null);
  await toBank(page);
  await shot(page, '3ds-challenge');
  await page.locator('#approve').click();
  await page.waitForURL((u) => u.pathname === '/shop/', { timeout: 20000 });
  check(new URL(page.url()).searchParams.get('redirect_status') === 'succeeded',
    'the bank sent the fan back to the storefront', page.url());
  const booking = await booked(page, 40000);
  check(errors.length === 0, 'no script errors', errors);
  await page.close();
  return { booking };
}

async function threedsFail(context, spec, sc) {
  const { page, errors } = await openShop(context, spec, sc);
  await pickSeat(page, 'A-1-6');
  await holdAndCheckout(page, null);
  await toBank(page);
  await page.locator('#fail').click();
  await page.waitForURL((u) => u.pathname === '/shop/', { timeout: 20000 });
  await page.locator('#alert').waitFor({ state: 'visible', timeout: 40000 });
  const text = await page.locator('#alert').innerText();
  check(/did not go through/.test(text) && /Nothing was charged/.test(text),
    'the fan is told the payment did not go through', text);
  await shot(page, '3ds-failed');
  check(await page.locator('#s-hold').isVisible(), 'the seat stays held until released');
  await page.locator('#release-btn').click();
  await page.locator('#s-pick').waitFor({ state: 'visible' });
  check(errors.length === 0, 'no script errors', errors);
  await page.close();
  return {};
}

// Never answered: the fan comes back without answering; when the hold's max life passes
// the checkout is released (the intent canceled) and the storefront says so.
async function threedsAbandon(context, spec, sc) {
  const { page, errors } = await openShop(context, spec, sc);
  await pickSeat(page, 'A-1-7');
  await page.locator('#hold-btn').click();
  await page.locator('#s-hold').waitFor({ state: 'visible' });
  await page.locator('#checkout-btn').click();
  await page.locator('#pay-form').waitFor({ state: 'visible' });
  await toBank(page);
  await page.goto(`${spec.reserve}/shop/`, { waitUntil: 'domcontentloaded' });
  await page.locator('#alert').waitFor({ state: 'visible', timeout: 90000 });
  const text = await page.locator('#alert').innerText();
  check(/did not go through/.test(text) && /hold has ended/.test(text),
    'the fan is told the payment did not go through and the hold ended', text);
  await shot(page, '3ds-abandoned');
  check(errors.length === 0, 'no script errors', errors);
  await page.close();
  return {};
}

const SCENARIOS = { journey, bound, loser, best, declined, slow, expired, cors, threedsApprove,
  threedsFail, threedsAbandon };

async function main() {
  let args, spec, chromium;
  try {
    args = parseArgs(process.argv);
    spec = JSON.parse(fs.readFileSync(args.spec, 'utf8'));
    ({ chromium } = await import('playwright-core'));
  } catch (e) {
    console.error(`shop_journey: ${e.message}`);
    process.exit(2);
  }
  const chromiumPath = spec.chromium || '/usr/bin/chromium';
  if (!fs.existsSync(chromiumPath)) {
    console.error(`shop_journey: no chromium at ${chromiumPath}`);
    process.exit(2);
  }
  fs.mkdirSync(OUT, { recursive: true });
  for (const f of fs.readdirSync(OUT)) if (/^shop-failure/.test(f)) fs.rmSync(path.join(OUT, f), { force: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'onsale-shop-'));
  const home = path.join(tmp, 'home');
  fs.mkdirSync(home);
  const names = args.scenario === 'all' ? Object.keys(SCENARIOS).filter((n) => spec[n]) : [args.scenario];
  let context = null, exit = 0, current = null;
  try {
    const db = trustStore(spec.ca, home);
    if (!db) result.tls = 'ignored';
    context = await chromium.launchPersistentContext(path.join(tmp, 'profile'), {
      executablePath: chromiumPath,
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
             '--disable-component-update', '--disable-sync', '--no-first-run',
             '--disable-dev-shm-usage'],
      env: { ...process.env, HOME: home },
      ignoreHTTPSErrors: !db,
      viewport: { width: 1024, height: 800 },
      locale: 'en-US',
      timeout: 30000,
    });
    for (const n of names) {
      if (!SCENARIOS[n] || !spec[n]) throw new Error(`unknown scenario or no spec for ${n}`);
      current = n;
      const t0 = Date.now();
      result.scenarios[n] = await SCENARIOS[n](context, spec, spec[n]);
      result.scenarios[n].seconds = (Date.now() - t0) / 1000;
    }
  } catch (e) {
    result.error = `${current || 'setup'}: ${String(e && e.message || e).split('\n')[0].slice(0, 600)}`;
    exit = /check failed/.test(result.error) ? 1 : 2;
    if (context) {
      for (const p of context.pages())
        await p.screenshot({ path: path.join(OUT, `shop-failure-${current}.png`), fullPage: true }).catch(() => {});
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

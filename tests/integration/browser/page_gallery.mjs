#!/usr/bin/env node
// The queue page in every language and state, in one chromium: a browser context per
// language (its Accept-Language and locale), the page of each given room loaded once, a
// screenshot of each saved as <out>/<lang>-<room>.png. Nothing waits in a queue: each room
// is already in the state it is shown in (a paused room for "queued", a future opening for
// "prequeue", …), and a load is done once the page's script shows that state.
//
//   node page_gallery.mjs --url https://127.0.0.1:8443 --ca .onsale/ca.pem \
//        --rooms '[{"name":"queued","event":"e1","state":"queued"}, …]' \
//        (a room may name a "ticket": the page is then loaded as that fan's, by its cookie)
//        --langs en,de,fr,es --out DIR [--brand-room queued --logo https://x/l.svg]
//
// Checks per page: <html lang> is the language asked for; the title is not the English
// one in another language; no console error (a Content-Security-Policy violation is one).
// The room named by --brand-room must show its colour (the --accent custom property of
// its hashed <style>) and its logo, which is answered inside the browser (page.route).
//
// Prints one JSON line; exit 0 = pass, 1 = a check failed, 2 = setup.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

function parseArgs(argv) {
  const a = { url: '', ca: '', rooms: '[]', langs: 'en,de,fr,es', out: '', timeout: 20,
              chromium: process.env.CHROMIUM || '/usr/bin/chromium', 'brand-room': '',
              'brand-color': '', logo: '' };
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
    if (!(k in a) || v === undefined) throw new Error(`unknown or incomplete option ${argv[i]}`);
    a[k] = k === 'timeout' ? Number(v) : v;
  }
  for (const k of ['url', 'ca', 'out']) if (!a[k]) throw new Error(`--${k} is required`);
  a.rooms = JSON.parse(a.rooms);
  a.langs = a.langs.split(',');
  return a;
}

// The stack's CA in a private NSS database of a throw-away HOME (as queue_page.mjs does).
function trustStore(ca, home) {
  const db = path.join(home, '.pki', 'nssdb');
  fs.mkdirSync(db, { recursive: true, mode: 0o700 });
  execFileSync('certutil', ['-N', '-d', `sql:${db}`, '--empty-password'], { stdio: 'pipe' });
  execFileSync('certutil', ['-A', '-d', `sql:${db}`, '-n', 'onsale dev CA', '-t', 'C,,', '-i', ca],
    { stdio: 'pipe' });
}

const LOGO = '<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40">' +
  '<rect width="120" height="40" rx="8" fill="#c81e4b"/>' +
  '<text x="60" y="27" font-size="18" text-anchor="middle" fill="#fff">LOGO</text></svg>';

async function main() {
  let args;
  try {
    args = parseArgs(process.argv);
  } catch (e) {
    console.log(JSON.stringify({ ok: false, error: String(e.message || e) }));
    process.exit(2);
  }
  const { chromium } = await import('playwright-core');
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'onsale-gallery-'));
  const result = { ok: false, checks: [], shots: [], out: args.out };
  const check = (name, ok, detail) => result.checks.push({ name, ok: !!ok, detail });
  let browser;
  try {
    trustStore(args.ca, home);
    fs.mkdirSync(args.out, { recursive: true });
    browser = await chromium.launch({ executablePath: args.chromium, headless: true,
      env: { ...process.env, HOME: home }, args: ['--no-sandbox'] });
    const english = {};
    for (const lang of args.langs) {
      const context = await browser.newContext({ locale: lang, viewport: { width: 820, height: 900 },
        extraHTTPHeaders: { 'Accept-Language': lang } });
      if (args.logo) {
        await context.route(args.logo, (route) => route.fulfill({ status: 200,
          contentType: 'image/svg+xml', body: LOGO }));
      }
      const page = await context.newPage();
      page.setDefaultTimeout(args.timeout * 1000);
      const errors = [];
      page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
      page.on('pageerror', (e) => errors.push(String(e)));
      for (const room of args.rooms) {
        const at = `${lang}/${room.name}`;
        errors.length = 0;
        if (room.ticket) {
          await context.addCookies([{ name: `onsale_q_${room.event}`, value: room.ticket,
                                      url: args.url, secure: true, httpOnly: true }]);
        }
        await page.goto(`${args.url}/q/${encodeURIComponent(room.event)}`);
        await page.waitForSelector(`main[data-state="${room.state}"]`);
        const seen = await page.evaluate(() => ({
          lang: document.documentElement.lang,
          title: document.getElementById('title').textContent.trim(),
          accent: getComputedStyle(document.documentElement).getPropertyValue('--accent').trim(),
          logo: (() => {
            const img = document.querySelector('img.logo');
            return img && !img.hidden ? img.naturalWidth : 0;
          })(),
        }));
        check(`${at}: html lang`, seen.lang === lang.toLowerCase(), seen.lang);
        if (lang === 'en') english[room.name] = seen.title;
        else check(`${at}: title translated`, seen.title && seen.title !== english[room.name], seen.title);
        if (room.name === args['brand-room']) {
          check(`${at}: brand colour`, seen.accent === args['brand-color'], seen.accent);
          check(`${at}: logo shown`, seen.logo > 0, seen.logo);
        }
        const file = path.join(args.out, `${lang}-${room.name}.png`);
        await page.screenshot({ path: file, fullPage: true });
        result.shots.push(file);
        // the unknown room's page comes with its 404, which chromium logs as an error
        const real = errors.filter((m) => !(room.state === 'unknown' &&
                                            /status of 404/.test(m)));
        check(`${at}: no console error (CSP)`, real.length === 0, real.slice(0, 3));
      }
      await context.close();
    }
    result.ok = result.checks.every((c) => c.ok);
  } catch (e) {
    result.error = String(e && e.stack || e);
  } finally {
    if (browser) await browser.close();
    fs.rmSync(home, { recursive: true, force: true });
  }
  console.log(JSON.stringify(result));
  process.exit(result.ok ? 0 : 1);
}

main();

/*
 * The reference storefront (shop.html): seat map and GA pools with live availability,
 * an all-or-nothing hold or best available beside each section's map (the reserve picks
 * the seats together; seats apart only when the fan accepts them), its countdown and extension at checkout, payment through the
 * provider (simulator test cards), the booking — and every error a buyer can meet, as a
 * message with the next step.
 *
 * The admission token comes from the waiting room in the URL fragment, is kept in
 * sessionStorage (this tab only) and sent only in the Authorization header of calls to
 * the buyer API of this origin. It never goes into a URL query, a cookie or a log. A
 * token bound to this storefront's key (cnf.jkt) goes with a DPoP proof by that key on
 * every call; one bound to another key is named as such, not silently refused.
 *
 * A fan who is finished (a loser who gave up, a buyer who has their tickets) presses
 * "leave the sale": POST /v1/events/{event}/done frees their place in the waiting room's
 * max_active at once instead of when the admission expires, and the token is forgotten.
 *
 * 3-D Secure: a confirm answered 202 requires_action sends the browser to the bank's page
 * (next_action.redirect_to_url.url) after keeping the checkout, the hold and the payment's
 * key in sessionStorage; the bank sends it back to /shop/ (the reserve's pay_return_url),
 * which polls GET /v1/checkouts/{id} until the checkout is settled and then asks the
 * confirm again with the same key for the final answer (never a second charge).
 */
(function () {
  'use strict';

  var POLL_MS = 3000;            /* availability refresh (answers may lag up to 1 s) */
  var CHECKOUT_POLL_MS = 2000;   /* while a payment is pending */
  var SLOW_CARD_MS = 12000;      /* longer than the reserve's default provider timeout */
  var KEY = 'onsale.admission.';
  var ACTION_KEY = 'onsale.3ds';  /* a payment waiting at the bank's page (this tab only) */

  var ev = null, token = null, claims = null, queueUrl = null;
  var seats = {}, seatEls = {}, sectionsBuilt = false, pools = [];
  var selected = [];             /* seat ids, in the order picked */
  var hold = null;               /* the hold answer (201) */
  var clockSkew = 0;             /* server time - local time, ms (from the Date header) */
  var pollTimer = null, tickTimer = null, lastSpoken = null;
  var extended = false, paying = false, payKey = null, paySource = null, payEmail = null;

  function $(id) { return document.getElementById(id); }
  function show(id) {
    ['s-loading', 's-gate', 's-pick', 's-hold', 's-done', 's-left'].forEach(function (s) { $(s).hidden = s !== id; });
  }

  /* ---- the admission token ---- */
  function b64json(s) {
    s = s.replace(/-/g, '+').replace(/_/g, '/');
    while (s.length % 4) s += '=';
    return JSON.parse(decodeURIComponent(Array.prototype.map.call(atob(s), function (c) {
      return '%' + ('00' + c.charCodeAt(0).toString(16)).slice(-2);
    }).join('')));
  }
  function readClaims(t) {
    try { return b64json(t.split('.')[1]); } catch (e) { return null; }
  }
  function takeToken() {
    var params = new URLSearchParams(location.search);
    ev = params.get('event');
    var frag = new URLSearchParams(location.hash.replace(/^#/, ''));
    var t = frag.get('admission_token');
    if (t) {
      var c = readClaims(t);
      if (!ev && c && typeof c.evt === 'string') ev = c.evt;
      if (ev) { try { sessionStorage.setItem(KEY + ev, t); } catch (e) { /* private mode */ } }
      token = t;
      /* out of the address bar (and history) at once */
      try { history.replaceState(null, '', location.pathname + location.search); } catch (e) { /* ignore */ }
    } else {
      /* back from the bank's 3-D Secure page: the return URL names no event */
      var back = actionPending();
      if (!ev && back) ev = back.ev;
      if (ev) { try { token = sessionStorage.getItem(KEY + ev); } catch (e) { token = null; } }
    }
    claims = token ? readClaims(token) : null;
    if (!ev && claims && typeof claims.evt === 'string') ev = claims.evt;
  }
  function forgetToken() {
    token = null;
    try { if (ev) sessionStorage.removeItem(KEY + ev); } catch (e) { /* ignore */ }
  }

  /* ---- this storefront's key (docs/api.md "DPoP") ----
     A P-256 key made here by WebCrypto, not extractable, kept in IndexedDB for this
     origin. Its thumbprint goes on the link to the waiting room (?bind=), which has the
     gateway bind the admission token to it (cnf.jkt); the reserve then wants, with such
     a token, a proof by this key on every request: a copied admission link is of no use
     in another browser. */
  var shopKey = null;    /* Promise of { pair, jwk, jkt }, or of null without WebCrypto */
  function b64u(bytes) {
    var s = '';
    for (var i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]);
    return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }
  function b64uText(text) { return b64u(new TextEncoder().encode(text)); }
  function newPair() {
    return crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign']);
  }
  function storedPair() {
    if (typeof indexedDB === 'undefined') return newPair();
    return new Promise(function (resolve) {
      var fresh = function () { resolve(newPair()); };
      try {
        var open = indexedDB.open('onsale-shop-dpop', 1);
        open.onupgradeneeded = function () { open.result.createObjectStore('keys'); };
        open.onerror = open.onblocked = fresh;
        open.onsuccess = function () {
          try {
            var db = open.result;
            var get = db.transaction('keys').objectStore('keys').get('shop');
            get.onerror = fresh;
            get.onsuccess = function () {
              if (get.result && get.result.privateKey) return resolve(get.result);
              newPair().then(function (pair) {
                try {
                  var put = db.transaction('keys', 'readwrite').objectStore('keys').put(pair, 'shop');
                  put.onsuccess = put.onerror = function () { resolve(pair); };
                } catch (e) { resolve(pair); }
              }, fresh);
            };
          } catch (e) { fresh(); }
        };
      } catch (e) { fresh(); }
    });
  }
  function getShopKey() {
    if (shopKey) return shopKey;
    if (typeof crypto === 'undefined' || !crypto.subtle || typeof TextEncoder === 'undefined') {
      shopKey = Promise.resolve(null);
      return shopKey;
    }
    shopKey = storedPair().then(function (pair) {
      return crypto.subtle.exportKey('jwk', pair.publicKey).then(function (j) {
        var jwk = { kty: 'EC', crv: 'P-256', x: j.x, y: j.y };
        /* RFC 7638: the required members in lexicographic order, no white space */
        var canon = '{"crv":"P-256","kty":"EC","x":"' + j.x + '","y":"' + j.y + '"}';
        return crypto.subtle.digest('SHA-256', new TextEncoder().encode(canon)).then(function (h) {
          return { pair: pair, jwk: jwk, jkt: b64u(new Uint8Array(h)) };
        });
      });
    }).then(null, function () { return null; });
    return shopKey;
  }
  function boundTo() { return claims && claims.cnf && typeof claims.cnf.jkt === 'string' ? claims.cnf.jkt : null; }
  /* A proof for one request (htu: this origin and the path, no query; iat on the
     server's clock), or null when the token is not bound to a key. */
  function proofFor(method, path) {
    if (!boundTo()) return Promise.resolve(null);
    return getShopKey().then(function (k) {
      if (!k) return null;
      var jti = new Uint8Array(16);
      crypto.getRandomValues(jti);
      var input = b64uText(JSON.stringify({ typ: 'dpop+jwt', alg: 'ES256', jwk: k.jwk })) + '.' +
        b64uText(JSON.stringify({ jti: b64u(jti), htm: method, htu: location.origin + path.split('?')[0],
                                  iat: Math.floor((Date.now() + clockSkew) / 1000) }));
      return crypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, k.pair.privateKey,
                                new TextEncoder().encode(input)).then(function (sig) {
        return input + '.' + b64u(new Uint8Array(sig));   /* WebCrypto's ECDSA is R || S */
      });
    });
  }
  function withBind(url, jkt) {
    if (!url || !jkt) return url;
    return url + (url.indexOf('?') >= 0 ? '&' : '?') + 'bind=' + jkt;
  }

  /* ---- formatting ---- */
  function money(amount, currency) {
    if (typeof amount !== 'number') return '—';
    try {
      return new Intl.NumberFormat('en-GB', { style: 'currency', currency: currency || 'EUR' }).format(amount / 100);
    } catch (e) { return (amount / 100).toFixed(2) + ' ' + (currency || ''); }
  }
  function clock(ms) {
    var d = new Date(ms - clockSkew);
    return d.toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  }
  function mmss(s) {
    s = Math.max(0, Math.ceil(s));
    return Math.floor(s / 60) + ':' + ('0' + (s % 60)).slice(-2);
  }
  function itemsText(h) {
    if (h.pool) return h.quantity + ' × ' + h.pool;
    return (h.seats || []).join(', ');
  }
  function seatLabel(id) {
    var m = /^([^-]+)-(\d+)-(\d+)$/.exec(id);
    return m ? 'Section ' + m[1] + ', row ' + m[2] + ', seat ' + m[3] : id;
  }

  /* ---- messages: what happened, and what to do next ---- */
  function alertBox(text, next, actions, kind) {
    $('alert-text').textContent = text;
    $('alert-next').textContent = next || '';
    var box = $('alert-actions');
    box.textContent = '';
    (actions || []).forEach(function (a) {
      var el;
      if (a.href) { el = document.createElement('a'); el.href = a.href; el.className = 'button'; }
      else { el = document.createElement('button'); el.type = 'button'; el.addEventListener('click', a.run); }
      el.textContent = a.label;
      box.appendChild(el);
    });
    $('alert').className = 'alert' + (kind === 'info' ? ' info' : '');
    $('alert').hidden = false;
    $('alert').focus();
  }
  function clearAlert() { $('alert').hidden = true; }
  function queueLink() {
    return queueUrl ? [{ label: 'Back to the waiting room', href: queueUrl }] : [];
  }

  /* The answers every call can meet; returns true when it handled one. */
  function commonError(res) {
    var j = res.json || {};
    if (res.status === 0) {
      alertBox('The ticket service could not be reached.', 'Check your connection; your place is kept. Try again in a moment.',
        [{ label: 'Try again', run: function () { clearAlert(); refresh(); } }]);
      return true;
    }
    if (res.status === 401 && (j.error === 'proof_required' || j.error === 'invalid_proof')) {
      stopPolling();
      alertBox('This admission belongs to another browser.',
        'It was given to the browser that waited in line, and works only there. Open the sale in that browser, or join the waiting room here.',
        queueLink());
      return true;
    }
    if (res.status === 401) {
      forgetToken();
      stopPolling();
      alertBox('Your admission has expired.', 'Admissions are valid for a limited time. Rejoin the waiting room to get a new one.', queueLink());
      gate();
      return true;
    }
    if (res.status === 403) {
      alertBox('Your admission is for another event.', 'Open the waiting room of this event to be admitted to it.', queueLink());
      return true;
    }
    if (res.status === 503 || res.status === 429 && j.error !== 'limit_exceeded') {
      alertBox('The ticket service is very busy right now.', 'Nothing was lost. Wait a few seconds and try again.', []);
      return true;
    }
    if (res.status === 404 && j.error === 'unknown_event') {
      stopPolling();
      alertBox('This event is not on sale here.', 'Check the link you followed, or go back to the waiting room.', queueLink());
      return true;
    }
    return false;
  }

  /* ---- the buyer API ---- */
  function api(method, path, body, headers, retried) {
    var h = { 'Accept': 'application/json' };
    if (token) h.Authorization = 'Bearer ' + token;
    var opts = { method: method, headers: h, cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) { h['Content-Type'] = 'application/json'; opts.body = JSON.stringify(body); }
    Object.keys(headers || {}).forEach(function (k) { h[k] = headers[k]; });
    return proofFor(method, path).then(function (p) {
      if (p) h.DPoP = p;
      return fetch(path, opts);
    }).then(function (r) {
      var date = Date.parse(r.headers.get('Date') || '');
      /* the Date header has whole seconds: correct only a real clock difference */
      if (!isNaN(date)) clockSkew = Math.abs(date - Date.now()) > 2000 ? date - Date.now() : 0;
      return r.text().then(function (t) {
        var j = null;
        try { j = JSON.parse(t); } catch (e) { j = null; }
        return { status: r.status, json: j };
      });
    }, function () { return { status: 0, json: null }; }).then(function (res) {
      /* a proof off by the clock (clockSkew is now the server's) or lost in a retry: once more */
      var why = res.status === 401 && res.json && res.json.reason;
      if (!retried && (why === 'stale' || why === 'replayed')) return api(method, path, body, headers, true);
      return res;
    });
  }
  function evPath(rest) { return '/v1/events/' + encodeURIComponent(ev) + rest; }
  function holdPath(rest) { return '/v1/holds/' + encodeURIComponent(hold.hold_id) + (rest || ''); }

  /* ---- seat map and pools ---- */
  function buildSections(list) {
    var box = $('sections'), bySection = {}, order = [];
    list.forEach(function (s) {
      if (!bySection[s.section]) { bySection[s.section] = []; order.push(s.section); }
      bySection[s.section].push(s);
    });
    box.textContent = '';
    order.forEach(function (sec) {
      var wrap = document.createElement('div');
      var h = document.createElement('h3');
      h.className = 'section-h';
      h.id = 'sec-' + sec;
      h.appendChild(document.createTextNode('Section ' + sec));
      var price = document.createElement('span');
      price.id = 'sec-price-' + sec;
      h.appendChild(price);
      var grid = document.createElement('div');
      grid.className = 'grid';
      grid.setAttribute('role', 'group');
      grid.setAttribute('aria-labelledby', 'sec-' + sec);
      var rows = {}, rowOrder = [];
      bySection[sec].forEach(function (s) {
        var m = /^[^-]+-(\d+)-\d+$/.exec(s.id), r = m ? m[1] : '';
        if (!rows[r]) { rows[r] = []; rowOrder.push(r); }
        rows[r].push(s);
      });
      var first = true;
      rowOrder.forEach(function (r) {
        var row = document.createElement('div');
        row.className = 'row';
        var rl = document.createElement('span');
        rl.className = 'rl';
        rl.textContent = r ? 'Row ' + r : '';
        rl.setAttribute('aria-hidden', 'true');
        row.appendChild(rl);
        rows[r].forEach(function (s) {
          var b = document.createElement('button');
          b.type = 'button';
          b.className = 'seat';
          b.dataset.seat = s.id;
          var n = /-(\d+)$/.exec(s.id);
          b.textContent = n ? n[1] : s.id;
          b.tabIndex = first ? 0 : -1;
          first = false;
          b.addEventListener('click', function () { toggleSeat(s.id); });
          b.addEventListener('keydown', seatKey);
          seatEls[s.id] = b;
          row.appendChild(b);
        });
        grid.appendChild(row);
      });
      wrap.appendChild(h);
      wrap.appendChild(bestBox(sec));
      wrap.appendChild(grid);
      box.appendChild(wrap);
      var p = bySection[sec][0].price;
      price.textContent = typeof p === 'number' ? money(p, currencyGuess) + ' per seat' : '';
    });
    sectionsBuilt = true;
  }
  var currencyGuess = 'EUR';
  /* Best available beside a section's map: how many seats, and the reserve picks the
     best block of them together in one step (no guessing seat after seat). */
  function bestBox(sec) {
    var row = document.createElement('div');
    row.className = 'best';
    var lab = document.createElement('label');
    lab.textContent = 'Best available: seats ';
    lab.htmlFor = 'best-q-' + sec;
    var q = document.createElement('input');
    q.type = 'number';
    q.min = '1';
    q.max = '50';
    q.step = '1';
    q.value = '2';
    q.id = 'best-q-' + sec;
    q.inputMode = 'numeric';
    var b = document.createElement('button');
    b.type = 'button';
    b.id = 'best-btn-' + sec;
    b.className = 'secondary';
    b.textContent = 'Find the best seats together';
    b.addEventListener('click', function () { holdBest(sec, false); });
    row.appendChild(lab);
    row.appendChild(q);
    row.appendChild(b);
    return row;
  }

  /* Arrow keys move between seats of a section (one tab stop per section). */
  function seatKey(e) {
    var b = e.currentTarget, row = b.parentNode, target = null;
    var idx = Array.prototype.indexOf.call(row.querySelectorAll('.seat'), b);
    if (e.key === 'ArrowRight') target = b.nextElementSibling;
    else if (e.key === 'ArrowLeft') target = b.previousElementSibling;
    else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      var other = e.key === 'ArrowDown' ? row.nextElementSibling : row.previousElementSibling;
      if (other) {
        var list = other.querySelectorAll('.seat');
        target = list[Math.min(idx, list.length - 1)];
      }
    } else if (e.key === 'Home') target = row.querySelector('.seat');
    else if (e.key === 'End') { var all = row.querySelectorAll('.seat'); target = all[all.length - 1]; }
    else return;
    e.preventDefault();
    if (target && target.classList.contains('seat')) {
      b.tabIndex = -1;
      target.tabIndex = 0;
      target.focus();
    }
  }

  function renderSeat(id) {
    var s = seats[id], b = seatEls[id];
    if (!s || !b) return;
    var mine = selected.indexOf(id) >= 0;
    var taken = s.status !== 'available' && !mine;
    b.classList.toggle('held', s.status === 'held' && !mine);
    b.classList.toggle('sold', s.status === 'sold' && !mine);
    b.setAttribute('aria-pressed', String(mine));
    b.setAttribute('aria-disabled', String(taken));
    b.setAttribute('aria-label', seatLabel(id) + (taken ? ', ' + s.status : mine ? ', selected' : ', available') +
      (typeof s.price === 'number' ? ', ' + money(s.price, currencyGuess) : ''));
  }

  function toggleSeat(id) {
    var s = seats[id];
    var i = selected.indexOf(id);
    if (i >= 0) selected.splice(i, 1);
    else if (s && s.status === 'available') selected.push(id);
    else return;
    renderSeat(id);
    renderCart();
  }

  function renderCart() {
    var total = 0;
    selected.forEach(function (id) { total += seats[id] && seats[id].price || 0; });
    $('cart-text').textContent = selected.length
      ? selected.length + (selected.length === 1 ? ' seat: ' : ' seats: ') + selected.join(', ') + ' — ' + money(total, currencyGuess)
      : 'No seat selected.';
    $('hold-btn').disabled = selected.length === 0;
    $('clear-btn').disabled = selected.length === 0;
  }

  function renderPools(list) {
    var box = $('pools');
    $('pools-box').hidden = list.length === 0;
    list.forEach(function (p) {
      var row = $('pool-' + p.id);
      if (!row) {
        row = document.createElement('div');
        row.className = 'pool';
        row.id = 'pool-' + p.id;
        var name = document.createElement('span');
        name.className = 'name';
        name.textContent = p.id;
        var left = document.createElement('span');
        left.id = 'pool-left-' + p.id;
        var lab = document.createElement('label');
        lab.textContent = 'Tickets ';
        lab.htmlFor = 'pool-q-' + p.id;
        var q = document.createElement('input');
        q.type = 'number';
        q.min = '1';
        q.step = '1';
        q.value = '1';
        q.id = 'pool-q-' + p.id;
        q.inputMode = 'numeric';
        var b = document.createElement('button');
        b.type = 'button';
        b.id = 'pool-btn-' + p.id;
        b.textContent = 'Hold';
        b.setAttribute('aria-describedby', 'pool-left-' + p.id);
        b.addEventListener('click', function () { holdPool(p.id); });
        row.appendChild(name);
        row.appendChild(left);
        row.appendChild(lab);
        row.appendChild(q);
        row.appendChild(b);
        box.appendChild(row);
      }
      $('pool-left-' + p.id).textContent = p.available > 0 ? p.available + ' of ' + p.capacity + ' left' : 'sold out';
      $('pool-btn-' + p.id).disabled = !(p.available > 0);
      $('pool-q-' + p.id).max = String(Math.max(1, p.available));
    });
  }

  function loadSeats() {
    return api('GET', evPath('/seats')).then(function (res) {
      if (res.status !== 200) return res;
      var list = res.json && res.json.seats || [];
      list.forEach(function (s) { seats[s.id] = s; });
      if (!sectionsBuilt) buildSections(list);
      /* someone else took a seat you had picked: drop it and say so */
      var lost = selected.filter(function (id) { return seats[id] && seats[id].status !== 'available'; });
      if (lost.length && !hold) {
        selected = selected.filter(function (id) { return lost.indexOf(id) < 0; });
        alertBox(plural(lost, 'was', 'were') + ' just taken by another fan.', 'Pick another seat; the rest of your choice is kept.', [], 'info');
      }
      Object.keys(seatEls).forEach(renderSeat);
      renderCart();
      return res;
    });
  }
  function loadAvailability() {
    return api('GET', evPath('/availability')).then(function (res) {
      if (res.status === 200 && res.json) { pools = res.json.pools || []; renderPools(pools); }
      return res;
    });
  }
  function refresh() {
    clearTimeout(pollTimer);
    if (!token) return Promise.resolve();
    return Promise.all([loadSeats(), loadAvailability()]).then(function (rs) {
      var bad = rs.filter(function (r) { return r.status !== 200; })[0];
      if (bad) { if (!commonError(bad)) alertBox('The seat map could not be loaded (' + bad.status + ').', 'Try again in a moment.', []); }
      else if ($('s-loading').hidden === false) show('s-pick');
      if (!bad || bad.status === 0 || bad.status === 503 || bad.status === 429) pollTimer = setTimeout(refresh, bad ? 3 * POLL_MS : POLL_MS);
    });
  }
  function stopPolling() { clearTimeout(pollTimer); pollTimer = null; }
  function plural(list, one, many) {
    return (list.length === 1 ? 'Seat ' + list[0] + ' ' + one : 'Seats ' + list.join(', ') + ' ' + many);
  }

  /* ---- taking a hold ---- */
  /* One key per press of the button: a retry after a lost answer (network) gets the
     same hold back (200) instead of taking a second one. */
  function takeHold(body, what) {
    clearAlert();
    $('hold-btn').disabled = true;
    var key = { 'Idempotency-Key': newKey() };
    var send = function () { return api('POST', evPath('/holds'), body, key); };
    return send().then(function (res) { return res.status === 0 ? send() : res; }).then(function (res) {
      var j = res.json || {};
      renderCart();
      if (res.status === 201 || res.status === 200 && j.state === 'held') { startHold(j); return; }
      if (res.status === 409 && j.error === 'seat_unavailable') {
        var un = j.unavailable || [];
        un.forEach(function (id) { if (seats[id]) seats[id].status = 'held'; });
        selected = selected.filter(function (id) { return un.indexOf(id) < 0; });
        Object.keys(seatEls).forEach(renderSeat);
        renderCart();
        alertBox(plural(un, 'was', 'were') + ' just taken by another fan, so nothing was held.',
          'Holds are all or nothing. Pick another seat' + (selected.length ? ' (your other choices are kept)' : '') + ' and press “Hold selected seats” again.', []);
        refresh();
        return;
      }
      if (res.status === 409 && j.error === 'sold_out') {
        alertBox(what.charAt(0).toUpperCase() + what.slice(1) + ' is sold out.', 'Choose seats or another ticket type.', []);
        refresh();
        return;
      }
      if (res.status === 409 && j.error === 'no_adjacent_seats') {
        alertBox('No ' + body.quantity + ' seats together are left in ' + what + '.',
          j.available + ' seats are still free there, apart. Nothing was held.',
          [{ label: 'Seats apart are fine', run: function () { clearAlert(); holdBest(body.section, true); } }]);
        refresh();
        return;
      }
      if (res.status === 409 && j.error === 'insufficient') {
        alertBox('Only ' + j.available + ' ' + what + ' ticket' + (j.available === 1 ? ' is' : 's are') + ' left.', 'Lower the number of tickets and try again.', []);
        refresh();
        return;
      }
      if (res.status === 429 && j.error === 'limit_exceeded') {
        alertBox('You can buy at most ' + j.max_per_buyer + ' tickets for this event.', 'Choose fewer tickets (tickets you already hold or bought count too).', []);
        return;
      }
      if (res.status === 404 && (j.error === 'unknown_seat' || j.error === 'unknown_pool' ||
                                 j.error === 'unknown_section')) {
        alertBox('That ticket no longer exists.', 'The seat map was reloaded; choose again.', []);
        sectionsBuilt = false;
        refresh();
        return;
      }
      if (!commonError(res)) alertBox('The hold failed (' + res.status + (j.error ? ' ' + j.error : '') + ').', 'Try again.', []);
    });
  }
  function holdSeats() { if (selected.length) takeHold({ seats: selected.slice() }, 'The seat'); }
  function holdBest(sec, split) {
    var q = parseInt($('best-q-' + sec).value, 10);
    if (!(q >= 1 && q <= 50)) { alertBox('Enter how many seats you want.', 'A whole number from 1 to 50.', []); $('best-q-' + sec).focus(); return; }
    var body = { section: sec, quantity: q };
    if (split) body.allow_split = true;
    takeHold(body, 'section ' + sec);
  }
  function holdPool(id) {
    var q = parseInt($('pool-q-' + id).value, 10);
    if (!(q >= 1)) { alertBox('Enter how many tickets you want.', 'A whole number, 1 or more.', []); $('pool-q-' + id).focus(); return; }
    takeHold({ pool: id, quantity: q }, id);
  }

  /* ---- the hold and its countdown ---- */
  function startHold(h) {
    hold = h;
    extended = false;
    payKey = null;
    if (h.currency) currencyGuess = h.currency;
    stopPolling();
    $('hold-items').textContent = itemsText(h);
    $('hold-amount').textContent = money(h.amount, h.currency);
    $('pay-amount').textContent = money(h.amount, h.currency);
    $('pay-form').hidden = true;
    $('hold-actions').hidden = false;
    $('checkout-btn').disabled = false;
    $('release-btn').disabled = false;
    $('pay-status').textContent = '';
    show('s-hold');
    lastSpoken = null;
    tick();
    $('hold-h').tabIndex = -1;
    $('hold-h').focus();
  }
  function remaining() {
    return hold ? (Date.parse(hold.expires_at) - (Date.now() + clockSkew)) / 1000 : 0;
  }
  function tick() {
    clearTimeout(tickTimer);
    if (!hold) return;
    var s = remaining();
    $('countdown').textContent = mmss(s);
    $('countdown').classList.toggle('low', s < 60);
    /* screen readers hear the time left at each whole minute, then at 30 and 10 seconds */
    var mark = s > 60 ? 'about ' + Math.round(s / 60) + (Math.round(s / 60) === 1 ? ' minute' : ' minutes')
      : s > 30 ? 'less than a minute' : s > 10 ? 'less than 30 seconds' : 'less than 10 seconds';
    if (mark !== lastSpoken) {
      lastSpoken = mark;
      $('countdown-live').textContent = 'Your seats are held for ' + mark + '.';
    }
    if (s <= 0) { expired(); return; }
    tickTimer = setTimeout(tick, 250);
  }
  function expired() {
    if (paying) return;   /* the confirm answer decides (hold_expired + refund) */
    var what = hold ? itemsText(hold) : '';
    endHold();
    alertBox('Your hold on ' + what + ' expired.', 'The tickets went back on sale. Choose again — they may still be available.', []);
  }
  function endHold() {
    hold = null;
    paying = false;
    clearTimeout(tickTimer);
    selected = [];
    show('s-pick');
    renderCart();
    refresh();
  }

  function checkout() {
    clearAlert();
    $('checkout-btn').disabled = true;
    api('POST', holdPath('/extend')).then(function (res) {
      var j = res.json || {};
      $('checkout-btn').disabled = false;
      if (res.status === 200 && j.expires_at) {
        hold.expires_at = j.expires_at;
        extended = true;
        lastSpoken = null;
        tick();
        $('hold-actions').hidden = true;
        $('pay-form').hidden = false;
        $('countdown-help').textContent = 'Extended for checkout, until ' + clock(Date.parse(j.expires_at)) + '.';
        var first = document.querySelector('#pay-form input[name=card]:checked');
        if (first) first.focus();
        return;
      }
      holdGone(res) || commonError(res) ||
        alertBox('The checkout could not start (' + res.status + ').', 'Try again.', []);
    });
  }
  /* 404 unknown_hold / 409 hold_expired on an existing hold */
  function holdGone(res) {
    var j = res.json || {};
    if (res.status === 409 && j.error === 'hold_expired' || res.status === 404 && j.error === 'unknown_hold') {
      var what = hold ? itemsText(hold) : '';
      endHold();
      alertBox('Your hold on ' + what + ' has expired.', 'The tickets went back on sale. Choose again.', []);
      return true;
    }
    return false;
  }
  function release() {
    $('release-btn').disabled = true;
    api('DELETE', holdPath()).then(function (res) {
      if (res.status === 200 || res.status === 204 || holdGone(res)) {
        if (hold) endHold();
        return;
      }
      $('release-btn').disabled = false;
      commonError(res) || alertBox('The hold could not be released (' + res.status + ').', 'It will expire by itself; you can also try again.', []);
    });
  }

  /* ---- payment ---- */
  function newKey() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    var a = new Uint8Array(16);
    crypto.getRandomValues(a);
    return Array.prototype.map.call(a, function (b) { return ('0' + b.toString(16)).slice(-2); }).join('');
  }
  function pay(e) {
    e.preventDefault();
    if (paying || !hold) return;
    var card = document.querySelector('#pay-form input[name=card]:checked').value;
    var source = card === 'slow' ? 'pm_sim_delay_' + SLOW_CARD_MS : card;
    var email = $('pay-email').value.trim();
    if (email && !$('pay-email').checkValidity()) {
      alertBox('That e-mail address does not look right.', 'Correct it or leave it empty.', []);
      return;
    }
    /* Another card or address is another request: a new key (the same key would be refused). */
    if (source !== paySource || email !== payEmail || !payKey) {
      payKey = newKey(); paySource = source; payEmail = email;
    }
    paying = true;
    clearAlert();
    $('pay-btn').disabled = true;
    $('pay-status').textContent = 'Paying ' + money(hold.amount, hold.currency) + '…';
    confirm();
  }
  function confirm() {
    var body = { payment: { amount: hold.amount, currency: hold.currency, source: paySource } };
    if (payEmail) body.email = payEmail;
    api('POST', holdPath('/confirm'), body, { 'Idempotency-Key': payKey }).then(onConfirm);
  }
  function onConfirm(res) {
    var j = res.json || {};
    if (res.status === 201 || res.status === 200 && j.booking_id) { actionDone(); booked(j); return; }
    if (res.status === 202 && j.state === 'requires_action' && toBank(j)) return;
    if (res.status === 202 || res.status === 409 && j.error === 'in_progress') {
      $('pay-status').textContent = 'Your bank is taking longer than usual. Please wait — we keep checking, and you will not be charged twice.';
      setTimeout(function () { pollCheckout(j.checkout_id); }, CHECKOUT_POLL_MS);
      return;
    }
    paying = false;
    $('pay-btn').disabled = false;
    $('pay-status').textContent = '';
    if (res.status === 402) {
      payKey = null;   /* the next attempt is a new purchase attempt */
      alertBox('Your card was declined. Nothing was charged.',
        'Your seats stay held until ' + clock(Date.parse(hold.expires_at)) + '. Choose another card and pay again.', []);
      return;
    }
    if (res.status === 409 && j.refund) {
      var what = itemsText(hold);
      endHold();
      alertBox(j.error === 'hold_expired'
        ? 'Your hold on ' + what + ' ran out before the payment completed.'
        : 'A ticket of your hold was booked by someone else before your payment completed.',
        'Your payment of ' + money(j.refund.amount, j.refund.currency) + ' was refunded (refund ' + j.refund.id + '). Choose again.', []);
      return;
    }
    if (res.status === 409 && j.error === 'hold_converted') {
      alertBox('These tickets are already booked.', 'Check your bookings; nothing more was charged.', []);
      return;
    }
    if (res.status === 400 && j.error === 'amount_mismatch') {
      alertBox('The price changed.', 'Release the hold and choose again to see the current price.', []);
      return;
    }
    if (res.status === 422) { payKey = null; }
    holdGone(res) || commonError(res) ||
      alertBox('The payment failed (' + res.status + (j.error ? ' ' + j.error : '') + ').', 'Nothing was booked. Try again.', []);
  }
  /* ---- 3-D Secure: the bank's page, then back here ---- */
  function actionPending() {
    try { return JSON.parse(sessionStorage.getItem(ACTION_KEY) || 'null'); } catch (e) { return null; }
  }
  function actionDone() { try { sessionStorage.removeItem(ACTION_KEY); } catch (e) { /* ignore */ } }
  function toBank(j) {
    var url = j.next_action && j.next_action.redirect_to_url && j.next_action.redirect_to_url.url;
    if (typeof url !== 'string' || !/^https?:\/\//.test(url)) return false;
    try {
      sessionStorage.setItem(ACTION_KEY, JSON.stringify({ ev: ev, checkout_id: j.checkout_id, hold: hold,
        key: payKey, source: paySource, email: payEmail }));
    } catch (e) { return false; }
    $('pay-status').textContent = 'Your bank asks you to confirm the payment. Taking you there…';
    location.assign(url);
    return true;
  }
  /* Back from the bank: the checkout says how it ended (webhook or lookup, seconds). */
  function fromBank(p) {
    startHold(p.hold);   /* (forgets the key: restored below) */
    extended = true;
    payKey = p.key; paySource = p.source; payEmail = p.email;
    $('hold-actions').hidden = true;
    paying = true;
    $('pay-btn').disabled = true;
    $('pay-status').textContent = 'Checking your payment with your bank…';
    waitAction(p.checkout_id);
  }
  function waitAction(id) {
    api('GET', '/v1/checkouts/' + encodeURIComponent(id)).then(function (res) {
      var st = res.json && res.json.state;
      if (res.status === 200 && (st === 'requires_action' || st === 'pending') || res.status === 0 || res.status === 503) {
        setTimeout(function () { waitAction(id); }, 1000);
        return;
      }
      actionDone();
      if (res.status === 200 && (st === 'failed' || st === 'released')) {
        paying = false;
        payKey = null;   /* the next attempt is a new purchase attempt */
        $('pay-btn').disabled = false;
        $('pay-status').textContent = '';
        $('pay-form').hidden = false;
        $('hold-actions').hidden = false;
        alertBox('The payment did not go through. Nothing was charged.',
          st === 'released' ? 'Your hold has ended. Choose again.'
            : 'Your seats stay held until ' + clock(Date.parse(hold.expires_at)) + '. Pay again or release them.', []);
        if (st === 'released') endHold();
        return;
      }
      confirm();   /* settled: the same key replays the final answer, booking id included */
    });
  }
  function pollCheckout(id) {
    if (!id) { confirm(); return; }
    api('GET', '/v1/checkouts/' + encodeURIComponent(id)).then(function (res) {
      var st = res.json && res.json.state;
      if (res.status === 200 && ['confirmed', 'refunded', 'released', 'failed', 'converted'].indexOf(st) >= 0) {
        confirm();   /* the same key replays the final answer, booking id included */
        return;
      }
      if (res.status === 200 || res.status === 0 || res.status === 503) {
        /* still pending: asking again with the same key resumes it; never a second charge */
        confirm();
        return;
      }
      paying = false;
      $('pay-btn').disabled = false;
      commonError(res) || alertBox('The payment status is unknown (' + res.status + ').', 'Do not pay again; reload this page in a minute.', []);
    });
  }
  function booked(j) {
    paying = false;
    hold = null;
    clearTimeout(tickTimer);
    $('done-booking').textContent = j.booking_id;
    $('done-items').textContent = itemsText(j);
    $('done-amount').textContent = money(j.amount, j.currency);
    $('pay-status').textContent = '';
    $('pay-btn').disabled = false;
    clearAlert();
    show('s-done');
    $('done-h').tabIndex = -1;
    $('done-h').focus();
  }

  /* ---- leaving: the place in the waiting room goes to the next fan ---- */
  function leave() {
    return api('POST', evPath('/done')).then(function (res) {
      if (res.status !== 200) {
        commonError(res) || alertBox('Leaving the sale failed (' + res.status + ').', 'Try again in a moment.', []);
        return;
      }
      stopPolling();
      forgetToken();
      clearAlert();
      $('who').textContent = 'You have left the sale';
      if (queueUrl) $('left-link').href = queueUrl; else $('left-link').hidden = true;
      show('s-left');
      $('left-h').tabIndex = -1;
      $('left-h').focus();
    });
  }

  /* ---- start ---- */
  function gate() {
    if (queueUrl) $('gate-link').href = queueUrl; else $('gate-link').hidden = true;
    show('s-gate');
  }
  function start() {
    takeToken();
    $('ev-name').textContent = ev || 'tickets';
    document.title = 'onsale · ' + (ev || 'tickets');
    $('hold-btn').addEventListener('click', holdSeats);
    $('clear-btn').addEventListener('click', function () {
      var was = selected;
      selected = [];
      was.forEach(renderSeat);
      renderCart();
    });
    $('checkout-btn').addEventListener('click', checkout);
    $('release-btn').addEventListener('click', release);
    $('pay-form').addEventListener('submit', pay);
    $('again-btn').addEventListener('click', function () { clearAlert(); selected = []; show('s-pick'); refresh(); });
    $('leave-btn').addEventListener('click', leave);
    $('leave-done-btn').addEventListener('click', leave);
    $('slow-s').textContent = String(SLOW_CARD_MS / 1000);
    var cfgP = fetch('config.json', { cache: 'no-store', credentials: 'omit' }).then(function (r) { return r.json(); })
      .catch(function () { return {}; });
    Promise.all([cfgP, getShopKey()]).then(function (got) {
        var cfg = got[0], key = got[1];
        if (cfg && typeof cfg.queue_url === 'string' && ev) queueUrl = cfg.queue_url.replace('{event}', encodeURIComponent(ev));
        queueUrl = withBind(queueUrl, key && key.jkt);   /* the token will be bound to this key */
        if (!ev || !token) { gate(); return; }
        if (boundTo() && (!key || key.jkt !== boundTo())) {
          alertBox('This admission belongs to another browser.',
            key ? 'It was given to the browser that waited in line, and works only there. Open the sale in that browser, or join the waiting room here.'
                : 'This browser cannot sign for it (no Web Crypto). Use an up-to-date browser with JavaScript, or join the waiting room there.',
            queueLink());
          gate();
          return;
        }
        if (claims && typeof claims.exp === 'number')
          $('who').textContent = 'You are admitted · admission valid until ' +
            new Date(claims.exp * 1000).toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit' });
        refresh();
        var back = actionPending();
        if (back && back.ev === ev && back.hold && back.checkout_id) fromBank(back);
      });
  }
  start();
})();

/*
 * The box office page (served by the reserve's admin listener at /office/): finds
 * bookings, cancels them, refunds single tickets and downloads the CSV exports through
 * the admin API (docs/api.md, "Box office"). The operator's token lives in the token
 * field only; every answer is shown through textContent, never as HTML.
 */
(function () {
  'use strict';

  function $(id) { return document.getElementById(id); }

  function status(text, isError) {
    var s = $('status');
    s.textContent = text;
    s.className = 'status' + (isError ? ' error' : '');
  }

  function token() {
    var t = $('token').value.trim();
    if (!t) { status('Enter the admin token first.', true); $('token').focus(); }
    return t;
  }

  function call(method, path) {
    var t = token();
    if (!t) return Promise.reject(new Error('no token'));
    return fetch(path, { method: method, headers: { Authorization: 'Bearer ' + t }, cache: 'no-store' })
      .then(function (res) {
        var ct = res.headers.get('Content-Type') || '';
        var body = ct.indexOf('json') >= 0 ? res.json() : res.text();
        return body.then(function (b) { return { status: res.status, body: b }; });
      });
  }

  function explain(r) {
    var b = r.body || {};
    return r.status + (b.error ? ' ' + b.error : '') + (b.message ? ': ' + b.message : '');
  }

  function money(amount, currency) {
    try {
      return new Intl.NumberFormat(undefined, { style: 'currency', currency: currency }).format(amount / 100);
    } catch (e) {
      return amount + ' ' + currency;
    }
  }

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function button(text, cls, onClick) {
    var b = el('button', text, cls);
    b.type = 'button';
    b.addEventListener('click', onClick);
    return b;
  }

  function act(b, path, what) {
    if (!window.confirm(what + '?')) return;
    status(what + '…');
    call('POST', path).then(function (r) {
      if (r.status === 200 || r.status === 202) {
        status(what + ': refund ' + r.body.refund_id + ' ' + r.body.refund_state +
          (r.status === 202 ? ' (the provider has not confirmed yet; it is retried)' : '') + '.');
        show([r.body.booking], true);
      } else {
        status(what + ' failed: ' + explain(r), true);
      }
    }, function (e) { if (e.message !== 'no token') status('Request failed: ' + e.message, true); });
  }

  function bookingCard(b) {
    var card = el('article', null, 'booking');
    card.appendChild(el('h3', 'Booking ' + b.booking_id + ' — ' + b.state));
    var dl = el('dl');
    [['Event', b.event], ['Checkout', b.checkout_id], ['Buyer', b.buyer], ['E-mail', b.email || '—'],
     ['Booked', b.created_at], ['Amount', money(b.amount, b.currency)],
     ['Refunded', money(b.refunded_amount, b.currency)], ['Payment id', b.payment_id || '—']]
      .forEach(function (kv) { dl.appendChild(el('dt', kv[0])); dl.appendChild(el('dd', kv[1])); });
    card.appendChild(dl);
    var base = '/admin/bookings/' + encodeURIComponent(b.booking_id);
    var items = el('table');
    var head = el('tr');
    ['Ticket', 'Price', 'State', ''].forEach(function (h) { head.appendChild(el('th', h)); });
    items.appendChild(head);
    b.items.forEach(function (it) {
      var tr = el('tr', null, it.state === 'refunded' ? 'refunded' : '');
      tr.appendChild(el('td', it.unit + (it.section ? ' (' + it.section + ')' : '')));
      tr.appendChild(el('td', money(it.price, b.currency)));
      tr.appendChild(el('td', it.state + (it.refund_id ? ' by ' + it.refund_id : '')));
      var td = el('td');
      if (it.state === 'booked' && b.checkout_state === 'confirmed') {
        td.appendChild(button('Refund this ticket', 'secondary', function (e) {
          act(e.target, base + '/items/' + encodeURIComponent(it.unit) + '/refund', 'Refund ' + it.unit);
        }));
      }
      tr.appendChild(td);
      items.appendChild(tr);
    });
    card.appendChild(items);
    if (b.refunds.length) {
      var rf = el('table');
      var rh = el('tr');
      ['Refund', 'Tickets', 'Amount', 'State', 'By'].forEach(function (h) { rh.appendChild(el('th', h)); });
      rf.appendChild(rh);
      b.refunds.forEach(function (x) {
        var tr = el('tr');
        [x.refund_id, x.units.join(' '), money(x.amount, b.currency),
         x.state + (x.provider_refund_id ? ' (' + x.provider_refund_id + ')' : ''), x.operator]
          .forEach(function (v) { tr.appendChild(el('td', v)); });
        rf.appendChild(tr);
      });
      card.appendChild(rf);
    }
    if (b.state !== 'cancelled' && b.checkout_state === 'confirmed') {
      card.appendChild(button('Cancel booking and refund', 'danger', function (e) {
        act(e.target, base + '/cancel', 'Cancel booking ' + b.booking_id);
      }));
    }
    return card;
  }

  function show(bookings, keepStatus) {
    var out = $('results');
    while (out.firstChild) out.removeChild(out.firstChild);
    bookings.forEach(function (b) { out.appendChild(bookingCard(b)); });
    if (!keepStatus) status(bookings.length ? bookings.length + ' booking(s) found.' : 'No booking found.');
  }

  function find(e) {
    e.preventDefault();
    var key = $('find-key').value, value = $('find-value').value.trim();
    if (!value) return;
    status('Searching…');
    call('GET', '/admin/bookings?' + key + '=' + encodeURIComponent(value)).then(function (r) {
      if (r.status === 200) show(r.body.bookings);
      else status('Search failed: ' + explain(r), true);
    }, function (e2) { if (e2.message !== 'no token') status('Request failed: ' + e2.message, true); });
  }

  function download(e) {
    e.preventDefault();
    var what = (e.submitter && e.submitter.dataset.what) || 'bookings';
    var ev = $('export-event').value.trim();
    if (!$('export-event').checkValidity()) { status('Event ids are 1-64 of A-Z a-z 0-9 . _ -', true); return; }
    call('GET', '/admin/events/' + encodeURIComponent(ev) + '/' + what + '.csv').then(function (r) {
      if (r.status !== 200) { status('Export failed: ' + explain(r), true); return; }
      var a = document.createElement('a');
      a.href = URL.createObjectURL(new Blob([r.body], { type: 'text/csv' }));
      a.download = ev + '-' + what + '.csv';
      document.body.appendChild(a);
      a.click();
      setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
      status('Downloaded ' + a.download + '.');
    }, function (e2) { if (e2.message !== 'no token') status('Request failed: ' + e2.message, true); });
  }

  document.addEventListener('DOMContentLoaded', function () {
    $('token-form').addEventListener('submit', function (e) { e.preventDefault(); });
    $('find-form').addEventListener('submit', find);
    $('export-form').addEventListener('submit', download);
  });
}());

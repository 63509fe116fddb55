"""The queue page is the operator's (docs/api.md "The queue page"; docs/operations.md "The
queue page"): its language chosen by Accept-Language among the built-in four and the
operator's files (page_languages_dir), Vary: Accept-Language on every page, the same
strict Content-Security-Policy in every language; a room's brand set through the admin
API, strictly validated (400 on a hostile value) and escaped where it shows."""

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile

import gwstack

LANG_DIR = None


def setUpModule():
    global LANG_DIR
    LANG_DIR = tempfile.mkdtemp(prefix="onsale-page-languages-")
    with open(os.path.join(LANG_DIR, "it.json"), "w", encoding="utf-8") as f:
        json.dump({"title_new": "Ti stiamo mettendo in fila",
                   "skip": "Vai alla coda", "waiting_room": "Sala d'attesa:"}, f)
    with open(os.path.join(LANG_DIR, "de.json"), "w", encoding="utf-8") as f:
        json.dump({"skip": "Direkt zur Warteschlange"}, f)
    gwstack.module_stack("gw-page", conf={"page_languages_dir": LANG_DIR})


def tearDownModule():
    shutil.rmtree(LANG_DIR, ignore_errors=True)


def html_lang(body):
    m = re.search(rb'<html lang="([^"]*)">', body)
    return m.group(1).decode() if m else None


class Languages(gwstack.GatewayTestCase):
    def page(self, ev, accept_language=None):
        headers = {"Accept-Language": accept_language} if accept_language is not None else {}
        r = self.c.get(f"/q/{ev}", headers=headers)
        self.assertEqual(r.status, 200, r)
        self.assertIn("Accept-Language", r.header("Vary") or "", "the page must say it varies")
        return r

    def test_accept_language_picks_the_page_language(self):
        ev = self.new_room(rate_per_minute=60)
        cases = [
            (None, "en", "Joining the queue"),
            ("de-DE,de;q=0.9,en;q=0.5", "de", "Sie werden eingereiht"),
            ("fr-CH, fr;q=0.9", "fr", "Entrée dans la file"),
            ("es-419,es;q=0.8", "es", "Entrando en la cola"),
            ("en;q=0.2, es;q=0.9", "es", "Entrando en la cola"),
            ("ja, zh-CN;q=0.8", "en", "Joining the queue"),  # none we have: English
            ("de;q=7, es;q=0.1", "es", "Entrando en la cola"),  # a malformed weight: skipped
            ("*", "en", "Joining the queue"),
            ("it-IT", "it", "Ti stiamo mettendo in fila"),  # the operator's language
        ]
        csps = set()
        for header, lang, title in cases:
            r = self.page(ev, header)
            self.assertEqual(html_lang(r.body), lang, f"Accept-Language: {header!r}")
            self.assertIn(f"<h1 id=\"title\">{title}</h1>".encode(), r.body, header)
            csps.add(r.header("Content-Security-Policy"))
        # one policy whatever the language: the page's script and style are the same bytes
        self.assertEqual(len(csps), 1, csps)
        csp = csps.pop()
        self.assertNotIn("unsafe", csp)
        self.assertIn("default-src 'none'", csp)

    def test_operator_files_add_and_reword(self):
        ev = self.new_room(rate_per_minute=60)
        it = self.page(ev, "it").body
        self.assertIn("Vai alla coda".encode(), it)
        # what the Italian file leaves out is English
        self.assertIn(b"Please keep this page open.", it)
        de = self.page(ev, "de").body
        self.assertIn("Direkt zur Warteschlange".encode(), de)  # the file's rewording
        self.assertIn("Bitte lassen Sie diese Seite geöffnet.".encode(), de)  # the rest built in

    def test_a_reload_takes_a_new_language_and_keeps_the_set_on_a_bad_file(self):
        """SIGHUP reads page_languages_dir again: a new file serves its language from the
        next page; a broken file changes nothing (the set in force stays)."""
        import signal
        ev = self.new_room(rate_per_minute=60)
        nl = os.path.join(LANG_DIR, "nl.json")
        bad = os.path.join(LANG_DIR, "sv.json")
        self.addCleanup(lambda: [os.path.exists(p) and os.unlink(p) for p in (nl, bad)])
        with open(nl, "w", encoding="utf-8") as f:
            json.dump({"title_new": "Je plek in de rij wordt geregeld"}, f)
        self.GS.g.proc.send_signal(signal.SIGHUP)
        gwstack.wait_for(lambda: html_lang(self.page(ev, "nl").body) == "nl", timeout=10,
                         what="the reload to serve nl")
        self.assertIn("Je plek in de rij wordt geregeld".encode(), self.page(ev, "nl").body)
        with open(bad, "w", encoding="utf-8") as f:
            f.write('{"no_such_key": "x"}')
        os.unlink(nl)
        self.GS.g.proc.send_signal(signal.SIGHUP)
        # the reload is refused as a whole: nl stays served, sv never is
        with open(self.GS.g.log_path, encoding="utf-8", errors="replace") as log:
            gwstack.wait_for(lambda: "sv.json" in log.read() or None, timeout=10,
                             what="the refused reload in the log")
        self.assertEqual(html_lang(self.page(ev, "nl").body), "nl")
        self.assertEqual(html_lang(self.page(ev, "sv").body), "en")

    def test_error_and_terminal_pages_follow_the_language(self):
        r = self.c.get(f"/q/{gwstack.new_id('nope')}", headers={"Accept-Language": "fr"})
        self.assertEqual(r.status, 404, r)
        self.assertEqual(html_lang(r.body), "fr")
        self.assertIn("Salle d’attente introuvable".encode(), r.body)
        self.assertIn("Accept-Language", r.header("Vary") or "")
        ev = self.new_room(rate_per_minute=60, sold_out=True)
        r = self.c.get(f"/q/{ev}", headers={"Accept-Language": "es"})
        self.assertEqual(html_lang(r.body), "es")
        self.assertIn("Agotado".encode(), r.body)

    def test_the_script_reads_its_words_from_the_page(self):
        ev = self.new_room(rate_per_minute=60)
        body = self.page(ev, "de").body.decode()
        m = re.search(r'data-msgs="([^"]*)"', body)
        self.assertIsNotNone(m, "no catalogue for the script")
        import html
        msgs = json.loads(html.unescape(m.group(1)))
        self.assertEqual(msgs["title_sold_out"], "Ausverkauft")
        self.assertEqual(msgs["thousands_sep"], ".")
        script = body[body.index("<script>"):body.index("</script>")]
        for english in ("Sold out", "You are number", "calculating", "Opening…",
                        "percent of the way", "Please check your code"):
            self.assertNotIn(english, script, "the script must say it from the catalogue")


def sha256_source(text):
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


class Branding(gwstack.GatewayTestCase):
    BRAND = {
        "brand_title": "Summer </script><script>alert(1)</script> \"Tour\" & 'co'",
        "brand_logo_url": "https://cdn.example.com/logos/summer.png?v=2",
        "brand_color": "#C81E4B",
        "brand_background": "#fdf6e3",
    }

    def test_brand_through_the_admin_api(self):
        ev = self.new_room(rate_per_minute=60, **self.BRAND)
        got = self.GS.admin("GET", f"/admin/events/{ev}")
        self.assertEqual(got.status, 200, got)
        self.assertEqual(got.json["brand_title"], self.BRAND["brand_title"])
        self.assertEqual(got.json["brand_color"], "#c81e4b")  # kept in lower case
        self.assertEqual(got.json["brand_logo_url"], self.BRAND["brand_logo_url"])
        r = self.c.get(f"/q/{ev}", headers={"Accept-Language": "fr"})
        self.assertEqual(r.status, 200, r)
        body, csp = r.body.decode(), r.header("Content-Security-Policy")
        self.assertIn("Summer &lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt; &quot;Tour&quot;"
                      " &amp; &#39;co&#39;", body)
        self.assertNotIn("<script>alert", body)
        self.assertIn('src="https://cdn.example.com/logos/summer.png?v=2"', body)
        self.assertIn("img-src 'self' data: https://cdn.example.com;", csp)
        style = ":root{--accent:#c81e4b;--accent-fg:#ffffff;--bg:#fdf6e3;}"
        self.assertIn(f"<style>{style}</style>", body)
        self.assertIn(sha256_source(style), csp)
        self.assertNotIn("unsafe", csp)
        # null takes a field back to the gateway's own look
        self.patch(ev, brand_color=None, brand_background=None, brand_logo_url=None,
                   brand_title=None)
        r = self.c.get(f"/q/{ev}")
        self.assertNotIn("<style>:root", r.body.decode())
        self.assertIn('<span id="brand-title">onsale</span>', r.body.decode())
        self.assertNotIn("cdn.example.com", r.header("Content-Security-Policy"))

    def test_hostile_brand_values_are_refused(self):
        ev = self.new_room(rate_per_minute=60)
        hostile = [
            {"brand_color": "red"},
            {"brand_color": "#fff"},
            {"brand_color": "#c81e4b;}body{background:url(https://evil.example/x)}"},
            {"brand_background": "url(https://evil.example/x)"},
            {"brand_background": "expression(alert(1))"},
            {"brand_color": 13181003},
            {"brand_logo_url": "javascript:alert(1)"},
            {"brand_logo_url": "http://cdn.example.com/logo.png"},
            {"brand_logo_url": "https://cdn.example.com/a\"onerror=\"alert(1)"},
            {"brand_logo_url": "https://cdn.example.com/a b;script-src *"},
            {"brand_logo_url": "data:image/svg+xml,<svg onload=alert(1)>"},
            {"brand_title": "line\nbreak"},
            {"brand_title": "x" * 81},
        ]
        for body in hostile:
            r = self.GS.admin("PATCH", f"/admin/events/{ev}", body)
            self.assertStatus(r, 400, "invalid_request", msg=f"PATCH {body!r}:")
        page = self.c.get(f"/q/{ev}")
        self.assertEqual(page.status, 200, page)
        self.assertNotIn(b"evil.example", page.body)
        self.assertNotIn("evil", page.header("Content-Security-Policy"))

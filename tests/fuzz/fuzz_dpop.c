/*
 * Fuzz target: the gateway's DPoP proof parser and verifier (gateway/gw_dpop.c) on
 * arbitrary text. Nothing the fuzzer writes verifies (it cannot sign for a key whose
 * thumbprint leads the ticket's); whatever parses has the shape the parser promises; and
 * the last bytes of the input, taken as a thumbprint and a ticket, never crash the checks.
 */
#include "fuzz.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_dpop.h"

static size_t slen(const char *s, size_t max)
{
    size_t n = 0;
    while (n < max && s[n] != '\0')
        n++;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    gw_dpop_proof_t p;
    gw_dpop_result_t r = gw_dpop_parse(text, size, &p);
    if (r == GW_DPOP_OK) {
        CHECK(slen(p.jkt, sizeof(p.jkt)) == CM_JWT_JKT_LEN);
        size_t j = slen(p.jti, sizeof(p.jti));
        CHECK(j >= 8 && j <= GW_DPOP_JTI_MAX);
        CHECK(slen(p.htm, sizeof(p.htm)) < sizeof(p.htm));
        CHECK(slen(p.htu, sizeof(p.htu)) < sizeof(p.htu));
    } else {
        CHECK(p.jkt[0] == '\0');
    }
    /* the join's key-only parse: whatever the full parse accepts, it accepts, same key */
    gw_dpop_proof_t k;
    gw_dpop_result_t rk = gw_dpop_parse_key(text, size, &k);
    if (r == GW_DPOP_OK)
        CHECK(rk == GW_DPOP_OK && strcmp(k.jkt, p.jkt) == 0);
    /* a ticket bound to a key nobody here holds: never verified */
    gw_ticket_t t = {.bound = true};
    memset(t.jkt, 0x5a, sizeof(t.jkt));
    gw_dpop_want_t want = {.method = "GET", .host = "h", .path = "/q/e/status", .ticket = &t};
    CHECK(gw_dpop_verify(text, size, &want, 1800000000, &p) != GW_DPOP_OK);
    /* a ticket bound to the proof's own key: the signature decides, and is not forged */
    if (r == GW_DPOP_OK) {
        gw_dpop_proof_t q;
        (void)gw_dpop_parse(text, size, &q);
        gw_dpop_jkt_bytes(q.jkt, t.jkt);
        (void)gw_dpop_verify(text, size, &want, q.iat, &p);
        (void)gw_dpop_htu_ok(q.htu, "h", "/q/e/status", true);
    }
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    (void)gw_dpop_htu_ok(s, "h", "/q/e/status", true);
    unsigned char lead[GW_TICKET_JKT_LEN];
    gw_dpop_jkt_bytes(s, lead);
    free(s);
    return 0;
}

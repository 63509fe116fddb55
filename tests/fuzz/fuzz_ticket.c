/*
 * Fuzz target: the gateway's queue-ticket decoder and cookie finder on arbitrary text.
 * A forged ticket must never decode; a ticket the encoder made must always decode to
 * what was encoded.
 */
#include "fuzz.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_ticket.h"

static const unsigned char secret[] = "0123456789abcdef0123456789abcdef-fuzz";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gw_ticket_t t;
    /* Arbitrary text: only a valid MAC decodes, and the fuzzer cannot make one. */
    CHECK(gw_ticket_decode(secret, sizeof(secret) - 1, "ev1", (const char *)data, size, &t) != 0);

    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    size_t len = 0;
    const char *v = gw_ticket_from_cookie(s, "ev1", &len);
    if (v)
        CHECK(v >= s && v + len <= s + size);

    /* Round trip with fields taken from the input. */
    gw_ticket_t in = {0};
    memcpy(&in.num, data, size < 8 ? size : 8);
    memcpy(&in.gen, data + (size > 8 ? 8 : size), size > 16 ? 8 : (size > 8 ? size - 8 : 0));
    in.iat = 1800000000;
    gw_ticket_new_visitor(in.visitor);
    char text[GW_TICKET_MAX_LEN];
    size_t n = gw_ticket_encode(secret, sizeof(secret) - 1, "ev1", &in, text, sizeof(text));
    CHECK(n > 0);
    gw_ticket_t out;
    CHECK(gw_ticket_decode(secret, sizeof(secret) - 1, "ev1", text, n, &out) == 0);
    CHECK(out.num == in.num && out.gen == in.gen && strcmp(out.visitor, in.visitor) == 0);
    CHECK(gw_ticket_decode(secret, sizeof(secret) - 1, "ev2", text, n, &out) != 0);

    /* A customer's ticket with the input as the customer id, when it is one: the id comes
     * back exactly, and nothing else decodes the same text. */
    size_t cl = size < GW_CUSTOMER_MAX ? size : GW_CUSTOMER_MAX;
    if (gw_ticket_customer_ok(s, cl)) {
        memcpy(in.customer, s, cl);
        in.customer[cl] = '\0';
        n = gw_ticket_encode(secret, sizeof(secret) - 1, "ev1", &in, text, sizeof(text));
        CHECK(n > 0 && n < GW_TICKET_MAX_LEN);
        CHECK(gw_ticket_decode(secret, sizeof(secret) - 1, "ev1", text, n, &out) == 0);
        CHECK(strcmp(out.customer, in.customer) == 0 && out.num == in.num);
        CHECK(gw_ticket_decode(secret, sizeof(secret) - 1, "ev1", text, n - 1, &out) != 0);
    }
    free(s);
    return 0;
}

/*
 * Fuzz target: the presale-code parser on arbitrary text. It never reads past the input,
 * never accepts a text over GW_CODE_INPUT_MAX, and a code it accepts is written back by the
 * maker (with a genuine tag) in a form that parses to the same batch and serial.
 */
#include "fuzz.h"
#include <stdint.h>
#include <string.h>

#include "gw_code.h"

static const unsigned char secret[] = "fuzz-code-secret-0123456789abcdef";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gw_code_t c;
    if (gw_code_parse((const char *)data, size, &c) != 0)
        return 0;
    CHECK(size <= GW_CODE_INPUT_MAX);
    CHECK(c.batch >= 1 && c.batch <= GW_CODE_BATCH_MAX && c.serial < GW_CODE_SERIALS);
    char text[GW_CODE_TEXT_MAX];
    size_t n = gw_code_make(secret, sizeof(secret) - 1, "ev1", 7, c.batch, c.serial, text);
    gw_code_t back;
    CHECK(gw_code_parse(text, n, &back) == 0);
    CHECK(back.batch == c.batch && back.serial == c.serial);
    CHECK(gw_code_genuine(secret, sizeof(secret) - 1, "ev1", 7, &back));
    return 0;
}

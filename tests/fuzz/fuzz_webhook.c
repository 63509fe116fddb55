/*
 * Fuzz target: a provider webhook's body (rsv_webhook_parse). Properties beyond "no
 * crash, no leak": a parse either fills the event or gives a reason; every field it fills
 * is NUL-terminated, shorter than RSV_WEBHOOK_FIELD_MAX and free of control characters;
 * a relevant event always names its payment.
 */
#include "fuzz.h"
#include <stdint.h>
#include <string.h>

#include "rsv_webhook.h"

static void clean(const char *s)
{
    size_t n = strnlen(s, RSV_WEBHOOK_FIELD_MAX);
    CHECK(n < RSV_WEBHOOK_FIELD_MAX);
    for (size_t i = 0; i < n; i++)
        CHECK((unsigned char)s[i] >= 0x20 && s[i] != 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rsv_webhook_event_t ev;
    const char *why = NULL;
    if (rsv_webhook_parse((const char *)data, size, &ev, &why) != 0) {
        CHECK(why != NULL);
        return 0;
    }
    clean(ev.id);
    clean(ev.type);
    clean(ev.object_id);
    clean(ev.checkout);
    CHECK(ev.id[0] != '\0' && ev.type[0] != '\0');
    CHECK(!ev.relevant || ev.object_id[0] != '\0');
    CHECK(ev.created >= 0);
    return 0;
}

/*
 * Fuzz target: common/cm_addrtab.c against a model. The first byte picks the full policy
 * and the probes of a 16-slot table; every following pair of bytes is one call: add 1–3
 * to a key (adding it), take 1 from it, or look it up (neither adds), on one of 32 keys
 * whose homes crowd four slots. The model is each key's count and whether it has an
 * entry. Properties: a value shown to a callback is the model's count (an entry never
 * comes back from the dead, never shows another key's count); a new entry starts at 0;
 * under the pass policy nothing is ever lost (a call fails only for a key without an
 * entry, and the table holds exactly the model's keys); under evict and restart an add
 * never fails; the table never holds more than its slots.
 */
#include "fuzz.h"
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cm_addrtab.h"

#define KEYS  32
#define SLOTS 16

typedef struct model {
    int64_t count[KEYS];
    bool known[KEYS];
    int key;
    int64_t delta;
    bool saw_fresh;
    int64_t after;
} model_t;

static int64_t used_at(const void *value)
{
    return ((const int64_t *)value)[1];
}

static cm_addrtab_verdict_t on_visit(void *value, bool fresh, void *arg)
{
    int64_t *v = value; /* [0] the count, [1] when last used */
    model_t *m = arg;
    m->saw_fresh = fresh;
    if (fresh)
        CHECK(v[0] == 0 && v[1] == 0);
    else
        CHECK(m->known[m->key] && v[0] == m->count[m->key]);
    v[0] += m->delta;
    v[1]++;
    m->after = v[0];
    return v[0] <= 0 ? CM_ADDRTAB_DROP : CM_ADDRTAB_KEEP;
}

static uint64_t key_of(int k)
{
    return 1 + (uint64_t)(k % 4) + (uint64_t)(k / 4) * SLOTS; /* homes 1..4 */
}

static void step(cm_addrtab_t *t, cm_addrtab_full_t full, model_t *m, uint8_t op, uint8_t k)
{
    m->key = k % KEYS;
    int kind = op % 3;
    bool add = kind == 0;
    m->delta = add ? 1 + op / 3 % 3 : kind == 1 ? -1 : 0;
    m->saw_fresh = false;
    int rc = cm_addrtab_visit(t, key_of(m->key), add, on_visit, m);
    if (rc != 0) {
        CHECK(!add || full == CM_ADDRTAB_FULL_PASS);
        if (full == CM_ADDRTAB_FULL_PASS)
            CHECK(!m->known[m->key]);
        m->known[m->key] = false; /* evicted or restarted away, or never there */
        return;
    }
    CHECK(add || !m->saw_fresh);
    if (m->saw_fresh) {
        CHECK(full != CM_ADDRTAB_FULL_PASS || !m->known[m->key]);
        m->count[m->key] = 0;
    }
    m->count[m->key] += m->delta;
    CHECK(m->after == m->count[m->key]);
    m->known[m->key] = m->count[m->key] > 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const cm_addrtab_full_t fulls[] = {CM_ADDRTAB_FULL_PASS, CM_ADDRTAB_FULL_EVICT,
                                       CM_ADDRTAB_FULL_RESTART};
    cm_addrtab_full_t full = fulls[data[0] % 3];
    cm_addrtab_t *t = cm_addrtab_new(&(cm_addrtab_config_t){.slots = SLOTS,
                                                            .probes = 1 + data[0] / 3 % 8,
                                                            .value_size = 2 * sizeof(int64_t),
                                                            .full = full,
                                                            .last_used = used_at});
    model_t m;
    memset(&m, 0, sizeof(m));
    for (size_t i = 1; i + 1 < size; i += 2) {
        step(t, full, &m, data[i], data[i + 1]);
        size_t known = 0;
        for (int k = 0; k < KEYS; k++)
            known += m.known[k];
        size_t n = cm_addrtab_count(t);
        CHECK(n <= SLOTS && n >= (full == CM_ADDRTAB_FULL_PASS ? known : 0));
        if (full == CM_ADDRTAB_FULL_PASS)
            CHECK(n == known);
    }
    cm_addrtab_free(t);
    return 0;
}

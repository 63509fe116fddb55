/*
 * Fuzz target: the reserve's inventory validation (rsv_catalog_normalise) on arbitrary
 * JSON. Whatever it accepts must be the normalised shape Postgres expects: ids that are
 * identifiers, non-negative prices, at least one seat or pool.
 */
#include "fuzz.h"
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "cm_parse.h"
#include "rsv_catalog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *body = json_loadb((const char *)data, size, 0, NULL);
    if (body == NULL)
        return 0;
    char err[256];
    json_t *doc = rsv_catalog_normalise(body, err, sizeof(err));
    if (doc) {
        json_t *seats = json_object_get(doc, "seats"), *pools = json_object_get(doc, "pools");
        CHECK(json_array_size(seats) + json_array_size(pools) > 0);
        size_t i;
        json_t *row;
        json_array_foreach(seats, i, row)
        {
            CHECK(cm_parse_ident(json_string_value(json_array_get(row, 0))));
            CHECK(json_integer_value(json_array_get(row, 2)) >= 0);
        }
        json_array_foreach(pools, i, row)
        {
            CHECK(cm_parse_ident(json_string_value(json_array_get(row, 0))));
            CHECK(json_integer_value(json_array_get(row, 1)) >= 1);
        }
        json_decref(doc);
    }
    json_decref(body);
    return 0;
}

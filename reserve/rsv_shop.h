/*
 * rsv_shop — the reference storefront: static pages under /shop/ (reserve/www/, compiled
 * in as C strings) plus /shop/config.json, which tells the page where the waiting room
 * is (`shop_queue_url`). The pages call the buyer API on the same origin.
 *
 * Answers carry a strict Content-Security-Policy (scripts and styles only from files of
 * this origin, no 'unsafe-inline'), nosniff, no referrer and no framing. Event-loop
 * thread; no I/O (the files are in the binary).
 */
#ifndef RSV_SHOP_H
#define RSV_SHOP_H

#include <stdbool.h>
#include "cm_http.h"

typedef struct rsv_server rsv_server_t;

/**
 * Serves GET/HEAD /shop, /shop/ and the storefront's files when the path is under
 * /shop; returns false (nothing answered) for every other path.
 */
bool rsv_shop_serve(rsv_server_t *srv, cm_req_t *req, char **seg, int n);

#endif

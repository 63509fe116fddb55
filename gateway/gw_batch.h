/*
 * gw_batch — new places numbered in batches: the joins one worker takes for one room
 * within a short window (join_batch_us) go to Redis as one join_batch.lua call, which
 * reads the room once, takes one block of numbers with one INCRBY (handed out in
 * arrival order) or adds the pre-queue arrivals with one ZADD. Each fan still gets its
 * own answer through its callback, exactly what join.lua would have told it.
 *
 * One gw_batch_t per worker, used only on that worker's loop thread. A room's batch is
 * sent once the loop has run what was ready if Redis has none of the room's batches from
 * this worker in flight, else as soon as that one is answered (either no sooner than
 * gap_us after the room's previous send); at the latest when its
 * window ends (a libevent timer: nothing waits on the loop); at once when it reaches
 * join_batch_max fans. So an idle Redis adds no wait, and under a crowd a batch holds
 * what arrived during one round trip. docs/design.md ("Numbering in batches") argues the
 * fairness bound and why no number is handed out twice.
 */
#ifndef GW_BATCH_H
#define GW_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "cm_redis.h"
#include "gw_rediskeys.h"
#include "gw_lua.h"
#include "gw_pow.h"
#include "gw_ticket.h"

struct event_base;

/** The largest batch join_batch_max allows. */
#define GW_BATCH_CAP_MAX 1024
/** gw_queue's gap: a quarter of the window (docs/design.md, "Numbering in batches"). */
#define GW_BATCH_GAP_DIV 4
/** Rooms with a batch open at once per worker; a join of one more is sent alone. */
#define GW_BATCH_ROOMS 32

/**
 * What Redis decided for one fan's join: join.lua's reply, whichever script made it.
 * what: its word (gw_lua.h; never GW_JOIN_BAD: that is an error). gen (queued,
 * prequeue): the room's generation; num: the queue number (0 in the pre-queue); now_ms:
 * Redis' clock at the join; at: the epoch-ms text of not_open's prequeue_at or
 * prequeue_full's opens_at (else NULL). The strings live only during the callback that
 * receives them.
 */
typedef struct gw_join_result {
    gw_join_word_t what;
    const char *gen;
    int64_t num;
    int64_t now_ms;
    const char *at;
} gw_join_result_t;

/** One join's answer: err NULL and res set, or err (cm_err_*) and res NULL. */
typedef void (*gw_batch_cb)(void *arg, const char *err, const gw_join_result_t *res);

/** One fan of a batch (copied by gw_batch_add). proof_key[0] '\0': no proof of work. */
typedef struct gw_batch_fan {
    char visitor[GW_VISITOR_LEN + 1];
    char score[24];                                      /* its random pre-queue order (decimal) */
    char proof_serial[12];                               /* the proof's serial (decimal) */
    char proof_key[GW_KEY_MAX + GW_POW_ISSUER_LEN + 32]; /* the bitmap it is marked in */
    char proof_ttl[24];                                  /* that bitmap's lifetime, seconds */
} gw_batch_fan_t;

typedef struct gw_batch gw_batch_t;

/**
 * A batcher on base, sending through redis (both borrowed, and must outlive it):
 * window_us > 0 the longest a fan waits for its batch to be sent; gap_us (0 .. window_us)
 * the least time between two sends of a room that do not wait for the window; cap (1 ..
 * GW_BATCH_CAP_MAX) the size that sends it at once. Never NULL (aborts on OOM).
 */
gw_batch_t *gw_batch_new(struct event_base *base, cm_redis_t *redis, int64_t window_us,
                         int64_t gap_us, int cap);

/**
 * Adds fan (copied) to event's open batch; cb(arg, …) is called exactly once: when Redis
 * answers the batch, or with an error for every fan of it (the script failed or timed
 * out: cm_err_* from cm_redis; cm_err_protocol for a reply of the wrong shape;
 * cm_err_closed, possibly before this call returns, when the batch could not be sent;
 * cm_err_shutdown from gw_batch_free). Loop thread only.
 */
void gw_batch_add(gw_batch_t *b, const char *event, const gw_batch_fan_t *fan, gw_batch_cb cb,
                  void *arg);

/** Batches sent to Redis so far (tests and metrics). */
uint64_t gw_batch_sent(const gw_batch_t *b);

/** Fails every fan still waiting for its window with cm_err_shutdown, frees b. NULL is
 *  fine. Batches already sent are answered by cm_redis (free the batcher first). */
void gw_batch_free(gw_batch_t *b);

#endif

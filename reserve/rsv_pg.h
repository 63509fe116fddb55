/*
 * rsv_pg — the one asynchronous Postgres client: a small pool of libpq connections
 * driven by the event loop (PQsendQueryParams + PQsocket events). A statement with
 * parameters is prepared once per connection and then runs prepared (a session-level
 * pooler in between must keep a client on one server connection for its session).
 *
 * Runs on the event-loop thread; never blocks after the loop starts: connects use
 * PQconnectStart/PQconnectPoll, queries PQsendQueryParams/PQconsumeInput. Each query
 * goes to an idle connection or waits in a bounded FIFO; each has a deadline, after
 * which its callback gets cm_err_timeout and its connection is closed (the server
 * rolls the statement back) and reopened. A lost connection fails its query with
 * cm_err_closed and reconnects with capped backoff.
 *
 * Only this module includes libpq. A result handed to a callback lives only during
 * that callback (it is PQclear'ed once afterwards): copy what you keep.
 *
 * rsv_pg_migrate runs synchronously and is for start-up only (before the loop).
 */
#ifndef RSV_PG_H
#define RSV_PG_H

#include <stddef.h>

struct event_base;
typedef struct rsv_pg rsv_pg_t;
typedef struct pg_result rsv_pg_result_t;

/**
 * err: NULL on success (command or tuples OK). cm_err_server when Postgres answered
 * with an error: res is set, see rsv_pg_result_sqlstate / _message. cm_err_timeout,
 * cm_err_closed (connection lost or none available), cm_err_busy (queue full) or
 * cm_err_shutdown with res NULL.
 */
typedef void (*rsv_pg_cb)(const char *err, const rsv_pg_result_t *res, void *arg);

/** A pool of `size` connections to conninfo; starts connecting at once. NULL never. */
rsv_pg_t *rsv_pg_new(struct event_base *base, const char *conninfo, int size, int timeout_ms,
                     int max_queue);
/** Fails every pending and queued callback with cm_err_shutdown, then frees. NULL ok. */
void rsv_pg_free(rsv_pg_t *pg);
/** Number of connections up and usable. */
int rsv_pg_connected(const rsv_pg_t *pg);

/**
 * Runs one statement (it may hold several ;-separated commands only when nparams is 0)
 * with text parameters (NULL element = SQL NULL; params are copied). Returns 0 — cb will
 * be called exactly once, always later from the loop, never from inside this call — or
 * -1 when the pool is shutting down (cb not called).
 */
__attribute__((warn_unused_result)) int rsv_pg_query(rsv_pg_t *pg, const char *sql, int nparams,
                                                     const char *const *params, rsv_pg_cb cb,
                                                     void *arg);
/**
 * rsv_pg_query ahead of every statement still waiting for a connection: for the few
 * small statements a request is blocked on (an event's first load), so a flood of
 * queued reads cannot stand between them and a free connection.
 */
__attribute__((warn_unused_result)) int rsv_pg_query_first(rsv_pg_t *pg, const char *sql,
                                                           int nparams, const char *const *params,
                                                           rsv_pg_cb cb, void *arg);

int rsv_pg_result_rows(const rsv_pg_result_t *res);
int rsv_pg_result_cols(const rsv_pg_result_t *res);
/** Text value ("" for NULL), valid during the callback. */
const char *rsv_pg_result_value(const rsv_pg_result_t *res, int row, int col);
int rsv_pg_result_isnull(const rsv_pg_result_t *res, int row, int col);
/** Five-character SQLSTATE of an error result ("23505" unique violation), or "". */
const char *rsv_pg_result_sqlstate(const rsv_pg_result_t *res);
/** Primary error message of an error result, or "". */
const char *rsv_pg_result_message(const rsv_pg_result_t *res);

/**
 * Applies migrations synchronously (start-up only): each (name, sql) pair in order,
 * once, recorded in table schema_migrations, under an advisory lock so concurrent
 * starters do not race. Returns 0, or -1 with a message in err.
 */
__attribute__((warn_unused_result)) int rsv_pg_migrate(const char *conninfo,
                                                       const char *const *names,
                                                       const char *const *sqls, size_t n, char *err,
                                                       size_t errlen);

#endif

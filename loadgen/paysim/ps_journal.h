/*
 * ps_journal — the simulator's append-only ledger file (ps_core.h, "Persistence"): one
 * JSON line per committed record, written by a thread of its own; the loop learns that
 * lines are durable through a pipe and runs each line's callback (the redis bio.c shape).
 * The file is replayed at start, before the loop runs.
 *
 * Threads: ps_journal_new, _append and _free on the loop's thread; the writer thread owns
 * the file descriptor after start-up.
 */
#ifndef PS_JOURNAL_H
#define PS_JOURNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct event_base;
typedef struct ps_journal ps_journal_t;

typedef void (*ps_journal_cb)(void *arg);
/** One line of the file at start (a JSON value, or NULL for a line that is not JSON):
 * 0 when it was a record, -1 when it was skipped (a torn last line, garbage). */
typedef int (*ps_journal_replay_cb)(json_t *line, void *arg);

/**
 * Replays path through replay (start-up: blocking reads), then opens it for appending
 * and starts the writer. path NULL: memory only (callbacks still run on the loop). NULL
 * with a message in err.
 */
ps_journal_t *ps_journal_new(struct event_base *base, const char *path, bool fsync,
                             ps_journal_replay_cb replay, void *arg, char *err, size_t errlen);
/** Queues line (ownership taken); done(arg) runs on the loop once it is durable. */
void ps_journal_append(ps_journal_t *j, char *line, ps_journal_cb done, void *arg);
/** Flushes and stops the writer, runs the callbacks of what it wrote, frees. NULL fine. */
void ps_journal_free(ps_journal_t *j);

#endif

/*
 * loop — running a test's event loop until something happened or a deadline passed,
 * the wait every asynchronous unit test needs. The loop's thread.
 */
#ifndef TEST_SUPPORT_LOOP_H
#define TEST_SUPPORT_LOOP_H

#include <event2/event.h>

/** Runs base with a 2 ms tick until pred(arg) holds or max_ms pass; returns pred(arg). */
int tloop_until(struct event_base *base, int (*pred)(void *), void *arg, int max_ms);

/** Runs base for ms milliseconds (lets I/O happen); not a wait for a result. */
void tloop_for(struct event_base *base, int ms);

#endif

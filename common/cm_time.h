/*
 * cm_time — clocks. CLOCK_MONOTONIC for durations and deadlines, wall clock for
 * timestamps shown to people. Where several processes must agree on "now"
 * (hold expiry), Redis TIME inside a Lua script is used instead of either.
 */
#ifndef CM_TIME_H
#define CM_TIME_H

#include <stdint.h>

/** Monotonic nanoseconds, for durations. */
uint64_t cm_time_mono_ns(void);
/** Wall-clock milliseconds since the Unix epoch. */
int64_t cm_time_wall_ms(void);

#endif

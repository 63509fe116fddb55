/*
 * sim_crowd — the night itself: sets up the event on the reserve and the gateway, lets
 * every fan arrive and behave as the queue page does, runs the operator's actions at
 * their times, prints the live progress line, and at the end fetches the payment
 * simulator's ledger. Runs the event loop it is given until all of that is done.
 */
#ifndef SIM_CROWD_H
#define SIM_CROWD_H

#include "sim_run.h"

/** Runs the whole night on a fresh event loop; fills r. 0 when the night ran (the audit
 * judges it), -1 with err when it could not start (bad URLs, event set-up refused). */
int sim_crowd_run(sim_run_t *r, char *err, size_t errlen);

#endif

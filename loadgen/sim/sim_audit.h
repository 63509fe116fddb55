/*
 * sim_audit — proves (or disproves) the night after the crowd has gone: reads Postgres,
 * Redis, the payment simulator's ledger and the simulator's own record, adds a
 * violation per broken check and the figures (fairness, ETA, admission rate) to r.
 * Runs after the event loop, on the main thread; it may block (libpq, hiredis, sleeps
 * while waiting for the reconciler).
 */
#ifndef SIM_AUDIT_H
#define SIM_AUDIT_H

#include "sim_run.h"

/** Runs every check. Returns the number of violations (also in r->nviol). */
int sim_audit_run(sim_run_t *r);

/** Pure parts, unit-testable: Spearman's rank correlation of x against y (both
 * permutations of 0..n-1) with its two-sided p-value, and a k x k chi-square test of
 * independence of their deciles (p-value). */
void sim_audit_uniformity(const int *x_rank, const int *y_rank, int n, double *spearman,
                          double *p_spearman, double *chi2, int *df, double *p_chi2);

#endif

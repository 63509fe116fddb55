/*
 * ps_webhook — the simulator's webhooks: every status change of an intent and every refund
 * as a Stripe-shaped event ({"id":"evt_…","object":"event","type","created","data":
 * {"object":…}}) POSTed to webhook_url with `Stripe-Signature: t=…,v1=…` (cm_hmacsig, the
 * first secret of webhook_secret_file), retried with exponential back-off (250 ms doubling
 * to 30 s, jittered) on anything but a 2xx, up to PS_WEBHOOK_ATTEMPTS times, each attempt
 * signed afresh.
 *
 * Threads: ps_webhook_send is called on the loop thread and only queues (a mutex and a
 * condition variable); one sender thread of its own does every HTTP exchange (libcurl
 * easy, blocking there, never on the loop), so a slow or dead receiver never delays an
 * answer of the simulator. Undelivered events are dropped at shutdown (the reserve's
 * reconciler finds every outcome by lookup anyway).
 */
#ifndef PS_WEBHOOK_H
#define PS_WEBHOOK_H

#include <jansson.h>
#include <stddef.h>

#define PS_WEBHOOK_ATTEMPTS 12

typedef struct ps_webhook ps_webhook_t;

/**
 * Starts the sender for url (http or https; ca_file: the CA bundle for https, NULL: the
 * system store) signing with the first line of secret_file (read now). NULL with a
 * message in err.
 */
ps_webhook_t *ps_webhook_new(const char *url, const char *secret_file, const char *ca_file,
                             char *err, size_t errlen);
/** Queues the event type about object (borrowed). Loop thread; never blocks on I/O. */
void ps_webhook_send(ps_webhook_t *w, const char *type, const json_t *object);
/** Events delivered (a 2xx) so far. Any thread. */
unsigned long ps_webhook_delivered(ps_webhook_t *w);
/** Stops the sender (an exchange under way finishes first), frees. NULL is fine. */
void ps_webhook_free(ps_webhook_t *w);

#endif

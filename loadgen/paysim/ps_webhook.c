/*
 * ps_webhook — see ps_webhook.h.
 */
#include "ps_webhook.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_parse.h"
#include "cm_hmacsig.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_time.h"
#include "cm_tls.h"

#define SECRET_MAX    256
#define RETRY_BASE_MS 250
#define RETRY_MAX_MS  30000
#define CONNECT_MS    2000
#define EXCHANGE_MS   5000

typedef struct item item_t;
struct item {
    item_t *next;
    char id[40];
    char *body;
    int attempts;
    int64_t due_ms; /* monotonic */
};

struct ps_webhook {
    char *url, *ca_file;
    char secret[SECRET_MAX];
    size_t secret_len;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    item_t *head; /* in order of queueing; retries keep their place */
    bool stop;
    unsigned long delivered;
    uint32_t rnd;
};

static int64_t mono_ms(void)
{
    return (int64_t)(cm_time_mono_ns() / 1000000u);
}

static int read_secret(ps_webhook_t *w, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r"); /* blocking-ok: start-up, before the loop */
    if (f == NULL) {
        snprintf(err, errlen, "webhook_secret_file %s: %s", path, strerror(errno));
        return -1;
    }
    char line[SECRET_MAX + 2] = "";
    bool got = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    size_t n = got ? strcspn(line, "\r\n") : 0;
    line[n] = '\0';
    if (n < 8 || n >= SECRET_MAX || strpbrk(line, " \t") != NULL) {
        snprintf(err, errlen,
                 "webhook_secret_file %s: the first line must be a secret of 8-%d characters "
                 "without spaces",
                 path, SECRET_MAX - 1);
        memset(line, 0, sizeof(line));
        return -1;
    }
    memcpy(w->secret, line, n + 1);
    w->secret_len = n;
    memset(line, 0, sizeof(line));
    return 0;
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p, (void)arg;
    return size * n;
}

/* One attempt: the HTTP status (0: no answer). Sender thread. */
static long post_once(ps_webhook_t *w, const item_t *it)
{
    cm_hmacsig_secret_t sec = {w->secret, w->secret_len};
    char sig[CM_HMACSIG_SIGN_MAX];
    if (cm_hmacsig_sign(&sec, cm_time_wall_ms() / 1000, it->body, strlen(it->body), sig,
                        sizeof(sig)) != 0)
        return 0;
    char hdr[CM_HMACSIG_SIGN_MAX + 32];
    snprintf(hdr, sizeof(hdr), "Stripe-Signature: %s", sig);
    CURL *c = curl_easy_init();
    if (c == NULL)
        return 0;
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, hdr);
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(c, CURLOPT_URL, w->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, it->body);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_MS);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)EXCHANGE_MS);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (w->ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, w->ca_file);
    long status = 0;
    CURLcode rc = curl_easy_perform(c); /* blocking-ok: the sender thread, never the loop */
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else
        cm_log(CM_LOG_DEBUG, "webhook %s: %s", it->id, curl_easy_strerror(rc));
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return status;
}

static int64_t backoff_ms(ps_webhook_t *w, int attempts)
{
    int64_t d = RETRY_BASE_MS;
    for (int i = 1; i < attempts && d < RETRY_MAX_MS; i++)
        d *= 2;
    if (d > RETRY_MAX_MS)
        d = RETRY_MAX_MS;
    w->rnd ^= w->rnd << 13;
    w->rnd ^= w->rnd >> 17;
    w->rnd ^= w->rnd << 5;
    return d / 2 + (int64_t)(w->rnd % (uint32_t)(d / 2 + 1));
}

/* The first due item, unlinked, or NULL; *wait_ms: until the next one is due. Locked. */
static item_t *take_due(ps_webhook_t *w, int64_t *wait_ms)
{
    int64_t now = mono_ms();
    *wait_ms = -1;
    for (item_t **pp = &w->head; *pp; pp = &(*pp)->next) {
        item_t *it = *pp;
        if (it->due_ms <= now) {
            *pp = it->next;
            it->next = NULL;
            return it;
        }
        if (*wait_ms < 0 || it->due_ms - now < *wait_ms)
            *wait_ms = it->due_ms - now;
    }
    return NULL;
}

static void item_free(item_t *it)
{
    free(it->body);
    free(it);
}

static void *sender(void *arg)
{
    ps_webhook_t *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        int64_t wait_ms;
        item_t *it = take_due(w, &wait_ms);
        if (it == NULL) {
            if (wait_ms < 0) {
                pthread_cond_wait(&w->cv, &w->mu);
            } else {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += (time_t)(wait_ms / 1000);
                ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&w->cv, &w->mu, &ts);
            }
            continue;
        }
        pthread_mutex_unlock(&w->mu);
        long status = post_once(w, it);
        it->attempts++;
        pthread_mutex_lock(&w->mu);
        if (status >= 200 && status < 300) {
            w->delivered++;
            item_free(it);
        } else if (it->attempts >= PS_WEBHOOK_ATTEMPTS) {
            cm_log(CM_LOG_WARN, "webhook %s: given up after %d attempts (last status %ld)", it->id,
                   it->attempts, status);
            item_free(it);
        } else {
            int64_t ms = backoff_ms(w, it->attempts);
            cm_log(CM_LOG_INFO, "webhook %s: status %ld, retry %d in %lld ms", it->id, status,
                   it->attempts, (long long)ms);
            it->due_ms = mono_ms() + ms;
            it->next = w->head; /* the oldest first again: its retry keeps its place */
            w->head = it;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

ps_webhook_t *ps_webhook_new(const char *url, const char *secret_file, const char *ca_file,
                             char *err, size_t errlen)
{
    if (url == NULL || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
        snprintf(err, errlen, "webhook_url must be an http(s) URL");
        return NULL;
    }
    if (secret_file == NULL || secret_file[0] == '\0') {
        snprintf(err, errlen, "webhook_url needs webhook_secret_file");
        return NULL;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT); /* start-up, before the sender thread */
    ps_webhook_t *w = cm_xcalloc(1, sizeof(*w));
    if (read_secret(w, secret_file, err, errlen) != 0) {
        free(w);
        return NULL;
    }
    w->url = cm_xstrdup(url);
    w->ca_file = ca_file && ca_file[0] ? cm_xstrdup(ca_file) : NULL;
    cm_tls_random(&w->rnd, sizeof(w->rnd));
    w->rnd |= 1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, sender, w) != 0) {
        snprintf(err, errlen, "webhook sender thread: %s", strerror(errno));
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w->url);
        free(w->ca_file);
        free(w);
        return NULL;
    }
    return w;
}

void ps_webhook_send(ps_webhook_t *w, const char *type, const json_t *object)
{
    if (w == NULL)
        return;
    item_t *it = cm_xcalloc(1, sizeof(*it));
    unsigned char raw[12];
    char hex[25];
    cm_tls_random(raw, sizeof(raw));
    cm_hex_encode(raw, sizeof(raw), hex);
    snprintf(it->id, sizeof(it->id), "evt_%s", hex);
    json_t *ev = json_pack(
        "{s:s, s:s, s:s, s:I, s:b, s:i, s:n, s:s, s:{s:O}}", "id", it->id, "object", "event",
        "api_version", "2023-08-16", "created", (json_int_t)(cm_time_wall_ms() / 1000), "livemode",
        0, "pending_webhooks", 1, "request", "type", type, "data", "object", object);
    it->body = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    it->due_ms = 0;
    pthread_mutex_lock(&w->mu);
    item_t **pp = &w->head;
    while (*pp)
        pp = &(*pp)->next;
    *pp = it;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

unsigned long ps_webhook_delivered(ps_webhook_t *w)
{
    if (w == NULL)
        return 0;
    pthread_mutex_lock(&w->mu);
    unsigned long n = w->delivered;
    pthread_mutex_unlock(&w->mu);
    return n;
}

void ps_webhook_free(ps_webhook_t *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    while (w->head) {
        item_t *it = w->head;
        w->head = it->next;
        item_free(it);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    memset(w->secret, 0, sizeof(w->secret));
    free(w->url);
    free(w->ca_file);
    free(w);
}

/* lg_mx_buyers.c — the dup-user and retry cells (lg_mx_buyers.h). */
#include "lg_mx_buyers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lg_admin.h"
#include "lg_json.h"
#include "lg_thread.h"
#include "pk_proc.h"

#define CLICKS 5           /* dup-user: concurrent clicks per buyer */
#define DUP_WORK_MS 10     /* dup-user: widens the section */
#define RETRY_WORK_MS 200  /* retry: the first request's work, above... */
#define RETRY_GIVEUP_MS 50 /* ...the client's timeout */
#define MAX_BUYERS 64

/* The lock-mode parameters every buyer sends: nobody gives up on the lock,
 * no lease runs out (reentrant: its watchdog). */
static void lock_params(lg_mode m, char *buf, size_t len)
{
    snprintf(buf, len, "&wait_ms=30000%s",
             m == LG_MODE_SETNX || m == LG_MODE_TOKEN ? "&lease_ms=10000" : "");
}

/* What the cells read of GET /stock/{sku}. */
typedef struct audit_figs {
    int64_t sold, stock, oversold, undersold, dups;
} audit_figs;

/* GET /stock/{sku}: sold, stock, oversold, undersold and
 * duplicate_buyers. */
static int audit(const instance *in, const char *sku, audit_figs *a, char *err, size_t errlen)
{
    char url[256];
    long st = 0;
    char *body = NULL;
    snprintf(url, sizeof url, "%s/stock/%s", in->base, sku);
    if (lg_http_call("GET", url, NULL, NULL, 10000, &st, &body, err, errlen) < 0)
        return -1;
    cJSON *j = st == 200 ? lg_json_parse(body, strlen(body)) : NULL;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "duplicate_buyers");
    int rc = -1;
    if (cJSON_IsNumber(d)) {
        a->sold = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "sold"));
        a->stock = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "stock"));
        a->oversold = (int64_t)cJSON_GetNumberValue(
            cJSON_GetObjectItemCaseSensitive(j, "oversold"));
        a->undersold = (int64_t)cJSON_GetNumberValue(
            cJSON_GetObjectItemCaseSensitive(j, "undersold"));
        a->dups = (int64_t)cJSON_GetNumberValue(d);
        rc = 0;
    } else {
        snprintf(err, errlen, "audit of %s: %ld %.120s (no duplicate_buyers: an older server?)",
                 sku, st, body ? body : "");
    }
    cJSON_Delete(j);
    free(body);
    return rc;
}

/* ---- dup-user ---- */

/* Holds every click until all are started, then lets them go together (a
 * barrier could not be let go when a thread failed to start: the others
 * would wait for it forever). */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open; /* 0 closed, 1 go, -1 give up */
} gate;

typedef struct click {
    char url[512];
    gate *go;
    long status;
    char error[32];
} click;

static void gate_set(gate *g, int open)
{
    lg_pt_must(pthread_mutex_lock(&g->mu), "gate lock");
    g->open = open;
    lg_pt_must(pthread_cond_broadcast(&g->cv), "gate broadcast");
    lg_pt_must(pthread_mutex_unlock(&g->mu), "gate unlock");
}

static void *do_click(void *arg)
{
    click *k = arg;
    char *body = NULL, e[200], id[64];
    int ll = 0, del = 0;
    lg_pt_must(pthread_mutex_lock(&k->go->mu), "gate lock");
    while (k->go->open == 0)
        lg_pt_must(pthread_cond_wait(&k->go->cv, &k->go->mu), "gate wait");
    int open = k->go->open;
    lg_pt_must(pthread_mutex_unlock(&k->go->mu), "gate unlock");
    if (open < 0)
        return NULL;
    if (lg_http_call("POST", k->url, NULL, NULL, 60000, &k->status, &body, e, sizeof e) < 0)
        k->status = 0;
    k->error[0] = '\0';
    if (body != NULL)
        lg_parse_purchase(body, strlen(body), id, k->error, &ll, &del);
    free(body);
    return NULL;
}

int lg_mx_dup_user(mctx *x, lg_cell *c, lg_mode m, const instance *in, int buyers, char *err,
                   size_t errlen)
{
    char sku[64], lp[64];
    int n = buyers * CLICKS;
    snprintf(sku, sizeof sku, "mx-dup-user-%s", lg_mode_names[m]);
    if (buyers > MAX_BUYERS || lg_admin_reset_buckets(in->base, sku, 2 * buyers, x->cfg->buckets,
                                                      x->cfg->admin_token, err, errlen) < 0)
        return -1;
    lock_params(m, lp, sizeof lp);
    click *k = calloc((size_t)n, sizeof *k);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    if (k == NULL || th == NULL) {
        free(k);
        free(th);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    gate go = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    long long t0 = lc_now_ms();
    int started = 0, e = 0;
    for (; started < n; started++) {
        int i = started;
        snprintf(k[i].url, sizeof k[i].url, "%s/miaosha/%s?sku=%s&user=b%d&work_ms=%d%s", in->base,
                 lg_mode_names[m], sku, i % buyers, DUP_WORK_MS, lp);
        k[i].go = &go;
        if ((e = pthread_create(&th[i], NULL, do_click, &k[i])) != 0)
            break;
    }
    gate_set(&go, started == n ? 1 : -1);
    if (started < n) {
        for (int i = 0; i < started; i++)
            lg_pt_must(pthread_join(th[i], NULL), "join a click");
        free(k);
        free(th);
        snprintf(err, errlen, "pthread_create: %s", strerror(e));
        return -1;
    }
    uint64_t ok = 0, limited = 0, other = 0;
    for (int i = 0; i < n; i++) {
        lg_pt_must(pthread_join(th[i], NULL), "join a click");
        if (k[i].status == 200)
            ok++;
        else if (k[i].status == 409 && !strcmp(k[i].error, "limit_reached"))
            limited++;
        else
            other++;
    }
    free(k);
    free(th);
    c->ran = 1;
    c->recovery_ms = -1;
    c->elapsed_s = (double)(lc_now_ms() - t0) / 1000.0;
    c->requests = (uint64_t)n;
    c->ok = ok;
    c->errors = other;
    c->stock = 2 * buyers;
    audit_figs a;
    if (audit(in, sku, &a, err, errlen) < 0)
        return -1;
    c->sold = a.sold;
    c->stock_left = a.stock;
    c->oversold = a.oversold;
    c->undersold = a.undersold;
    if (a.dups > 0)
        snprintf(c->outcome, sizeof c->outcome, "duplicates");
    else if (c->sold == buyers && other == 0)
        snprintf(c->outcome, sizeof c->outcome, "one-each");
    else
        snprintf(c->outcome, sizeof c->outcome, "short");
    char split[32] = "";
    if (x->cfg->buckets > 1)
        snprintf(split, sizeof split, " (%d stock buckets)", x->cfg->buckets);
    snprintf(c->reason, sizeof c->reason,
             "%d buyers x %d clicks%s: %llu sold, %llu limit_reached, %llu other; %lld buyers "
             "with more than one order",
             buyers, CLICKS, split, (unsigned long long)ok, (unsigned long long)limited,
             (unsigned long long)other, (long long)a.dups);
    return 0;
}

/* ---- retry ---- */

typedef struct retry_buyer {
    const instance *in;
    char path[400];
    char key[80];       /* "" = no Idempotency-Key */
    int fd;             /* the given-up first request's connection, -1 when none */
    int first_answered; /* the first reply came before the client gave up */
    long final;         /* the status the buyer ended with */
    int replayed;       /* it was a replay */
} retry_buyer;

/* Sends the first request on a connection of its own and waits
 * RETRY_GIVEUP_MS for the reply; leaves the connection open. */
static void first_request(retry_buyer *b)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)b->in->port);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    b->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (b->fd < 0)
        return;
    char req[700];
    int n = snprintf(
        req, sizeof req, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n%s%s%s\r\n",
        b->path, b->key[0] ? "Idempotency-Key: " : "", b->key, b->key[0] ? "\r\n" : "");
    if (connect(b->fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        send(b->fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        close(b->fd);
        b->fd = -1;
        return;
    }
    struct pollfd p = {b->fd, POLLIN, 0};
    b->first_answered = poll(&p, 1, RETRY_GIVEUP_MS) > 0;
}

static void *do_retry(void *arg)
{
    retry_buyer *b = arg;
    char url[600], hdr[120], e[200];
    first_request(b);
    snprintf(url, sizeof url, "%s%s", b->in->base, b->path);
    snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", b->key);
    long long dl = lc_now_ms() + 30000;
    for (;;) {
        long st = 0;
        char *body = NULL;
        char id[64] = "", error[32] = "";
        int ll = 0, del = 0;
        if (lg_http_call_hdr("POST", url, NULL, b->key[0] ? hdr : NULL, NULL, 30000, &st, &body, e,
                             sizeof e) < 0)
            st = 0;
        if (body != NULL)
            lg_parse_purchase(body, strlen(body), id, error, &ll, &del);
        free(body);
        b->final = st;
        /* the first one still runs: ask again for its outcome */
        if (!(st == 409 && !strcmp(error, "in_progress")) || lc_now_ms() > dl)
            break;
        pk_sleep_ms(50);
    }
    return NULL;
}

/* One run: buyers buyers, keyed or not, on a SKU of its own; its audit in
 * *a. */
static int retry_run(mctx *x, lg_mode m, const instance *in, int buyers, int keyed, lg_cell *c,
                     audit_figs *a, char *err, size_t errlen)
{
    char sku[64], lp[64];
    snprintf(sku, sizeof sku, "mx-retry-%s%s", lg_mode_names[m], keyed ? "" : "-nokey");
    if (lg_admin_reset_buckets(in->base, sku, 3 * buyers, x->cfg->buckets, x->cfg->admin_token, err,
                               errlen) < 0)
        return -1;
    lock_params(m, lp, sizeof lp);
    retry_buyer b[MAX_BUYERS];
    pthread_t th[MAX_BUYERS];
    long long run = lc_now_ms();
    for (int i = 0; i < buyers; i++) {
        memset(&b[i], 0, sizeof b[i]);
        b[i].in = in;
        b[i].fd = -1;
        snprintf(b[i].path, sizeof b[i].path, "/miaosha/%s?sku=%s&user=r%d&work_ms=%d%s",
                 lg_mode_names[m], sku, i, RETRY_WORK_MS, lp);
        if (keyed)
            snprintf(b[i].key, sizeof b[i].key, "mx-%s-%lld-%d", lg_mode_names[m], run, i);
        int e = pthread_create(&th[i], NULL, do_retry, &b[i]);
        if (e != 0) {
            for (int j = 0; j < i; j++)
                lg_pt_must(pthread_join(th[j], NULL), "join a buyer");
            for (int j = 0; j < i; j++)
                if (b[j].fd >= 0)
                    close(b[j].fd);
            snprintf(err, errlen, "pthread_create: %s", strerror(e));
            return -1;
        }
    }
    uint64_t answered = 0, other = 0;
    for (int i = 0; i < buyers; i++) {
        lg_pt_must(pthread_join(th[i], NULL), "join a buyer");
        answered += (uint64_t)b[i].first_answered;
        if (b[i].final != 200 && b[i].final != 409)
            other++;
    }
    /* The given-up connections: their replies are read (so no purchase is
     * cut short as client_gone), then they are closed — within 30 s for
     * all of them, not each, and not past a Ctrl-C. */
    long long drain_end = lc_now_ms() + 30000;
    for (int i = 0; i < buyers; i++) {
        if (b[i].fd < 0)
            continue;
        char buf[4096];
        for (;;) {
            long long left = drain_end - lc_now_ms();
            if (left <= 0 || lg_mx_stopped(x))
                break;
            struct pollfd p = {b[i].fd, POLLIN, 0};
            int pr = poll(&p, 1, left < 200 ? (int)left : 200);
            if (pr > 0)
                (void)!read(b[i].fd, buf, sizeof buf);
            if (pr != 0)
                break;
        }
        close(b[i].fd);
    }
    c->errors += other;
    c->requests += (uint64_t)buyers * 2;
    if (answered > 0) {
        snprintf(err, errlen, "%llu first requests answered within %d ms: no timeout to retry",
                 (unsigned long long)answered, RETRY_GIVEUP_MS);
        return -1;
    }
    return audit(in, sku, a, err, errlen);
}

int lg_mx_retry(mctx *x, lg_cell *c, lg_mode m, const instance *in, int buyers, char *err,
                size_t errlen)
{
    if (buyers > MAX_BUYERS) {
        snprintf(err, errlen, "at most %d buyers", MAX_BUYERS);
        return -1;
    }
    long long t0 = lc_now_ms();
    c->ran = 1;
    c->recovery_ms = -1;
    c->stock = 3 * buyers;
    audit_figs k, n;
    if (retry_run(x, m, in, buyers, 1, c, &k, err, errlen) < 0 ||
        retry_run(x, m, in, buyers, 0, c, &n, err, errlen) < 0)
        return -1;
    /* The cell's audit is the keyed run's, the SKU its timeline draws;
     * the run without a key is its doubles column and its reason. */
    c->sold = k.sold;
    c->stock_left = k.stock;
    c->oversold = k.oversold;
    c->undersold = k.undersold;
    c->doubles = (uint64_t)n.dups;
    c->elapsed_s = (double)(lc_now_ms() - t0) / 1000.0;
    if (k.dups > 0)
        snprintf(c->outcome, sizeof c->outcome, "twice");
    else if (k.sold == buyers)
        snprintf(c->outcome, sizeof c->outcome, "once");
    else
        snprintf(c->outcome, sizeof c->outcome, "short");
    char split[32] = "";
    if (x->cfg->buckets > 1)
        snprintf(split, sizeof split, " (%d stock buckets)", x->cfg->buckets);
    snprintf(c->reason, sizeof c->reason,
             "%d buyers%s, first request given up after %d ms (work %d ms) and retried: with an "
             "Idempotency-Key %lld orders, %lld buyers with two; without %lld orders, %lld "
             "buyers with two",
             buyers, split, RETRY_GIVEUP_MS, RETRY_WORK_MS, (long long)k.sold, (long long)k.dups,
             (long long)n.sold, (long long)n.dups);
    if (n.oversold > 0)
        lg_addf(c->reason, sizeof c->reason, ", oversold %lld", (long long)n.oversold);
    return 0;
}

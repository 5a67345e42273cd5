/* lg_run.c — see lg_run.h. */
#include "lg_run.h"

#include <lockcore.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lg_json.h"

#define REQ_PART 1024

/* One request's outcome, written by the engine's threads (distinct idx). */
typedef struct slot {
    uint16_t status;
    uint8_t err;
    uint8_t lock_lost;
    uint8_t deleted_other_lock;
    uint8_t fenced_out; /* a 409 whose error was fenced_out */
    uint8_t local;      /* a 409 sold_out answered from the local sold-out flag */
    uint8_t err_idx;    /* 1 + index into run_ctx.errs; 0: none, or the table was full */
    char order_id[60];  /* a 200's order id, or the id a non-200 named */
} slot;

/* The (status, error) pairs seen. Every answer that names an error looks
 * its pair up, so lookups take no lock: an entry is written once, under
 * errs_mu, before nerrs publishes it (release), and a reader only reads
 * the first nerrs entries (acquire). Only a new pair takes the mutex. */
typedef struct err_key {
    int status;
    char error[32];
} err_key;

typedef struct run_ctx {
    const lg_run_cfg *cfg;
    char prefix[LG_MAX_TARGETS][REQ_PART];
    size_t prefix_len[LG_MAX_TARGETS];
    char suffix[LG_MAX_TARGETS][REQ_PART];
    size_t suffix_len[LG_MAX_TARGETS];
    slot *slots;
    pthread_mutex_t errs_mu;
    err_key errs[LG_RUN_MAX_ERRS];
    _Atomic int nerrs;
} run_ctx;

/* The index + 1 of (status, code) among the first n entries; 0: absent. */
static uint8_t find_err(const run_ctx *x, int n, int status, const char *code)
{
    for (int i = 0; i < n; i++)
        if (x->errs[i].status == status && strcmp(x->errs[i].error, code) == 0)
            return (uint8_t)(i + 1);
    return 0;
}

/* The slot index + 1 of (status, code), interning it; 0 when the table is full. */
static uint8_t intern_err(run_ctx *x, int status, const char *code)
{
    uint8_t idx = find_err(x, atomic_load_explicit(&x->nerrs, memory_order_acquire), status, code);
    if (idx)
        return idx;
    pthread_mutex_lock(&x->errs_mu);
    /* Again under the mutex: another thread may have just added it. */
    int n = atomic_load_explicit(&x->nerrs, memory_order_relaxed);
    idx = find_err(x, n, status, code);
    if (!idx && n < LG_RUN_MAX_ERRS) {
        err_key *k = &x->errs[n];
        k->status = status;
        snprintf(k->error, sizeof k->error, "%s", code);
        atomic_store_explicit(&x->nerrs, n + 1, memory_order_release);
        idx = (uint8_t)(n + 1);
    }
    pthread_mutex_unlock(&x->errs_mu);
    return idx;
}

void lg_run_cfg_init(lg_run_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->mode = "token";
    c->sku = "demo";
    c->requests = 1000;
    c->concurrency = 100;
    c->stock = 100;
    c->work_ms = c->lease_ms = c->wait_ms = c->reenter = -1;
    c->method = "POST";
    c->deadline_ms = 120000;
}

static const char *build_req(void *ud, uint64_t idx, int target, char *buf, size_t cap, size_t *len)
{
    run_ctx *x = ud;
    size_t pl = x->prefix_len[target], sl = x->suffix_len[target];
    if (pl + sl + 21 > cap)
        return NULL;
    memcpy(buf, x->prefix[target], pl);
    uint64_t u = x->cfg->users ? idx % x->cfg->users : idx;
    char digits[21];
    int nd = 0;
    do {
        digits[nd++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    char *p = buf + pl;
    while (nd)
        *p++ = digits[--nd];
    memcpy(p, x->suffix[target], sl);
    *len = (size_t)(p - buf) + sl;
    return buf;
}

static void on_done(void *ud, uint64_t idx, int status, lg_err err, const char *body, size_t blen,
                    uint64_t lat)
{
    run_ctx *x = ud;
    (void)lat;
    slot *s = &x->slots[idx];
    s->status = (uint16_t)status;
    s->err = (uint8_t)err;
    if (err != LG_ERR_NONE || !body || blen == 0)
        return;
    char oid[64], code[32];
    int lost = 0, deleted = 0;
    if (lg_parse_purchase(body, blen, oid, code, &lost, &deleted) == 0) {
        s->lock_lost = (uint8_t)lost;
        s->deleted_other_lock = (uint8_t)deleted;
        /* A non-200 that names an order ("commit outcome unknown") is kept
         * too: the audit afterwards says whether that order sold. */
        size_t l = strnlen(oid, sizeof s->order_id - 1);
        memcpy(s->order_id, oid, l);
        s->order_id[l] = 0;
        if (status != 200 && code[0])
            s->err_idx = intern_err(x, status, code);
        s->fenced_out = status == 409 && !strcmp(code, "fenced_out");
        s->local = status == 409 && !strcmp(code, "sold_out") && lg_purchase_local(body, blen);
    }
}

static int valid_sku(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int lg_run(const lg_run_cfg *cfg, lg_run_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    res->requests = cfg->requests;
    if (cfg->ntargets < 1 || cfg->ntargets > LG_MAX_TARGETS) {
        snprintf(err, errlen, "run: need 1..%d targets", LG_MAX_TARGETS);
        return -1;
    }
    if (cfg->requests < 1 || cfg->requests > 10000000ULL) {
        snprintf(err, errlen, "run: --requests must be 1..10000000");
        return -1;
    }
    if (!valid_sku(cfg->sku)) {
        snprintf(err, errlen, "run: --sku must match [A-Za-z0-9_-]{1,64}");
        return -1;
    }
    run_ctx *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    x->cfg = cfg;
    pthread_mutex_init(&x->errs_mu, NULL);
    for (int t = 0; t < cfg->ntargets; t++) {
        const lg_url *u = &cfg->targets[t];
        char q[512];
        int n = snprintf(q, sizeof q, "sku=%s", cfg->sku);
        if (cfg->work_ms >= 0)
            n += snprintf(q + n, sizeof q - (size_t)n, "&work_ms=%lld", (long long)cfg->work_ms);
        if (cfg->lease_ms >= 0)
            n += snprintf(q + n, sizeof q - (size_t)n, "&lease_ms=%lld", (long long)cfg->lease_ms);
        if (cfg->wait_ms >= 0)
            n += snprintf(q + n, sizeof q - (size_t)n, "&wait_ms=%lld", (long long)cfg->wait_ms);
        if (cfg->reenter >= 0)
            n += snprintf(q + n, sizeof q - (size_t)n, "&reenter=%lld", (long long)cfg->reenter);
        if (cfg->fault)
            n += snprintf(q + n, sizeof q - (size_t)n, "&fault=%s", cfg->fault);
        int pl = snprintf(x->prefix[t], REQ_PART, "%s %s/miaosha/%s?%s&user=u", cfg->method,
                          u->prefix, cfg->mode, q);
        /* fault= needs the admin token when the server has one. */
        int auth = cfg->fault && cfg->admin_token && cfg->admin_token[0];
        int sl = snprintf(
            x->suffix[t], REQ_PART, " HTTP/1.1\r\nHost: %s:%d\r\n%s%s%s%s\r\n", u->host, u->port,
            strcmp(cfg->method, "GET") == 0 ? "" : "Content-Length: 0\r\n",
            auth ? "Authorization: Bearer " : "", auth ? cfg->admin_token : "", auth ? "\r\n" : "");
        if (pl < 0 || pl >= REQ_PART || sl < 0 || sl >= REQ_PART) {
            snprintf(err, errlen, "run: request line too long");
            free(x);
            return -1;
        }
        x->prefix_len[t] = (size_t)pl;
        x->suffix_len[t] = (size_t)sl;
    }
    x->slots = calloc((size_t)cfg->requests, sizeof *x->slots);
    if (!x->slots) {
        snprintf(err, errlen, "out of memory for %llu requests", (unsigned long long)cfg->requests);
        free(x);
        return -1;
    }
    const char *admin = cfg->targets[0].base;
    if (cfg->stock >= 0 && lg_admin_reset_buckets(admin, cfg->sku, cfg->stock, cfg->buckets,
                                                  cfg->admin_token, err, errlen) < 0) {
        free(x->slots);
        free(x);
        return -1;
    }
    /* The stock the burst starts from, which no more than that many 200s
     * may claim (acked_over_stock). */
    res->stock_at_start = cfg->stock >= 0 ? cfg->stock : -1;
    if (cfg->stock < 0 && !cfg->skip_audit) {
        lg_audit a0;
        char aerr[256];
        res->stock_at_start = lg_admin_audit(admin, cfg->sku, &a0, aerr, sizeof aerr) == 0
                                  ? a0.stock
                                  : -1;
    }
    /* where each instance's trace stands now: the burst's records come after */
    for (int i = 0; cfg->trace_marks && i < cfg->ntargets; i++)
        lg_trace_mark_get(cfg->targets[i].base, cfg->sku, &res->marks[i]);
    lg_engine_cfg ec = {
        .targets = cfg->targets,
        .ntargets = cfg->ntargets,
        .concurrency = cfg->concurrency,
        .threads = cfg->threads,
        .requests = cfg->requests,
        .duration_ms = cfg->deadline_ms > 0 ? cfg->deadline_ms : 120000,
        .build = build_req,
        .build_ud = x,
        .done = on_done,
        .done_ud = x,
        .progress = cfg->progress,
        .progress_ud = cfg->progress_ud,
        .stop = cfg->stop,
    };
    if (lg_engine_run(&ec, &res->eng, err, errlen) < 0) {
        free(x->slots);
        free(x);
        return -1;
    }
    const lg_engine_result *e = &res->eng;
    for (uint64_t i = 0; i < cfg->requests && i < e->claimed; i++) {
        res->fenced_out += x->slots[i].err == LG_ERR_NONE && x->slots[i].fenced_out;
        res->sold_out_local += x->slots[i].err == LG_ERR_NONE && x->slots[i].local;
    }
    res->ok = e->status[200];
    res->sold_out = e->status[409] - res->fenced_out;
    res->lock_busy = e->status[429];
    for (int k = 1; k < LG_ERR_COUNT; k++)
        res->transport_errors += e->errors[k];
    res->not_sent = cfg->requests > e->claimed ? cfg->requests - e->claimed : 0;

    res->nerrs = atomic_load(&x->nerrs); /* the workers are done */
    for (int k = 0; k < res->nerrs; k++) {
        res->errs[k].status = x->errs[k].status;
        memcpy(res->errs[k].error, x->errs[k].error, sizeof res->errs[k].error);
    }
    lg_idset acked = {0}, listed = {0}, unknown = {0};
    int oom = 0; /* an id not recorded would be judged lost (or not) wrongly */
    for (uint64_t i = 0; !oom && i < cfg->requests && i < e->claimed; i++) {
        slot *s = &x->slots[i];
        res->lock_lost += s->lock_lost;
        res->deleted_other_lock += s->deleted_other_lock;
        if (s->err != LG_ERR_NONE)
            continue;
        if (s->status != 200) {
            if (s->err_idx)
                res->errs[s->err_idx - 1].n++;
            else if (s->status >= 400)
                res->errs_other++;
            if (s->order_id[0]) {
                res->unknown_outcome++;
                oom = lg_idset_add(&unknown, s->order_id, strlen(s->order_id)) < 0;
            }
        } else if (!s->order_id[0]) {
            res->ok_without_id++;
        } else {
            oom = lg_idset_add(&acked, s->order_id, strlen(s->order_id)) < 0;
        }
    }
    if (oom) {
        snprintf(err, errlen, "out of memory recording the order ids");
        lg_idset_free(&acked);
        lg_idset_free(&unknown);
        free(x->slots);
        pthread_mutex_destroy(&x->errs_mu);
        free(x);
        memset(res, 0, sizeof *res);
        return -1;
    }
    /* The 503s that said redis_unavailable; other 503s (overloaded,
     * redis_error, not_replicated) count as other HTTP answers. */
    for (int k = 0; k < res->nerrs; k++)
        if (res->errs[k].status == 503 && strcmp(res->errs[k].error, "redis_unavailable") == 0)
            res->redis_unavailable += res->errs[k].n;
    res->other_http = e->completed - res->ok - res->sold_out - res->fenced_out - res->lock_busy -
                      res->redis_unavailable;
    lg_idset_sort(&acked);
    lg_idset_sort(&unknown);
    res->dup_ok_ids = lg_idset_duplicates(&acked);
    uint64_t distinct_acked = acked.n - res->dup_ok_ids;
    if (res->stock_at_start >= 0 && distinct_acked > (uint64_t)res->stock_at_start)
        res->acked_over_stock = distinct_acked - (uint64_t)res->stock_at_start;
    if (!cfg->skip_audit) {
        char aerr[256];
        /* After a failover the service answers 503 until it follows the new
         * master: the audit waits for that, up to audit_wait_ms, rather
         * than read nothing. */
        int64_t give_up = lc_now_ms() + (cfg->audit_wait_ms > 0 ? cfg->audit_wait_ms : 0);
        int got;
        while ((got = lg_admin_audit(admin, cfg->sku, &res->audit, aerr, sizeof aerr) == 0 &&
                      lg_admin_orders(admin, cfg->sku, LG_ORDERS_LIST_MS, &listed, aerr,
                                      sizeof aerr) == 0) == 0 &&
               lc_now_ms() < give_up && !(cfg->stop && *cfg->stop)) {
            lg_idset_free(&listed);
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (got) {
            res->audited = 1;
            lg_idset_sort(&listed);
            res->orders_listed = listed.n;
            res->dup_orders = lg_idset_duplicates(&listed);
            for (size_t i = 0; i < acked.n; i++)
                if (!lg_idset_contains(&listed, acked.ids[i]))
                    res->acked_lost++;
            for (size_t i = 0; i < listed.n; i++)
                if (!lg_idset_contains(&acked, listed.ids[i]))
                    res->unacknowledged++;
            for (size_t i = 0; i < unknown.n; i++)
                if (lg_idset_contains(&listed, unknown.ids[i]))
                    res->unknown_committed++;
        } else {
            snprintf(res->audit_error, sizeof res->audit_error, "%s", aerr);
        }
    }
    int rc = 0;
    FILE *f = cfg->acked_out ? fopen(cfg->acked_out, "w") : NULL;
    for (size_t i = 0; f && i < acked.n; i++)
        fprintf(f, "%s\n", acked.ids[i]);
    if (cfg->acked_out && (!f || fclose(f) != 0)) {
        snprintf(err, errlen, "%s: cannot write the acknowledged order ids", cfg->acked_out);
        rc = -1;
    }
    res->oversold_seen = res->audited && res->audit.oversold > 0;
    res->safe = res->audited && res->audit.oversold == 0 && res->audit.undersold == 0 &&
                res->dup_orders == 0 && res->dup_ok_ids == 0 && res->acked_lost == 0 &&
                res->acked_over_stock == 0 && res->ok_without_id == 0;
    lg_idset_free(&acked);
    lg_idset_free(&listed);
    lg_idset_free(&unknown);
    free(x->slots);
    pthread_mutex_destroy(&x->errs_mu);
    free(x);
    return rc;
}

int lg_run_check(const lg_run_result *r, lg_expect e)
{
    switch (e) {
    case LG_EXPECT_SAFE: return r->safe ? 0 : 1;
    case LG_EXPECT_OVERSELL: return r->oversold_seen ? 0 : 1;
    default: return 0;
    }
}

static const char *expect_name(lg_expect e)
{
    return e == LG_EXPECT_SAFE ? "safe" : e == LG_EXPECT_OVERSELL ? "oversell" : "";
}

static double ms(uint64_t us)
{
    return (double)us / 1000.0;
}

uint64_t lg_run_errors(const lg_run_result *r)
{
    return r->redis_unavailable + r->other_http + r->transport_errors;
}

static const char *verdict(const lg_run_result *r)
{
    if (!r->audited)
        return "UNKNOWN (no audit)";
    if (r->oversold_seen)
        return "OVERSOLD";
    return r->safe ? "SAFE" : "UNSAFE";
}

void lg_report_table(FILE *o, const lg_run_cfg *c, const lg_run_result *r, lg_expect e)
{
    const lg_engine_result *g = &r->eng;
    double rps = g->elapsed_s > 0 ? (double)(g->completed) / g->elapsed_s : 0;
    fprintf(o, "miaosha-load run: mode=%s sku=%s targets=%d concurrency=%d stock=%lld\n", c->mode,
            c->sku, c->ntargets, c->concurrency, (long long)c->stock);
    fprintf(o, "  %-18s %llu (sent %llu, answered %llu, not sent %llu)\n", "requests",
            (unsigned long long)r->requests, (unsigned long long)g->claimed,
            (unsigned long long)g->completed, (unsigned long long)r->not_sent);
    fprintf(o, "  %-18s %llu\n", "200 ok", (unsigned long long)r->ok);
    fprintf(o, "  %-18s %llu\n", "409 sold_out", (unsigned long long)r->sold_out);
    fprintf(o, "  %-18s %llu\n", "409 fenced_out", (unsigned long long)r->fenced_out);
    fprintf(o, "  %-18s %llu\n", "429 lock_busy", (unsigned long long)r->lock_busy);
    fprintf(o, "  %-18s %llu\n", "503 redis_unavail.", (unsigned long long)r->redis_unavailable);
    fprintf(o, "  %-18s %llu", "other HTTP", (unsigned long long)r->other_http);
    if (r->other_http) {
        fputs(" (", o);
        const char *sep = "";
        for (int s = 100; s < 600; s++) {
            if (s == 200 || s == 409 || s == 429 || s == 503 || !g->status[s])
                continue;
            fprintf(o, "%s%d: %llu", sep, s, (unsigned long long)g->status[s]);
            sep = ", ";
        }
        fputc(')', o);
    }
    fputc('\n', o);
    fprintf(o, "  %-18s %llu", "transport errors", (unsigned long long)r->transport_errors);
    if (r->transport_errors) {
        fputs(" (", o);
        const char *sep = "";
        for (int k = 1; k < LG_ERR_COUNT; k++) {
            if (!g->errors[k])
                continue;
            fprintf(o, "%s%s: %llu", sep, lg_err_name((lg_err)k), (unsigned long long)g->errors[k]);
            sep = ", ";
        }
        fputc(')', o);
    }
    fputc('\n', o);
    fprintf(o, "  %-18s %llu (503 + other HTTP + transport)\n", "errors",
            (unsigned long long)lg_run_errors(r));
    if (r->nerrs || r->errs_other) {
        fprintf(o, "  %-18s", "by error");
        for (int k = 0; k < r->nerrs; k++)
            fprintf(o, "%s%d %s: %llu", k ? ", " : " ", r->errs[k].status, r->errs[k].error,
                    (unsigned long long)r->errs[k].n);
        if (r->errs_other)
            fprintf(o, "%s(unnamed): %llu", r->nerrs ? ", " : " ",
                    (unsigned long long)r->errs_other);
        fputc('\n', o);
    }
    if (r->unknown_outcome) {
        fprintf(o, "  %-18s %llu answers named an order without selling it", "outcome unknown",
                (unsigned long long)r->unknown_outcome);
        if (r->audited)
            fprintf(o, "; %llu of those orders are in the list (sold)",
                    (unsigned long long)r->unknown_committed);
        fputc('\n', o);
    }
    fprintf(o, "  %-18s %.1f req/s (%.3f s)%s\n", "throughput", rps, g->elapsed_s,
            g->deadline_hit ? "  DEADLINE HIT"
            : g->stopped    ? "  STOPPED"
                            : "");
    fprintf(o, "  %-18s p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", "latency ms",
            ms(lg_hist_percentile(&g->hist, 50)), ms(lg_hist_percentile(&g->hist, 90)),
            ms(lg_hist_percentile(&g->hist, 99)), ms(g->hist.max));
    if (r->audited) {
        fprintf(o, "  %-18s %lld\n", "initial stock", (long long)r->audit.initial);
        fprintf(o, "  %-18s %lld\n", "sold", (long long)r->audit.sold);
        fprintf(o, "  %-18s %lld\n", "stock left", (long long)r->audit.stock);
        fprintf(o, "  %-18s %lld\n", "oversold", (long long)r->audit.oversold);
        fprintf(o, "  %-18s %lld\n", "undersold", (long long)r->audit.undersold);
        fprintf(o, "  %-18s %llu listed (audit says %lld)\n", "orders",
                (unsigned long long)r->orders_listed, (long long)r->audit.orders);
        fprintf(o, "  %-18s %llu in the list, %llu among 200s\n", "duplicate ids",
                (unsigned long long)r->dup_orders, (unsigned long long)r->dup_ok_ids);
        fprintf(o,
                "  %-18s %llu of %llu acknowledged not in the order list (unacknowledged in "
                "list: %llu)\n",
                "acked_lost", (unsigned long long)r->acked_lost, (unsigned long long)r->ok,
                (unsigned long long)r->unacknowledged);
    } else if (!c->skip_audit) {
        fprintf(o, "  %-18s FAILED: %s\n", "audit", r->audit_error);
    }
    if (r->stock_at_start >= 0)
        fprintf(o, "  %-18s %llu 200s beyond the %lld units the burst started with\n",
                "acked_over_stock", (unsigned long long)r->acked_over_stock,
                (long long)r->stock_at_start);
    fprintf(o, "  %-18s %llu\n", "lock_lost", (unsigned long long)r->lock_lost);
    fprintf(o, "  %-18s %llu\n", "deleted_other_lock", (unsigned long long)r->deleted_other_lock);
    if (r->ok_without_id)
        fprintf(o, "  %-18s %llu\n", "200 w/o order_id", (unsigned long long)r->ok_without_id);
    fprintf(o, "  %-18s %s", "verdict", verdict(r));
    if (e != LG_EXPECT_NONE)
        fprintf(o, "  (expect %s: %s)", expect_name(e), lg_run_check(r, e) ? "FAIL" : "pass");
    fputc('\n', o);
}

static cJSON *run_json(const lg_run_cfg *c, const lg_run_result *r, lg_expect e)
{
    const lg_engine_result *g = &r->eng;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "mode", c->mode);
    cJSON_AddStringToObject(j, "sku", c->sku);
    cJSON_AddNumberToObject(j, "targets", c->ntargets);
    cJSON_AddNumberToObject(j, "concurrency", c->concurrency);
    cJSON_AddNumberToObject(j, "requests", (double)r->requests);
    cJSON_AddNumberToObject(j, "sent", (double)g->claimed);
    cJSON_AddNumberToObject(j, "answered", (double)g->completed);
    cJSON_AddNumberToObject(j, "not_sent", (double)r->not_sent);
    cJSON_AddNumberToObject(j, "ok", (double)r->ok);
    cJSON_AddNumberToObject(j, "sold_out", (double)r->sold_out);
    cJSON_AddNumberToObject(j, "fenced_out", (double)r->fenced_out);
    cJSON_AddNumberToObject(j, "lock_busy", (double)r->lock_busy);
    cJSON_AddNumberToObject(j, "redis_unavailable", (double)r->redis_unavailable);
    cJSON_AddNumberToObject(j, "other_http", (double)r->other_http);
    cJSON *st = cJSON_AddObjectToObject(j, "status");
    for (int s = 100; s < 600; s++) {
        if (g->status[s]) {
            char k[8];
            snprintf(k, sizeof k, "%d", s);
            cJSON_AddNumberToObject(st, k, (double)g->status[s]);
        }
    }
    cJSON_AddNumberToObject(j, "transport_errors", (double)r->transport_errors);
    cJSON_AddNumberToObject(j, "errors", (double)lg_run_errors(r));
    cJSON *be = cJSON_AddObjectToObject(j, "by_error");
    for (int k = 0; k < r->nerrs; k++) {
        char key[48];
        snprintf(key, sizeof key, "%d %s", r->errs[k].status, r->errs[k].error);
        cJSON_AddNumberToObject(be, key, (double)r->errs[k].n);
    }
    if (r->errs_other)
        cJSON_AddNumberToObject(be, "unnamed", (double)r->errs_other);
    cJSON_AddNumberToObject(j, "unknown_outcome", (double)r->unknown_outcome);
    cJSON *te = cJSON_AddObjectToObject(j, "transport");
    for (int k = 1; k < LG_ERR_COUNT; k++)
        cJSON_AddNumberToObject(te, lg_err_name((lg_err)k), (double)g->errors[k]);
    cJSON_AddNumberToObject(j, "elapsed_s", g->elapsed_s);
    cJSON_AddNumberToObject(j, "throughput_rps",
                            g->elapsed_s > 0 ? (double)g->completed / g->elapsed_s : 0);
    cJSON_AddNumberToObject(j, "latency_p50_ms", ms(lg_hist_percentile(&g->hist, 50)));
    cJSON_AddNumberToObject(j, "latency_p90_ms", ms(lg_hist_percentile(&g->hist, 90)));
    cJSON_AddNumberToObject(j, "latency_p99_ms", ms(lg_hist_percentile(&g->hist, 99)));
    cJSON_AddNumberToObject(j, "latency_max_ms", ms(g->hist.max));
    cJSON_AddBoolToObject(j, "deadline_hit", g->deadline_hit);
    cJSON_AddBoolToObject(j, "audited", r->audited);
    if (r->audited) {
        cJSON_AddNumberToObject(j, "initial", (double)r->audit.initial);
        cJSON_AddNumberToObject(j, "sold", (double)r->audit.sold);
        cJSON_AddNumberToObject(j, "stock_left", (double)r->audit.stock);
        cJSON_AddNumberToObject(j, "oversold", (double)r->audit.oversold);
        cJSON_AddNumberToObject(j, "undersold", (double)r->audit.undersold);
        cJSON_AddNumberToObject(j, "orders_listed", (double)r->orders_listed);
        cJSON_AddNumberToObject(j, "duplicate_order_ids", (double)r->dup_orders);
        cJSON_AddNumberToObject(j, "duplicate_acknowledged_ids", (double)r->dup_ok_ids);
        cJSON_AddNumberToObject(j, "acked_lost", (double)r->acked_lost);
        cJSON_AddNumberToObject(j, "missing_orders", (double)r->acked_lost); /* former name */
        cJSON_AddNumberToObject(j, "unacknowledged_orders", (double)r->unacknowledged);
        cJSON_AddNumberToObject(j, "unknown_outcome_sold", (double)r->unknown_committed);
    } else {
        cJSON_AddStringToObject(j, "audit_error", r->audit_error);
    }
    cJSON_AddNumberToObject(j, "stock_at_start", (double)r->stock_at_start);
    cJSON_AddNumberToObject(j, "acked_over_stock", (double)r->acked_over_stock);
    cJSON_AddNumberToObject(j, "lock_lost", (double)r->lock_lost);
    cJSON_AddNumberToObject(j, "deleted_other_lock", (double)r->deleted_other_lock);
    cJSON_AddNumberToObject(j, "ok_without_order_id", (double)r->ok_without_id);
    cJSON_AddStringToObject(j, "verdict", verdict(r));
    if (e != LG_EXPECT_NONE) {
        cJSON_AddStringToObject(j, "expect", expect_name(e));
        cJSON_AddBoolToObject(j, "expect_met", lg_run_check(r, e) == 0);
    }
    return j;
}

void lg_report_json(FILE *o, const lg_run_cfg *c, const lg_run_result *r, lg_expect e)
{
    cJSON *j = run_json(c, r, e);
    char *s = cJSON_Print(j);
    if (s) {
        fprintf(o, "%s\n", s);
        free(s);
    }
    cJSON_Delete(j);
}

void lg_report_csv(FILE *o, const lg_run_cfg *c, const lg_run_result *r, lg_expect e, int header)
{
    const lg_engine_result *g = &r->eng;
    if (header)
        fputs("mode,sku,targets,concurrency,requests,sent,ok,sold_out,lock_busy,"
              "redis_unavailable,other_http,transport_errors,elapsed_s,throughput_rps,"
              "p50_ms,p90_ms,p99_ms,max_ms,initial,sold,stock_left,oversold,undersold,"
              "orders_listed,duplicate_order_ids,missing_orders,lock_lost,verdict,expect,"
              "expect_met,errors,deleted_other_lock,fenced_out,acked_lost,acked_over_stock\n",
              o);
    fprintf(o, "%s,%s,%d,%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%.3f,%.1f,%.2f,%.2f,%.2f,%.2f,",
            c->mode, c->sku, c->ntargets, c->concurrency, (unsigned long long)r->requests,
            (unsigned long long)g->claimed, (unsigned long long)r->ok,
            (unsigned long long)r->sold_out, (unsigned long long)r->lock_busy,
            (unsigned long long)r->redis_unavailable, (unsigned long long)r->other_http,
            (unsigned long long)r->transport_errors, g->elapsed_s,
            g->elapsed_s > 0 ? (double)g->completed / g->elapsed_s : 0,
            ms(lg_hist_percentile(&g->hist, 50)), ms(lg_hist_percentile(&g->hist, 90)),
            ms(lg_hist_percentile(&g->hist, 99)), ms(g->hist.max));
    if (r->audited)
        fprintf(o, "%lld,%lld,%lld,%lld,%lld,%llu,%llu,%llu,", (long long)r->audit.initial,
                (long long)r->audit.sold, (long long)r->audit.stock, (long long)r->audit.oversold,
                (long long)r->audit.undersold, (unsigned long long)r->orders_listed,
                (unsigned long long)r->dup_orders, (unsigned long long)r->acked_lost);
    else
        fputs(",,,,,,,,", o);
    fprintf(o, "%llu,%s,%s,%s,%llu,%llu,%llu,", (unsigned long long)r->lock_lost, verdict(r),
            expect_name(e),
            e == LG_EXPECT_NONE  ? ""
            : lg_run_check(r, e) ? "false"
                                 : "true",
            (unsigned long long)lg_run_errors(r), (unsigned long long)r->deleted_other_lock,
            (unsigned long long)r->fenced_out);
    if (r->audited)
        fprintf(o, "%llu,", (unsigned long long)r->acked_lost);
    else
        fputc(',', o);
    if (r->stock_at_start >= 0)
        fprintf(o, "%llu\n", (unsigned long long)r->acked_over_stock);
    else
        fputc('\n', o);
}

/* --- bench --------------------------------------------------------------- */

typedef struct bench_ctx {
    char req[REQ_PART];
    size_t len;
} bench_ctx;

static const char *build_bench(void *ud, uint64_t idx, int target, char *buf, size_t cap,
                               size_t *len)
{
    bench_ctx *b = ud;
    (void)idx;
    (void)target;
    (void)buf;
    (void)cap;
    *len = b->len;
    return b->req; /* prebuilt once: no per-request work at all */
}

/* The path lg_bench requests (NULL or "": its default). */
static const char *bench_path(const lg_bench_cfg *c)
{
    return c->path && *c->path ? c->path : "/healthz";
}

int lg_bench(const lg_bench_cfg *cfg, lg_engine_result *res, char *err, size_t errlen)
{
    bench_ctx b;
    const char *path = bench_path(cfg);
    int n = snprintf(b.req, sizeof b.req, "GET %s%s HTTP/1.1\r\nHost: %s:%d\r\n\r\n",
                     cfg->target.prefix, path, cfg->target.host, cfg->target.port);
    if (n < 0 || (size_t)n >= sizeof b.req || path[0] != '/') {
        snprintf(err, errlen, "bench: bad --path");
        return -1;
    }
    b.len = (size_t)n;
    if (cfg->duration_s <= 0 || cfg->duration_s > 3600) {
        snprintf(err, errlen, "bench: --duration must be in (0, 3600] seconds");
        return -1;
    }
    lg_engine_cfg ec = {
        .targets = &cfg->target,
        .ntargets = 1,
        .concurrency = cfg->concurrency,
        .threads = cfg->threads,
        .requests = 0,
        .duration_ms = (int64_t)(cfg->duration_s * 1000),
        .build = build_bench,
        .build_ud = &b,
        .progress = cfg->progress,
        .progress_ud = cfg->progress_ud,
        .stop = cfg->stop,
    };
    return lg_engine_run(&ec, res, err, errlen);
}

void lg_report_bench(FILE *o, const lg_bench_cfg *c, const lg_engine_result *r, int json)
{
    uint64_t errs = 0;
    for (int k = 1; k < LG_ERR_COUNT; k++)
        errs += r->errors[k];
    uint64_t non2xx = 0;
    for (int s = 100; s < 600; s++)
        if (s < 200 || s >= 300)
            non2xx += r->status[s];
    double rps = r->elapsed_s > 0 ? (double)r->completed / r->elapsed_s : 0;
    if (json) {
        fprintf(o,
                "{\"target\":\"%s\",\"path\":\"%s\",\"concurrency\":%d,\"duration_s\":%.3f,"
                "\"requests\":%llu,\"requests_per_s\":%.1f,\"non_2xx\":%llu,\"errors\":%llu,"
                "\"latency_p50_ms\":%.3f,\"latency_p90_ms\":%.3f,\"latency_p99_ms\":%.3f,"
                "\"latency_max_ms\":%.3f}\n",
                c->target.base, bench_path(c), c->concurrency, r->elapsed_s,
                (unsigned long long)r->completed, rps, (unsigned long long)non2xx,
                (unsigned long long)errs, ms(lg_hist_percentile(&r->hist, 50)),
                ms(lg_hist_percentile(&r->hist, 90)), ms(lg_hist_percentile(&r->hist, 99)),
                ms(r->hist.max));
        return;
    }
    fprintf(o, "miaosha-load bench: GET %s%s, %d connections, %.2f s\n", c->target.base,
            bench_path(c), c->concurrency, r->elapsed_s);
    fprintf(o, "  requests      %llu (non-2xx %llu, errors %llu)\n",
            (unsigned long long)r->completed, (unsigned long long)non2xx, (unsigned long long)errs);
    fprintf(o, "  requests/s    %.1f\n", rps);
    fprintf(o, "  latency ms    p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n",
            ms(lg_hist_percentile(&r->hist, 50)), ms(lg_hist_percentile(&r->hist, 90)),
            ms(lg_hist_percentile(&r->hist, 99)), ms(r->hist.max));
}

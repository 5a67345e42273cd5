/* svc_stats.c — counters and histograms (see svc_stats.h). */
#include "svc_stats.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_bucket.h"
#include "svc_buf.h"
#include "svc_check.h"
#include "svc_clock.h"
#include "svc_gauges.h"
#include "svc_health.h"
#include "svc_process.h"

/* ---- fine log-scale histogram: percentiles ---- */
#define FINE_EXP 37 /* 2^0 .. 2^36 us (~19 h) */
#define FINE_BUCKETS (1 + FINE_EXP * 4)

typedef struct fine_hist {
    _Atomic uint64_t b[FINE_BUCKETS];
    _Atomic uint64_t count;
    _Atomic uint64_t max_us;
} fine_hist;

static int fine_index(uint64_t us)
{
    if (us == 0)
        return 0;
    int e = 63 - __builtin_clzll(us);
    if (e >= FINE_EXP)
        return FINE_BUCKETS - 1;
    uint64_t sub = e >= 2 ? (us >> (e - 2)) & 3u : (e == 1 ? (us & 1u) << 1 : 0);
    return 1 + e * 4 + (int)sub;
}

/* Upper bound (us, exclusive) of bucket i. */
static double fine_upper(int i)
{
    if (i == 0)
        return 1.0;
    int e = (i - 1) / 4, sub = (i - 1) % 4;
    return (double)(1ull << e) * (1.0 + (sub + 1) / 4.0);
}

static void fine_add(fine_hist *h, uint64_t us)
{
    atomic_fetch_add_explicit(&h->b[fine_index(us)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&h->max_us, memory_order_relaxed);
    while (us > m && !atomic_compare_exchange_weak_explicit(
                         &h->max_us, &m, us, memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* Percentile p (0..1] in ms; 0 when empty. */
static double fine_pct(fine_hist *h, double p)
{
    uint64_t n = 0, counts[FINE_BUCKETS];
    for (int i = 0; i < FINE_BUCKETS; i++) {
        counts[i] = atomic_load_explicit(&h->b[i], memory_order_relaxed);
        n += counts[i];
    }
    if (n == 0)
        return 0.0;
    uint64_t rank = (uint64_t)(p * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    double maxms = (double)atomic_load_explicit(&h->max_us, memory_order_relaxed) / 1000.0;
    for (int i = 0; i < FINE_BUCKETS; i++) {
        seen += counts[i];
        if (seen >= rank) {
            double v = fine_upper(i) / 1000.0;
            return v < maxms ? v : maxms;
        }
    }
    return maxms;
}

/* ---- Prometheus histogram per (mode, sku) ---- */
static const double prom_le_s[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                   0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
#define PROM_N (sizeof prom_le_s / sizeof prom_le_s[0])

typedef struct prom_hist {
    _Atomic uint64_t b[PROM_N + 1]; /* non-cumulative; last = above every bound */
    _Atomic uint64_t sum_us;
} prom_hist;

static void prom_add(prom_hist *h, uint64_t us)
{
    size_t i = 0;
    while (i < PROM_N && (double)us > prom_le_s[i] * 1e6)
        i++;
    atomic_fetch_add_explicit(&h->b[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
}

typedef struct cell {
    _Atomic uint64_t out[SVC_OUT_COUNT];
    _Atomic uint64_t lock_lost, deleted_other_lock;
    prom_hist latency, wait;
} cell;

static cell cells[SVC_MODE_COUNT][SVC_STATS_SKUS + 1];
static fine_hist mode_latency[SVC_MODE_COUNT], mode_wait[SVC_MODE_COUNT];

static char sku_names[SVC_STATS_SKUS][SVC_SKU_MAX + 1];
static _Atomic int sku_count;
static pthread_mutex_t sku_mu = PTHREAD_MUTEX_INITIALIZER;

static _Atomic uint64_t http_status[600];
static _Atomic uint64_t redis_errors;
static _Atomic long inflight;
static _Atomic uint64_t sold_out_local;
static _Atomic uint64_t lua_batches, lua_batched;
static int64_t started_us;

void svc_stats_init(void)
{
    started_us = lc_now_us();
}

int svc_stats_sku_find(const char *sku)
{
    int n = atomic_load_explicit(&sku_count, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (strcmp(sku_names[i], sku) == 0)
            return i;
    return SVC_STATS_SKUS;
}

int svc_stats_sku_slot(const char *sku)
{
    int n;
    int found = svc_stats_sku_find(sku);
    if (found < SVC_STATS_SKUS)
        return found;
    SVC_PT(pthread_mutex_lock(&sku_mu));
    /* Again under the mutex: another thread may have just added it. */
    int slot = svc_stats_sku_find(sku);
    n = atomic_load_explicit(&sku_count, memory_order_relaxed);
    if (slot == SVC_STATS_SKUS && n < SVC_STATS_SKUS) {
        snprintf(sku_names[n], sizeof sku_names[n], "%s", sku);
        atomic_store_explicit(&sku_count, n + 1, memory_order_release);
        slot = n;
    }
    SVC_PT(pthread_mutex_unlock(&sku_mu));
    return slot;
}

void svc_stats_purchase(svc_mode mode, int slot, svc_outcome out, int lock_lost,
                        int deleted_other_lock, int64_t latency_us, int64_t lock_wait_us)
{
    if (mode < 0 || mode >= SVC_MODE_COUNT || slot < 0 || slot > SVC_STATS_SKUS ||
        out >= SVC_OUT_COUNT)
        return;
    cell *c = &cells[mode][slot];
    atomic_fetch_add_explicit(&c->out[out], 1, memory_order_relaxed);
    if (lock_lost)
        atomic_fetch_add_explicit(&c->lock_lost, 1, memory_order_relaxed);
    if (deleted_other_lock)
        atomic_fetch_add_explicit(&c->deleted_other_lock, 1, memory_order_relaxed);
    if (out == SVC_OUT_BAD_REQUEST)
        return; /* latency of a rejected request says nothing about the lock */
    if (latency_us < 0)
        latency_us = 0;
    prom_add(&c->latency, (uint64_t)latency_us);
    fine_add(&mode_latency[mode], (uint64_t)latency_us);
    if (lock_wait_us >= 0) {
        prom_add(&c->wait, (uint64_t)lock_wait_us);
        fine_add(&mode_wait[mode], (uint64_t)lock_wait_us);
    }
}

void svc_stats_http(unsigned status)
{
    if (status < 600)
        atomic_fetch_add_explicit(&http_status[status], 1, memory_order_relaxed);
}

void svc_stats_redis_error(void)
{
    atomic_fetch_add_explicit(&redis_errors, 1, memory_order_relaxed);
}

static atomic_ullong held_back_commits;

void svc_stats_held_back(void)
{
    atomic_fetch_add_explicit(&held_back_commits, 1, memory_order_relaxed);
}

void svc_stats_inflight(int delta)
{
    atomic_fetch_add_explicit(&inflight, delta, memory_order_relaxed);
}

void svc_stats_sold_out_local(void)
{
    atomic_fetch_add_explicit(&sold_out_local, 1, memory_order_relaxed);
}

void svc_stats_lua_batch(int n)
{
    atomic_fetch_add_explicit(&lua_batches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&lua_batched, (uint64_t)n, memory_order_relaxed);
}

/* ---- rendering ---- */

static const char *out_names[SVC_OUT_COUNT] = {"sold",
                                               "sold_out",
                                               "lock_busy",
                                               "errors",
                                               "bad_requests",
                                               "client_gone",
                                               "stock_reset",
                                               "fenced_out",
                                               "limit_reached",
                                               "replayed",
                                               "idempotency_conflicts",
                                               "unknown_sku"};

static uint64_t ld(_Atomic uint64_t *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

/* Appends s as a JSON / Prometheus-label string body (escapes " \ and
 * control characters). */
static void put_escaped(svc_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            svc_buf_printf(b, "\\%c", ch);
        else if (ch < 0x20)
            svc_buf_printf(b, "\\u%04x", ch);
        else
            svc_buf_printf(b, "%c", ch);
    }
}

static void put_pcts(svc_buf *b, const char *name, fine_hist *h)
{
    svc_buf_printf(b, "\"%s\":{\"count\":%llu,\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f}",
                   name, (unsigned long long)ld(&h->count), fine_pct(h, 0.50), fine_pct(h, 0.90),
                   fine_pct(h, 0.99), (double)ld(&h->max_us) / 1000.0);
}

/* With a Redis Cluster: "cluster":{the slot map (each master, its slot
 * ranges, its replicas), when it was taken, the redirects, retries and map
 * refreshes}. Nothing without one. The map is the health probe's, kept
 * fresh while the service is idle (svc_health_client); the counters are
 * the service's client's. */
static void put_cluster(svc_buf *b, lc_client *client, const lc_stats *ls)
{
    lc_client *fresh = svc_health_client() != NULL ? svc_health_client() : client;
    lc_cluster_map *map = client != NULL ? malloc(sizeof *map) : NULL;
    if (map == NULL || lc_cluster_map_get(fresh, map) != 0) {
        free(map);
        return;
    }
    char at[40] = "";
    if (map->refreshed_wall_ms > 0) {
        struct tm tm;
        time_t sec = (time_t)(map->refreshed_wall_ms / 1000);
        gmtime_r(&sec, &tm);
        size_t n = strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(at + n, sizeof at - n, ".%03dZ", (int)(map->refreshed_wall_ms % 1000));
    }
    svc_buf_printf(b, ",\"cluster\":{\"slots_covered\":%d,\"refreshed_at\":", map->slots_covered);
    if (at[0])
        svc_buf_printf(b, "\"%s\",\"map_age_ms\":%lld", at, (long long)map->age_ms);
    else
        svc_buf_printf(b, "null,\"map_age_ms\":null");
    svc_buf_printf(b, ",\"masters\":[");
    for (int i = 0; i < map->nmasters; i++) {
        const lc_cluster_master *m = &map->master[i];
        svc_buf_printf(b, "%s{\"addr\":\"", i ? "," : "");
        put_escaped(b, m->addr);
        svc_buf_printf(b, "\",\"slots\":[");
        for (int r = 0; r < m->nranges; r++) {
            if (m->range[r][0] == m->range[r][1])
                svc_buf_printf(b, "%s\"%d\"", r ? "," : "", m->range[r][0]);
            else
                svc_buf_printf(b, "%s\"%d-%d\"", r ? "," : "", m->range[r][0], m->range[r][1]);
        }
        svc_buf_printf(b, "],\"slot_ranges_more\":%d,\"replicas\":[", m->ranges_more);
        for (int r = 0; r < m->nreplicas; r++) {
            svc_buf_printf(b, "%s\"", r ? "," : "");
            put_escaped(b, m->replica[r]);
            svc_buf_printf(b, "\"");
        }
        svc_buf_printf(b, "]}");
    }
    svc_buf_printf(
        b,
        "],\"redirects\":{\"moved\":%llu,\"ask\":%llu},\"retries\":%llu,"
        "\"map_refreshes\":%llu,\"held_back_commits\":%llu}",
        (unsigned long long)ls->cluster_moved, (unsigned long long)ls->cluster_ask,
        (unsigned long long)ls->cluster_retries, (unsigned long long)ls->cluster_refreshes,
        (unsigned long long)atomic_load_explicit(&held_back_commits, memory_order_relaxed));
    free(map);
}

char *svc_stats_json(const char *instance, lc_client *client, size_t *len)
{
    svc_buf b = {0};
    lc_stats ls;
    memset(&ls, 0, sizeof ls);
    if (client != NULL)
        lc_client_stats(client, &ls);
    svc_buf_printf(&b, "{\"ok\":true,\"instance\":\"");
    put_escaped(&b, instance);
    char master[300] = "";
    svc_health_master(client, master, sizeof master);
    svc_buf_printf(&b, "\",\"master\":\"");
    put_escaped(&b, master);
    svc_buf_printf(&b, "\",\"master_switches\":%llu", (unsigned long long)ls.master_switches);
    put_cluster(&b, client, &ls);
    svc_buf_printf(&b,
                   ",\"uptime_s\":%.3f,\"redis_errors\":%llu,\"inflight\":%ld,"
                   "\"sold_out_local\":%llu,",
                   (double)(lc_now_us() - started_us) / 1e6, (unsigned long long)ld(&redis_errors),
                   atomic_load(&inflight), (unsigned long long)ld(&sold_out_local));
    /* Locks a timed-out acquire took after its request had answered 503,
     * and what lockcore's cleanup did about them (lockcore.h). */
    svc_buf_printf(&b,
                   "\"orphan_locks\":{\"adopted\":%llu,\"released\":%llu,\"unresolved\":%llu},"
                   "\"modes\":{",
                   (unsigned long long)ls.orphans_adopted, (unsigned long long)ls.orphans_released,
                   (unsigned long long)ls.orphans_unresolved);
    for (int m = 0, listed = 0; m < SVC_MODE_COUNT; m++) {
        if (!svc_mode_offered(m))
            continue;
        const char *comma = listed++ ? "," : "";
        uint64_t out[SVC_OUT_COUNT] = {0}, lost = 0, deleted = 0, requests = 0;
        for (int s = 0; s <= SVC_STATS_SKUS; s++) {
            for (int o = 0; o < SVC_OUT_COUNT; o++)
                out[o] += ld(&cells[m][s].out[o]);
            lost += ld(&cells[m][s].lock_lost);
            deleted += ld(&cells[m][s].deleted_other_lock);
        }
        for (int o = 0; o < SVC_OUT_COUNT; o++)
            requests += out[o];
        svc_buf_printf(&b, "%s\"%s\":{\"requests\":%llu", comma, svc_mode_name(m),
                       (unsigned long long)requests);
        for (int o = 0; o < SVC_OUT_COUNT; o++)
            svc_buf_printf(&b, ",\"%s\":%llu", out_names[o], (unsigned long long)out[o]);
        svc_buf_printf(&b, ",\"lock_lost\":%llu,\"deleted_other_lock\":%llu,",
                       (unsigned long long)lost, (unsigned long long)deleted);
        put_pcts(&b, "latency_ms", &mode_latency[m]);
        svc_buf_printf(&b, ",");
        put_pcts(&b, "lock_wait_ms", &mode_wait[m]);
        svc_buf_printf(&b, "}");
    }
    svc_buf_printf(&b, "}");
    svc_bucket_stats_json(&b);
    svc_buf_printf(&b, "}");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

static void put_labels(svc_buf *b, int m, int s)
{
    svc_buf_printf(b, "mode=\"%s\",sku=\"", svc_mode_name(m));
    put_escaped(b, s < SVC_STATS_SKUS ? sku_names[s] : "_other");
    svc_buf_printf(b, "\"");
}

static void put_prom_hist(svc_buf *b, const char *name, int which, int nskus)
{
    svc_buf_printf(b, "# TYPE %s histogram\n", name);
    for (int m = 0; m < SVC_MODE_COUNT; m++) {
        for (int s = 0; s <= SVC_STATS_SKUS; s++) {
            if (s >= nskus && s < SVC_STATS_SKUS)
                continue;
            prom_hist *h = which ? &cells[m][s].wait : &cells[m][s].latency;
            uint64_t cum = 0, total = 0;
            for (size_t i = 0; i <= PROM_N; i++)
                total += ld(&h->b[i]);
            if (total == 0)
                continue;
            for (size_t i = 0; i < PROM_N; i++) {
                cum += ld(&h->b[i]);
                svc_buf_printf(b, "%s_bucket{", name);
                put_labels(b, m, s);
                svc_buf_printf(b, ",le=\"%g\"} %llu\n", prom_le_s[i], (unsigned long long)cum);
            }
            cum += ld(&h->b[PROM_N]);
            svc_buf_printf(b, "%s_bucket{", name);
            put_labels(b, m, s);
            svc_buf_printf(b, ",le=\"+Inf\"} %llu\n%s_sum{", (unsigned long long)cum, name);
            put_labels(b, m, s);
            svc_buf_printf(b, "} %.6f\n%s_count{", (double)ld(&h->sum_us) / 1e6, name);
            put_labels(b, m, s);
            svc_buf_printf(b, "} %llu\n", (unsigned long long)cum);
        }
    }
}

/* Requests a (mode, sku) cell has seen, every outcome. */
static uint64_t cell_requests(int m, int s, int unused)
{
    (void)unused;
    uint64_t v = 0;
    for (int o = 0; o < SVC_OUT_COUNT; o++)
        v += ld(&cells[m][s].out[o]);
    return v;
}

static uint64_t cell_outcome(int m, int s, int o)
{
    return ld(&cells[m][s].out[o]);
}

static uint64_t cell_lock_lost(int m, int s, int unused)
{
    (void)unused;
    return ld(&cells[m][s].lock_lost);
}

static uint64_t cell_deleted_other_lock(int m, int s, int unused)
{
    (void)unused;
    return ld(&cells[m][s].deleted_other_lock);
}

/* miaosha_purchase_<name>_total{mode,sku} = value(m, s, arg) for every
 * (mode, sku) pair that has seen a request, zeros included: a series that
 * appears only with its first event makes rate() and increase() miss that
 * event. */
static void put_cell_counter(svc_buf *b, const char *name, const char *help,
                             uint64_t (*value)(int m, int s, int arg), int arg, int nskus)
{
    svc_buf_printf(
        b, "# HELP miaosha_purchase_%s_total %s\n# TYPE miaosha_purchase_%s_total counter\n", name,
        help, name);
    for (int m = 0; m < SVC_MODE_COUNT; m++)
        for (int s = 0; s <= SVC_STATS_SKUS; s++) {
            if ((s >= nskus && s < SVC_STATS_SKUS) || cell_requests(m, s, 0) == 0)
                continue;
            svc_buf_printf(b, "miaosha_purchase_%s_total{", name);
            put_labels(b, m, s);
            svc_buf_printf(b, "} %llu\n", (unsigned long long)value(m, s, arg));
        }
}

char *svc_stats_prometheus(lc_client *client, int redis_up, size_t *len)
{
    svc_buf b = {0};
    int nskus = atomic_load_explicit(&sku_count, memory_order_acquire);
    static const char *help[SVC_OUT_COUNT] = {
        "Purchases that sold one unit (HTTP 200).",
        "Purchases that found no stock (HTTP 409).",
        "Purchases that did not get the lock within wait_ms (HTTP 429).",
        "Purchases answered 503: Redis unavailable or error, overloaded, shutting down.",
        "Purchases rejected by validation (HTTP 400/401/403).",
        "Purchases whose client had closed its connection before the lock or the commit (HTTP "
        "499, nothing written).",
        "Purchases whose commit a stock reset (PUT /stock) voided (HTTP 409 stock_reset, "
        "nothing written).",
        "Purchases the fence refused: a later lock holder had read the stock since this holder "
        "did, its lease having run out (HTTP 409 fenced_out, nothing written; mode fenced).",
        "Purchases refused because the user holds purchase.limit_per_user orders (HTTP 409 "
        "limit_reached).",
        "Idempotency-Key replays answered with the stored reply.",
        "Idempotency-Key requests refused: the first is still running (HTTP 409 in_progress) "
        "or the key came with other parameters (HTTP 422 idempotency_key_reused).",
        "Purchases of a SKU that was never stocked (HTTP 404 unknown_sku, nothing written)."};

    for (int o = 0; o < SVC_OUT_COUNT; o++)
        put_cell_counter(&b, out_names[o], help[o], cell_outcome, o, nskus);
    put_cell_counter(&b, "requests", "Purchase requests, every outcome.", cell_requests, 0, nskus);
    put_cell_counter(&b, "lock_lost", "Purchases whose lock was lost while held.", cell_lock_lost,
                     0, nskus);
    put_cell_counter(
        &b, "deleted_other_lock",
        "Purchases whose release came after their lease and deleted a later holder's lock (setnx).",
        cell_deleted_other_lock, 0, nskus);
    svc_buf_printf(
        &b, "# HELP miaosha_purchase_duration_seconds Purchase latency inside the service.\n");
    put_prom_hist(&b, "miaosha_purchase_duration_seconds", 0, nskus);
    svc_buf_printf(&b, "# HELP miaosha_lock_wait_seconds Time spent acquiring the lock.\n");
    put_prom_hist(&b, "miaosha_lock_wait_seconds", 1, nskus);

    svc_buf_printf(&b, "# HELP miaosha_http_responses_total HTTP responses by status code.\n"
                       "# TYPE miaosha_http_responses_total counter\n");
    for (int code = 100; code < 600; code++) {
        uint64_t v = ld(&http_status[code]);
        if (v)
            svc_buf_printf(&b, "miaosha_http_responses_total{code=\"%d\"} %llu\n", code,
                           (unsigned long long)v);
    }
    lc_stats ls;
    memset(&ls, 0, sizeof ls);
    if (client != NULL)
        lc_client_stats(client, &ls);
    svc_buf_printf(
        &b,
        "# HELP miaosha_redis_errors_total Redis failures seen by the service's requests.\n"
        "# TYPE miaosha_redis_errors_total counter\nmiaosha_redis_errors_total %llu\n"
        "# HELP miaosha_redis_up 1 when the background probe reached Redis.\n"
        "# TYPE miaosha_redis_up gauge\nmiaosha_redis_up %d\n"
        "# HELP miaosha_inflight_purchases Purchases handed to workers, not finished.\n"
        "# TYPE miaosha_inflight_purchases gauge\nmiaosha_inflight_purchases %ld\n"
        "# HELP miaosha_sold_out_local_total Purchases answered 409 sold_out from the local "
        "sold-out flag, without Redis.\n"
        "# TYPE miaosha_sold_out_local_total counter\nmiaosha_sold_out_local_total %llu\n"
        "# HELP miaosha_lua_batches_total Writes that carried the scripts of several queued "
        "lua purchases at once (one is a batch of one).\n"
        "# TYPE miaosha_lua_batches_total counter\nmiaosha_lua_batches_total %llu\n"
        "# HELP miaosha_lua_batched_purchases_total Lua purchase scripts sent in those "
        "writes.\n"
        "# TYPE miaosha_lua_batched_purchases_total counter\n"
        "miaosha_lua_batched_purchases_total %llu\n",
        (unsigned long long)ld(&redis_errors), redis_up ? 1 : 0, atomic_load(&inflight),
        (unsigned long long)ld(&sold_out_local), (unsigned long long)ld(&lua_batches),
        (unsigned long long)ld(&lua_batched));
    uint64_t probes, hops, rechecks;
    svc_bucket_totals(&probes, &hops, &rechecks);
    svc_buf_printf(
        &b,
        "# HELP miaosha_bucket_probes_total Stock buckets purchases tried and found sold out.\n"
        "# TYPE miaosha_bucket_probes_total counter\nmiaosha_bucket_probes_total %llu\n"
        "# HELP miaosha_bucket_hops_total Stock buckets purchases found locked and passed "
        "without waiting (also in miaosha_lock_busy_total).\n"
        "# TYPE miaosha_bucket_hops_total counter\nmiaosha_bucket_hops_total %llu\n"
        "# HELP miaosha_bucket_rechecks_total Layout records read again before a bucketed "
        "SKU's sold-out answer.\n"
        "# TYPE miaosha_bucket_rechecks_total counter\nmiaosha_bucket_rechecks_total %llu\n",
        (unsigned long long)probes, (unsigned long long)hops, (unsigned long long)rechecks);
    struct {
        const char *name, *type, *help;
        uint64_t v;
    } lcm[] = {
        {"miaosha_lock_acquired_total", "counter", "Lock acquisitions (lockcore).", ls.acquired},
        {"miaosha_master_switches_total", "counter",
         "Times the Redis master's address changed (Sentinel failover).", ls.master_switches},
        {"miaosha_lock_busy_total", "counter",
         "Acquisitions that found the lock held until their wait ran out, stock buckets' hops "
         "(a wait of 0) included (lockcore).",
         ls.busy},
        {"miaosha_lock_io_errors_total", "counter", "Lock calls that failed on Redis (lockcore).",
         ls.io_errors},
        {"miaosha_watchdog_renewals_total", "counter", "Watchdog renewals that extended a lock.",
         ls.watchdog_renewals},
        {"miaosha_watchdog_lost_total", "counter", "Watchdog renewals that found the lock gone.",
         ls.watchdog_lost},
        {"miaosha_watchdog_active", "gauge", "Locks the watchdog renews now.", ls.watchdog_active},
        {"miaosha_pubsub_channels", "gauge", "Lock channels subscribed now.", ls.pubsub_channels},
        {"miaosha_pubsub_waiters", "gauge", "Threads waiting on a reentrant lock now.",
         ls.pubsub_waiters},
        {"miaosha_orphan_locks_adopted_total", "counter",
         "Token, fenced and reentrant lock commands that timed out and whose connection the "
         "orphan cleanup took over.",
         ls.orphans_adopted},
        {"miaosha_orphan_locks_released_total", "counter",
         "Locks granted to a timed-out acquire after it answered, given back by the orphan "
         "cleanup.",
         ls.orphans_released},
        {"miaosha_orphan_locks_unresolved_total", "counter",
         "Timed-out lock commands whose outcome stayed unknown (left to the lease).",
         ls.orphans_unresolved},
    };
    for (size_t i = 0; i < sizeof lcm / sizeof lcm[0]; i++)
        svc_buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", lcm[i].name, lcm[i].help,
                       lcm[i].name, lcm[i].type, lcm[i].name, (unsigned long long)lcm[i].v);
    lc_cluster_map *map = client != NULL ? malloc(sizeof *map) : NULL;
    if (map != NULL &&
        lc_cluster_map_get(svc_health_client() ? svc_health_client() : client, map) == 0)
        svc_buf_printf(
            &b,
            "# HELP miaosha_redis_redirects_total Redis Cluster redirects followed: MOVED (the "
            "slot lives elsewhere now), ASK (one command to the node importing it).\n"
            "# TYPE miaosha_redis_redirects_total counter\n"
            "miaosha_redis_redirects_total{kind=\"moved\"} %llu\n"
            "miaosha_redis_redirects_total{kind=\"ask\"} %llu\n"
            "# HELP miaosha_redis_cluster_retries_total Redis Cluster commands sent again after "
            "a back-off (TRYAGAIN, CLUSTERDOWN, LOADING, a slot split by a migration, a master "
            "that refused the connection).\n"
            "# TYPE miaosha_redis_cluster_retries_total counter\n"
            "miaosha_redis_cluster_retries_total %llu\n"
            "# HELP miaosha_redis_cluster_map_refreshes_total Slot maps taken from the cluster "
            "(CLUSTER NODES).\n"
            "# TYPE miaosha_redis_cluster_map_refreshes_total counter\n"
            "miaosha_redis_cluster_map_refreshes_total %llu\n"
            "# HELP miaosha_redis_cluster_slots_covered Slots with a master in the slot map "
            "(16384 when every slot has one).\n"
            "# TYPE miaosha_redis_cluster_slots_covered gauge\n"
            "miaosha_redis_cluster_slots_covered %d\n"
            "# HELP miaosha_redis_cluster_held_back_commits_total Purchase commits a slot "
            "migration held back (nothing written) that were read, decided and sent again "
            "under the same lock.\n"
            "# TYPE miaosha_redis_cluster_held_back_commits_total counter\n"
            "miaosha_redis_cluster_held_back_commits_total %llu\n",
            (unsigned long long)ls.cluster_moved, (unsigned long long)ls.cluster_ask,
            (unsigned long long)ls.cluster_retries, (unsigned long long)ls.cluster_refreshes,
            map->slots_covered,
            (unsigned long long)atomic_load_explicit(&held_back_commits, memory_order_relaxed));
    free(map);
    svc_gauges_render(&b);
    svc_process_render(&b, cfg_version());
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

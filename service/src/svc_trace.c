/* svc_trace.c — see svc_trace.h.
 *
 * Why a mutex per ring and not a lock-free ring: a record is ~330 bytes,
 * copied in one memcpy; a writer that claimed a slot by an atomic sequence
 * alone could be overtaken by a reader (or by a writer a full ring later)
 * halfway through its copy, and detecting that needs a per-slot version
 * check on both sides. The mutex is held for one copy per purchase, and a
 * reader holds it only to copy the wanted records out, never while
 * printing, so a purchase waits at most for one such copy. */
#include "svc_trace.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_buf.h"
#include "svc_check.h"
#include "svc_clock.h"
#include "svc_mode.h"

_Static_assert(sizeof(svc_trace) <= SVC_TRACE_REC_BYTES, "svc_trace grew past its stated size");

enum { F_READ = 1, F_WRITTEN = 2, F_LOST = 4, F_DELETED = 8, F_USER = 16, F_FENCE = 32 };

typedef struct ring {
    char sku[SVC_SKU_MAX + 1];
    pthread_mutex_t mu;
    _Atomic uint64_t last; /* the last seq given; 0 = none yet */
    svc_trace *recs;       /* ring_size records; seq s lives at (s - 1) % ring_size */
} ring;

static ring *rings;
static _Atomic int nrings; /* rings[0..nrings) are filled and never change */
static pthread_mutex_t add_mu = PTHREAD_MUTEX_INITIALIZER;
static int ring_size, max_skus, on_default;
static int64_t anchor_mono_us, anchor_wall_us;
static _Atomic int next_worker;
static _Thread_local int worker_index = -1;

int svc_trace_init(int enabled, int size, int skus)
{
    struct timespec ts;
    if (size < 16 || size > 65536 || skus < 1 || skus > 1024)
        return -1;
    rings = calloc((size_t)skus, sizeof *rings);
    if (rings == NULL)
        return -1;
    ring_size = size;
    max_skus = skus;
    on_default = enabled != 0;
    /* Read back to back: the two clocks' offset, good to a microsecond or
     * two, which is what lets traces of several instances be merged. */
    anchor_mono_us = lc_now_us();
    clock_gettime(CLOCK_REALTIME, &ts);
    anchor_wall_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    return 0;
}

/* The ring of sku: -1 when it has none (and create is 0, or every ring is
 * taken, or memory ran out). Lock-free when the ring exists. */
static int find_ring(const char *sku, int create)
{
    int n = atomic_load_explicit(&nrings, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (strcmp(rings[i].sku, sku) == 0)
            return i;
    if (!create || rings == NULL)
        return -1;
    int found = -1;
    SVC_PT(pthread_mutex_lock(&add_mu));
    n = atomic_load_explicit(&nrings, memory_order_relaxed);
    for (int i = 0; i < n && found < 0; i++)
        if (strcmp(rings[i].sku, sku) == 0)
            found = i;
    if (found < 0 && n < max_skus) {
        ring *g = &rings[n];
        /* calloc: a large ring is mapped lazily, pages touched as written. */
        g->recs = calloc((size_t)ring_size, sizeof *g->recs);
        if (g->recs != NULL) {
            snprintf(g->sku, sizeof g->sku, "%s", sku);
            SVC_PT(pthread_mutex_init(&g->mu, NULL));
            atomic_store_explicit(&g->last, 0, memory_order_relaxed);
            atomic_store_explicit(&nrings, n + 1, memory_order_release);
            found = n;
        }
    }
    SVC_PT(pthread_mutex_unlock(&add_mu));
    return found;
}

void svc_trace_rings(int *used, int *max)
{
    *used = atomic_load_explicit(&nrings, memory_order_acquire);
    *max = rings != NULL ? max_skus : 0;
}

void svc_trace_begin(svc_trace *t, const svc_req *r)
{
    memset(t, 0, sizeof *t);
    int want = (r->p.seen & SVC_P_TRACE) ? r->p.trace : on_default;
    if (!want || (t->sku = find_ring(r->sku, 1)) < 0)
        return;
    if (worker_index < 0)
        worker_index = atomic_fetch_add(&next_worker, 1);
    t->on = 1;
    t->worker = worker_index;
    t->mode = (int16_t)r->mode;
    t->bucket = -1;
    t->request_id = r->id;
    t->release_status = -1;
    t->t[SVC_T_RECEIVED] = r->t0_us;
    if (r->p.seen & SVC_P_USER) {
        snprintf(t->user, sizeof t->user, "%s", r->p.user);
        t->flags |= F_USER;
    }
}

void svc_trace_mark(svc_trace *t, svc_trace_point p)
{
    if (t->on && p >= 0 && p < SVC_T_COUNT)
        t->t[p] = lc_now_us();
}

void svc_trace_acquired(svc_trace *t, const char *owner_token)
{
    if (!t->on)
        return;
    svc_trace_mark(t, SVC_T_ACQUIRED);
    snprintf(t->owner, sizeof t->owner, "%s", owner_token ? owner_token : "");
}

void svc_trace_fence(svc_trace *t, long long fence)
{
    if (!t->on)
        return;
    t->fence = fence;
    t->flags |= F_FENCE;
}

void svc_trace_bucket(svc_trace *t, int b, int probes)
{
    if (!t->on)
        return;
    t->bucket = (int8_t)b;
    t->probes = (uint8_t)(probes < 255 ? probes : 255);
    for (int p = SVC_T_ACQUIRED; p <= SVC_T_RELEASED; p++)
        t->t[p] = 0;
    t->flags &= ~(unsigned)(F_READ | F_WRITTEN | F_FENCE | F_LOST | F_DELETED);
    t->owner[0] = '\0';
    t->release_status = -1;
}

void svc_trace_hops(svc_trace *t, int hops)
{
    if (t->on)
        t->hops = (uint8_t)(hops < 255 ? hops : 255);
}

void svc_trace_read(svc_trace *t, long long stock)
{
    if (!t->on)
        return;
    svc_trace_mark(t, SVC_T_READ);
    t->stock_read = stock;
    t->flags |= F_READ;
}

void svc_trace_written(svc_trace *t, long long stock)
{
    if (!t->on)
        return;
    svc_trace_mark(t, SVC_T_COMMITTED);
    t->stock_written = stock;
    t->flags |= F_WRITTEN;
}

void svc_trace_step(svc_trace *t, long long read, long long written)
{
    if (!t->on)
        return;
    svc_trace_read(t, read);
    t->t[SVC_T_COMMITTED] = t->t[SVC_T_READ];
    t->stock_written = written;
    t->flags |= F_WRITTEN;
}

void svc_trace_released(svc_trace *t, int lc_status_value)
{
    if (!t->on)
        return;
    svc_trace_mark(t, SVC_T_RELEASED);
    t->release_status = lc_status_value;
}

void svc_trace_end(svc_trace *t, const char *order_id, unsigned status, const char *error,
                   int lock_lost, int deleted_other_lock)
{
    if (!t->on)
        return;
    svc_trace_mark(t, SVC_T_RESPONDED);
    snprintf(t->order_id, sizeof t->order_id, "%s", order_id ? order_id : "");
    t->status = status;
    t->error = error;
    if (lock_lost)
        t->flags |= F_LOST;
    if (deleted_other_lock)
        t->flags |= F_DELETED;
    t->on = 0;
    ring *g = &rings[t->sku];
    SVC_PT(pthread_mutex_lock(&g->mu));
    t->seq = atomic_fetch_add_explicit(&g->last, 1, memory_order_relaxed) + 1;
    g->recs[(t->seq - 1) % (uint64_t)ring_size] = *t;
    SVC_PT(pthread_mutex_unlock(&g->mu));
}

/* A JSON string (or null for ""); only the owner token can hold bytes that
 * need escaping (the rest are validated ids). */
static void put_str(svc_buf *b, const char *key, const char *s)
{
    if (s == NULL || s[0] == '\0') {
        svc_buf_printf(b, ",\"%s\":null", key);
        return;
    }
    svc_buf_printf(b, ",\"%s\":\"", key);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            svc_buf_printf(b, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            svc_buf_printf(b, "\\u%04x", c);
        else
            svc_buf_printf(b, "%c", c);
    }
    svc_buf_printf(b, "\"");
}

static void put_time(svc_buf *b, const char *key, int64_t us)
{
    if (us > 0)
        svc_buf_printf(b, ",\"%s\":%lld", key, (long long)us);
    else
        svc_buf_printf(b, ",\"%s\":null", key);
}

static void put_record(svc_buf *b, const svc_trace *t, const char *instance)
{
    static const char *const names[SVC_T_COUNT] = {
        [SVC_T_RECEIVED] = "received_us",   [SVC_T_WAIT_START] = "wait_start_us",
        [SVC_T_ACQUIRED] = "acquired_us",   [SVC_T_READ] = "read_us",
        [SVC_T_COMMITTED] = "committed_us", [SVC_T_RELEASED] = "released_us",
        [SVC_T_RESPONDED] = "responded_us",
    };
    svc_buf_printf(b, "{\"seq\":%llu,\"request_id\":%llu", (unsigned long long)t->seq,
                   (unsigned long long)t->request_id);
    put_str(b, "instance", instance);
    svc_buf_printf(b, ",\"worker\":%d", t->worker);
    put_str(b, "order_id", t->order_id);
    put_str(b, "user", (t->flags & F_USER) ? t->user : NULL);
    put_str(b, "mode", svc_mode_name((svc_mode)t->mode));
    for (int p = 0; p < SVC_T_COUNT; p++)
        put_time(b, names[p], t->t[p]);
    if (t->flags & F_READ)
        svc_buf_printf(b, ",\"stock_read\":%lld", t->stock_read);
    else
        svc_buf_printf(b, ",\"stock_read\":null");
    if (t->flags & F_WRITTEN)
        svc_buf_printf(b, ",\"stock_written\":%lld", t->stock_written);
    else
        svc_buf_printf(b, ",\"stock_written\":null");
    put_str(b, "owner_token", t->owner);
    if (t->flags & F_FENCE)
        svc_buf_printf(b, ",\"fence\":%lld", t->fence);
    else
        svc_buf_printf(b, ",\"fence\":null");
    put_str(b, "release_status",
            t->release_status >= 0 ? lc_status_name((lc_status)t->release_status) : NULL);
    svc_buf_printf(b, ",\"lock_lost\":%s,\"deleted_other_lock\":%s,\"status\":%u",
                   (t->flags & F_LOST) ? "true" : "false",
                   (t->flags & F_DELETED) ? "true" : "false", t->status);
    put_str(b, "error", t->error);
    if (t->bucket >= 0)
        svc_buf_printf(b, ",\"bucket\":%d,\"probes\":%d,\"hops\":%d", t->bucket, t->probes,
                       t->hops);
    svc_buf_printf(b, "}\n");
}

char *svc_trace_render(const char *sku, const char *instance, int64_t since, size_t *len,
                       int *found)
{
    int i = find_ring(sku, 0);
    *found = i >= 0;
    if (i < 0)
        return NULL;
    ring *g = &rings[i];
    uint64_t from = since < 0 ? 1 : (uint64_t)since + 1;
    svc_trace *copy = NULL;
    size_t n = 0;

    SVC_PT(pthread_mutex_lock(&g->mu));
    uint64_t last = atomic_load_explicit(&g->last, memory_order_relaxed);
    uint64_t oldest = last > (uint64_t)ring_size ? last - (uint64_t)ring_size + 1 : 1;
    if (from < oldest)
        from = oldest;
    if (last >= from) {
        n = (size_t)(last - from + 1);
        copy = malloc(n * sizeof *copy);
        for (size_t k = 0; copy != NULL && k < n; k++)
            copy[k] = g->recs[(from + k - 1) % (uint64_t)ring_size];
    }
    SVC_PT(pthread_mutex_unlock(&g->mu));
    if (n > 0 && copy == NULL)
        return NULL;

    svc_buf b = {0};
    svc_buf_printf(&b, "{\"header\":true");
    put_str(&b, "sku", sku);
    put_str(&b, "instance", instance);
    svc_buf_printf(&b,
                   ",\"anchor_wall_us\":%lld,\"anchor_mono_us\":%lld,\"ring_size\":%d,"
                   "\"record_bytes\":%zu,\"oldest_seq\":%llu,\"last_seq\":%llu,\"count\":%zu}\n",
                   (long long)anchor_wall_us, (long long)anchor_mono_us, ring_size,
                   sizeof(svc_trace), (unsigned long long)(last ? oldest : 0),
                   (unsigned long long)last, n);
    for (size_t k = 0; k < n; k++)
        put_record(&b, &copy[k], instance);
    free(copy);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

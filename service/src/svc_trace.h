/* svc_trace.h — a per-purchase timeline, kept in a bounded ring per SKU
 * and served as JSON Lines by GET /trace/{sku}, so that a class can see
 * why a unit was oversold: two purchases that read the same stock value.
 *
 * A purchase fills one svc_trace on its worker's stack (svc_trace_begin,
 * then the marks as it goes) and publishes it once, with its reply
 * (svc_trace_end). Publishing takes the SKU ring's mutex for one record
 * copy; rendering takes it to copy the wanted records out, then prints
 * without it. Sequence numbers come from a C11 atomic per ring, from 1.
 *
 * Memory: at most max_skus rings, each ring_size records of
 * SVC_TRACE_REC_BYTES bytes, allocated when the SKU's first purchase is
 * traced and kept for the process. Purchases of a SKU that finds every ring
 * taken are not traced. Nothing here logs or exits.
 *
 * Times are CLOCK_MONOTONIC microseconds (lc_now_us); the rendering's
 * first line gives the anchor that turns them into wall-clock time. */
#ifndef MIAOSHA_SVC_TRACE_H
#define MIAOSHA_SVC_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "svc_reply.h"

/* The points of a purchase's timeline, in the order they happen. */
typedef enum {
    SVC_T_RECEIVED,   /* the request's head arrived (svc_req.t0_us) */
    SVC_T_WAIT_START, /* lc_acquire called (the outer lock) */
    SVC_T_ACQUIRED,   /* the outer lock held */
    SVC_T_READ,       /* GET stock answered */
    SVC_T_COMMITTED,  /* EXEC answered with every write applied */
    SVC_T_RELEASED,   /* the outer lock's release returned */
    SVC_T_RESPONDED,  /* the reply stored and handed to the HTTP thread */
    SVC_T_COUNT
} svc_trace_point;

#define SVC_TRACE_OWNER_MAX 104 /* lc_guard_owner_token: "<instance>:<uuid>" */
#define SVC_TRACE_REC_BYTES 344 /* sizeof one record (checked at compile time) */
#define SVC_TRACE_SINCE_MAX 999999999999LL

/* One purchase's record, while it runs. Opaque in use: only the functions
 * below touch it. */
typedef struct svc_trace {
    int on;  /* 0: every call below does nothing */
    int sku; /* ring index */
    uint64_t seq;
    uint64_t request_id;    /* svc_req.id */
    int64_t t[SVC_T_COUNT]; /* monotonic µs; 0 = not reached */
    long long fence;        /* fenced: the fencing token (F_FENCE) */
    long long stock_read, stock_written;
    int worker;
    int16_t mode;
    int8_t bucket;  /* the bucket of its last try; -1: the SKU's own keys */
    uint8_t probes; /* empty buckets it tried before that one */
    uint8_t hops;   /* locked buckets it passed without waiting */
    unsigned status;
    int release_status; /* lc_status of the outer release; -1 = none */
    unsigned flags;
    const char *error; /* static string or NULL */
    char order_id[SVC_UUID_LEN];
    char user[SVC_SKU_MAX + 1];
    char owner[SVC_TRACE_OWNER_MAX];
} svc_trace;

/* Sets the bounds: ring_size records per SKU (16..65536), max_skus rings
 * (1..1024), enabled = the default of ?trace=. Main thread, once, before
 * the first request; without it nothing is traced. Returns 0, or -1 on
 * bad bounds or when the ring table cannot be allocated (nothing traced
 * then; the configuration's bounds are these, so a service that passed
 * its checks only meets the second). */
int svc_trace_init(int enabled, int ring_size, int max_skus);

/* Starts r's record (r->sku, r->mode, r->p: user and ?trace= are read;
 * received = r->t0_us). t->on stays 0 when tracing is off for r or r's SKU
 * gets no ring. The worker running r. */
void svc_trace_begin(svc_trace *t, const svc_req *r);
/* The calls below, up to svc_trace_end, are made by the one thread that
 * runs the purchase (t lives on its stack); each does nothing when t->on
 * is 0, and none fails. */
/* Stamps point p with the monotonic clock now. */
void svc_trace_mark(svc_trace *t, svc_trace_point p);
/* The lock's owner/fencing token (lc_guard_owner_token), copied, cut at
 * SVC_TRACE_OWNER_MAX - 1 bytes; NULL = none. Stamps SVC_T_ACQUIRED. */
void svc_trace_acquired(svc_trace *t, const char *owner_token);
/* fenced: the fencing token the acquisition got (lc_guard_fence), the
 * number the store compares, beside the lock's owner token. */
void svc_trace_fence(svc_trace *t, long long fence);
/* A purchase of a SKU in buckets tries bucket b (0..63) after probes
 * empty ones (counted up to 255): the record names them ("bucket",
 * "probes"; "hops" comes from svc_trace_hops), and what an
 * earlier try recorded from the lock on (acquired, read, written,
 * released, owner, fence) is cleared, so the record tells the try that
 * answered. Without it the record has neither field. */
void svc_trace_bucket(svc_trace *t, int b, int probes);
/* The locked buckets a purchase of a SKU in buckets hopped past, its last
 * try's own included when that was a hop that found its lock held (up to
 * 255): the record's "hops", set once, as the purchase ends. */
void svc_trace_hops(svc_trace *t, int hops);
/* The stock value GET read (nil = 0). Stamps SVC_T_READ. */
void svc_trace_read(svc_trace *t, long long stock);
/* The stock value the committed SET wrote. Stamps SVC_T_COMMITTED. */
void svc_trace_written(svc_trace *t, long long stock);
/* A read and a write done in one atomic step (the lua mode's script, which
 * takes no lock): stamps SVC_T_READ and SVC_T_COMMITTED with one time. */
void svc_trace_step(svc_trace *t, long long read, long long written);
/* The outer release's lc_status. Stamps SVC_T_RELEASED. */
void svc_trace_released(svc_trace *t, int lc_status_value);
/* Finishes and publishes the record: order_id (the id minted before the
 * lock; "" or NULL = none yet), the reply's status and error code (static
 * string or NULL), lock_lost and deleted_other_lock (0/1). Stamps
 * SVC_T_RESPONDED. t->on is 0 afterwards. */
void svc_trace_end(svc_trace *t, const char *order_id, unsigned status, const char *error,
                   int lock_lost, int deleted_other_lock);

/* The GET /trace/{sku} body: a header line, then one JSON line per record
 * of sku with seq > since, oldest first (see service/README.md, "/trace").
 * Returns a malloc'd NUL-terminated string the caller frees, with its
 * length in *len; NULL with *found = 0 when sku was never traced, NULL
 * with *found = 1 on out of memory. Any thread; reads memory only. */
char *svc_trace_render(const char *sku, const char *instance, int64_t since, size_t *len,
                       int *found);

/* How many SKUs have a ring, and how many may (trace.max_skus): a SKU
 * that finds every ring taken is not traced until the process restarts
 * (rings are never handed back). *max 0 before svc_trace_init. Any
 * thread. */
void svc_trace_rings(int *used, int *max);

#endif

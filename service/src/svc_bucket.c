/* svc_bucket.c — stock buckets: the layout, the cache of it, the empty
 * buckets, the per-user reservation and the counters (svc_bucket.h). */
#include "svc_bucket.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_check.h"
#include "svc_keys.h"
#include "svc_scripts.h"
#include "svc_skuset.h"

/* ---- the layout itself ---- */

void svc_layout_place(const char *sku, int n, svc_slot_owner_fn owner, void *arg, svc_layout *out)
{
    SVC_ASSERT(n >= 1 && n <= SVC_BUCKETS_MAX);
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n == 1)
        return;
    int slots[SVC_BUCKETS_MAX], held[SVC_BUCKETS_MAX] = {0};
    char tag[SVC_TAG_MAX];
    for (int b = 0; b < n; b++) {
        /* 64 buckets on 16384 slots: a salt below 256 whose slot is new
         * always exists (each try collides with probability below 1/256).
         * Unknown masters rank after every known one. */
        int best = -1, best_rank = 0, best_slot = 0, best_m = -1;
        for (int salt = 0; salt < 256; salt++) {
            svc_bucket_tag(tag, sku, b, salt);
            int slot = lc_key_slot(tag, strlen(tag)), clash = 0;
            for (int k = 0; k < b && !clash; k++)
                clash = slots[k] == slot;
            if (clash)
                continue;
            int m = owner != NULL ? owner(arg, slot) : -1;
            if (m >= SVC_BUCKETS_MAX)
                m = -1;
            int rank = owner == NULL ? 0 : m < 0 ? SVC_BUCKETS_MAX + 1 : held[m];
            if (best < 0 || rank < best_rank) {
                best = salt;
                best_rank = rank;
                best_slot = slot;
                best_m = m;
            }
            if (rank == 0)
                break; /* nothing ranks lower */
        }
        SVC_ASSERT(best >= 0);
        out->salt[b] = (uint8_t)best;
        slots[b] = best_slot;
        if (best_m >= 0)
            held[best_m]++;
    }
}

long long svc_layout_share(long long stock, int n, int b)
{
    return stock / n + (b < stock % n ? 1 : 0);
}

int svc_layout_format(const svc_layout *l, char *buf, size_t len)
{
    int w = snprintf(buf, len, "%d %s ", l->n, l->id);
    for (int b = 0; b < l->n && w >= 0 && (size_t)w < len; b++)
        w += snprintf(buf + w, len - (size_t)w, "%s%u", b ? "," : "", (unsigned)l->salt[b]);
    return w >= 0 && (size_t)w < len ? 0 : -1;
}

/* Digits only, in lo..hi, ending at stop: the value, *p moved past it;
 * -1 otherwise. */
static long digits(const char **p, long lo, long hi, char stop)
{
    const char *s = *p;
    long v = 0;
    int nd = 0;
    for (; *s >= '0' && *s <= '9' && nd < 4; s++, nd++)
        v = v * 10 + (*s - '0');
    if (nd == 0 || *s != stop || v < lo || v > hi || (nd > 1 && **p == '0'))
        return -1;
    *p = s;
    return v;
}

int svc_layout_parse(const char *v, svc_layout *out)
{
    svc_layout l;
    memset(&l, 0, sizeof l);
    const char *p = v;
    long n = digits(&p, 2, SVC_BUCKETS_MAX, ' ');
    if (n < 0)
        return -1;
    l.n = (int)n;
    p++;
    size_t idn = 0;
    for (; *p != ' ' && *p != '\0'; p++, idn++) {
        int ok = (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || *p == '-';
        if (!ok || idn + 1 >= sizeof l.id)
            return -1;
        l.id[idn] = *p;
    }
    if (idn == 0 || *p != ' ')
        return -1;
    p++;
    for (int b = 0; b < l.n; b++) {
        long s = digits(&p, 0, 255, b + 1 < l.n ? ',' : '\0');
        if (s < 0)
            return -1;
        l.salt[b] = (uint8_t)s;
        if (b + 1 < l.n)
            p++;
    }
    *out = l;
    return 0;
}

void svc_layout_tag(const svc_layout *l, const char *sku, int b, char *tag)
{
    if (l->n <= 1)
        snprintf(tag, SVC_TAG_MAX, "%s", sku);
    else
        svc_bucket_tag(tag, sku, b, l->salt[b]);
}

int svc_bucket_next(int n, uint64_t skip, int after, uint64_t r)
{
    int open = 0;
    for (int b = 0; b < n; b++)
        open += !(skip >> b & 1u);
    if (open == 0)
        return -1;
    if (after < 0) {
        int k = (int)(r % (uint64_t)open);
        for (int b = 0; b < n; b++)
            if (!(skip >> b & 1u) && k-- == 0)
                return b;
    }
    for (int i = 1; i <= n; i++) {
        int b = (after + i) % n;
        if (!(skip >> b & 1u))
            return b;
    }
    return -1;
}

uint64_t svc_bucket_rand(void)
{
    static _Thread_local uint64_t x;
    if (x == 0)
        x = (((uint64_t)lc_now_us() * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uintptr_t)&x) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

static unsigned fnv(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

int svc_bucket_home(const char *user, int n)
{
    return n > 1 ? (int)(fnv(user) % (unsigned)n) : 0;
}

/* ---- the cache ---- */

/* Each SKU's layout and empty buckets, at its index in the set of SKUs
 * seen (svc_skuset.h: lookups take no lock); its mutex guards the rest and
 * is initialised before the index is published. */
typedef struct entry {
    pthread_mutex_t mu;
    uint64_t gen; /* bumped by every reset seen */
    bool known;   /* lay holds the layout for gen */
    svc_layout lay;
    uint64_t empty; /* buckets known empty under gen */
    /* This instance's own claims and holds: when each hinted mode's mark
     * on each bucket ends (lc_now_us µs), 0 when there is none. */
    _Atomic int64_t held_until[LC_MODE_COUNT][SVC_BUCKETS_MAX];
    atomic_uint releases;   /* marks ended here so far (releases, failed
                               tries, resets) */
    atomic_int sleepers;    /* purchases in svc_bucket_wait_here */
    pthread_cond_t release; /* signalled when a mark ends while one sleeps */
} entry;

static entry table[SVC_BUCKET_SKUS];
static svc_skuset_slot names[SVC_BUCKET_SKUS];
static svc_skuset skus = SVC_SKUSET_INIT(names, SVC_BUCKET_SKUS);

static entry *find(const char *sku)
{
    int i = svc_skuset_find(&skus, sku);
    return i >= 0 ? &table[i] : NULL;
}

static void init_entry(int i, void *arg)
{
    (void)arg;
    pthread_condattr_t ca;
    SVC_PT(pthread_mutex_init(&table[i].mu, NULL));
    SVC_PT(pthread_condattr_init(&ca));
    SVC_PT(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC)); /* lc_now_us's clock */
    SVC_PT(pthread_cond_init(&table[i].release, &ca));
    SVC_PT(pthread_condattr_destroy(&ca));
}

static entry *find_or_add(const char *sku)
{
    int i = svc_skuset_add(&skus, sku, init_entry, NULL);
    return i >= 0 ? &table[i] : NULL; /* NULL: the set is full */
}

/* GET miaosha:{sku}:layout into *out (nil: one bucket). 0, or with err
 * -1 (no reply) or -2 (an error, or not a layout record). */
static int read_record(lc_conn *conn, const char *sku, svc_layout *out, char *err, size_t len)
{
    char key[SVC_KEY_MAX];
    svc_key(key, sku, "layout");
    lc_pipe p;
    lc_pipe_init(&p);
    lc_status st = lc_pipe_append(&p, "GET %s", key);
    if (st == LC_OK)
        (void)lc_conn_pipe(conn, &p); /* a missing reply is seen below */
    redisReply *rep = st == LC_OK ? lc_pipe_take(&p, 0) : NULL;
    lc_pipe_clear(&p);
    int rc = -1;
    if (rep == NULL) {
        snprintf(err, len, "reading the layout of sku %s: %.200s", sku,
                 st != LC_OK               ? "out of memory"
                 : lc_conn_errstr(conn)[0] ? lc_conn_errstr(conn)
                                           : "no reply");
    } else if (rep->type == REDIS_REPLY_NIL) {
        rc = 0;
        memset(out, 0, sizeof *out);
        out->n = 1;
    } else if (rep->type == REDIS_REPLY_STRING && svc_layout_parse(rep->str, out) == 0) {
        rc = 0;
    } else {
        rc = -2;
        snprintf(err, len, "the layout record %s: %.200s", key,
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "not a layout written by PUT /stock");
    }
    freeReplyObject(rep);
    return rc;
}

int svc_bucket_layout(lc_conn *conn, const char *sku, svc_layout *out, uint64_t *gen, char *err,
                      size_t len)
{
    entry *e = find_or_add(sku);
    uint64_t g = 0;
    if (e != NULL) {
        SVC_PT(pthread_mutex_lock(&e->mu));
        g = e->gen;
        bool known = e->known;
        if (known)
            *out = e->lay;
        SVC_PT(pthread_mutex_unlock(&e->mu));
        if (known) {
            *gen = g;
            return 0;
        }
    }
    int rc = read_record(conn, sku, out, err, len);
    if (rc != 0)
        return rc;
    if (e != NULL) {
        /* A reset seen while the GET travelled has the newer layout. */
        SVC_PT(pthread_mutex_lock(&e->mu));
        if (e->gen == g && !e->known) {
            e->lay = *out;
            e->known = true;
        }
        SVC_PT(pthread_mutex_unlock(&e->mu));
    }
    *gen = g;
    return 0;
}

int svc_bucket_known(const char *sku, svc_layout *out)
{
    entry *e = find(sku);
    if (e == NULL)
        return 0;
    SVC_PT(pthread_mutex_lock(&e->mu));
    bool known = e->known;
    if (known)
        *out = e->lay;
    SVC_PT(pthread_mutex_unlock(&e->mu));
    return known;
}

static void wake(entry *e, bool all);
static bool same_layout(const svc_layout *a, const svc_layout *b);

static void learn(entry *e, const svc_layout *l)
{
    SVC_PT(pthread_mutex_lock(&e->mu));
    /* the notice of a reset this instance already learnt (its own PUT) */
    bool again = l != NULL && l->n > 1 && e->known && same_layout(&e->lay, l);
    e->gen++;
    e->empty = 0;
    e->known = l != NULL;
    if (l != NULL)
        e->lay = *l;
    SVC_PT(pthread_mutex_unlock(&e->mu));
    if (again)
        return; /* the marks set since stand for locks taken after it */
    /* The reset deleted every lock (and a new layout renames the buckets):
     * this instance's marks stand for nothing now. */
    for (int m = 0; m < LC_MODE_COUNT; m++)
        for (int b = 0; b < SVC_BUCKETS_MAX; b++)
            atomic_store_explicit(&e->held_until[m][b], 0, memory_order_relaxed);
    wake(e, true);
}

void svc_bucket_learn(const char *sku, const svc_layout *l)
{
    /* Added even when unknown: a purchase that read before this reset and
     * marks after it must find the generation moved. */
    entry *e = find_or_add(sku);
    if (e != NULL)
        learn(e, l);
}

void svc_bucket_forget_all(void)
{
    for (int i = 0; i < SVC_BUCKET_SKUS; i++)
        if (svc_skuset_name(&skus, i) != NULL)
            learn(&table[i], NULL);
}

uint64_t svc_bucket_empty(const char *sku, uint64_t gen)
{
    entry *e = find(sku);
    if (e == NULL)
        return 0;
    SVC_PT(pthread_mutex_lock(&e->mu));
    uint64_t m = e->gen == gen ? e->empty : 0;
    SVC_PT(pthread_mutex_unlock(&e->mu));
    return m;
}

void svc_bucket_mark_empty(const char *sku, uint64_t gen, int b)
{
    entry *e = find(sku);
    if (e == NULL || b < 0 || b >= SVC_BUCKETS_MAX)
        return;
    SVC_PT(pthread_mutex_lock(&e->mu));
    if (e->gen == gen)
        e->empty |= (uint64_t)1 << b;
    SVC_PT(pthread_mutex_unlock(&e->mu));
}

/* ---- this instance's own holds ---- */

/* A mark of e ended: counted, and one sleeper woken (every one: all). */
static void wake(entry *e, bool all)
{
    atomic_fetch_add(&e->releases, 1);
    if (atomic_load(&e->sleepers) > 0) {
        SVC_PT(pthread_mutex_lock(&e->mu));
        if (all)
            SVC_PT(pthread_cond_broadcast(&e->release));
        else
            SVC_PT(pthread_cond_signal(&e->release));
        SVC_PT(pthread_mutex_unlock(&e->mu));
    }
}

bool svc_bucket_hint_mode(lc_mode mode)
{
    const lc_mode_info *mi = lc_mode_info_of(mode);
    return mi != NULL && mi->fixed_lease && mi->polls;
}

/* sku's entry when mode is hinted and b a bucket, with *m its mark there;
 * else NULL. */
static entry *mark_of(const char *sku, lc_mode mode, int b, _Atomic int64_t **m)
{
    entry *e = svc_bucket_hint_mode(mode) && b >= 0 && b < SVC_BUCKETS_MAX ? find(sku) : NULL;
    if (e != NULL)
        *m = &e->held_until[mode][b];
    return e;
}

void svc_bucket_hold(const char *sku, lc_mode mode, int b, bool held, int64_t until_us)
{
    _Atomic int64_t *m;
    entry *e = mark_of(sku, mode, b, &m);
    if (e == NULL || until_us <= 0)
        return;
    if (held) {
        atomic_store(m, until_us);
        return;
    }
    /* Only our own mark: after an expired lease a later holder's may be
     * there already. Unless our lease had run out: then our release (setnx's
     * plain DEL) may have deleted that later holder's lock, and its mark
     * would stand for a lock that is gone. */
    int64_t mine = until_us;
    if (!atomic_compare_exchange_strong(m, &mine, 0)) {
        if (until_us > lc_now_us() || mine == 0)
            return;
        atomic_store(m, 0);
    }
    wake(e, false);
}

void svc_bucket_unclaim(const char *sku, lc_mode mode, int b, int64_t until_us)
{
    _Atomic int64_t *m;
    entry *e = mark_of(sku, mode, b, &m);
    int64_t mine = until_us;
    if (e != NULL && atomic_compare_exchange_strong(m, &mine, 0))
        wake(e, false);
}

bool svc_bucket_claim(const char *sku, lc_mode mode, int b, int64_t until_us)
{
    _Atomic int64_t *m;
    if (mark_of(sku, mode, b, &m) == NULL)
        return false;
    int64_t old = atomic_load(m);
    /* never over another's live claim or hold: its end would clear ours */
    return old <= lc_now_us() && atomic_compare_exchange_strong(m, &old, until_us);
}

uint64_t svc_bucket_held_here(const char *sku, lc_mode mode, int n, int64_t now_us, unsigned *since,
                              int64_t *first_end_us)
{
    entry *e = svc_bucket_hint_mode(mode) ? find(sku) : NULL;
    unsigned seen = e != NULL ? atomic_load(&e->releases) : 0;
    int64_t first = 0;
    uint64_t here = 0;
    for (int b = 0; e != NULL && b < n && b < SVC_BUCKETS_MAX; b++) {
        int64_t until = atomic_load_explicit(&e->held_until[mode][b], memory_order_relaxed);
        if (until > now_us) {
            here |= (uint64_t)1 << b;
            if (first == 0 || until < first)
                first = until;
        }
    }
    if (since != NULL)
        *since = seen;
    if (first_end_us != NULL)
        *first_end_us = first;
    return here;
}

int svc_bucket_wait_here(const char *sku, unsigned since, int64_t until_us,
                         const atomic_int *cancel)
{
    entry *e = find(sku);
    if (e == NULL)
        return 0;
    int rc = 0;
    SVC_PT(pthread_mutex_lock(&e->mu));
    atomic_fetch_add(&e->sleepers, 1);
    for (;;) {
        if (cancel != NULL && atomic_load(cancel)) {
            rc = -1;
            break;
        }
        int64_t now = lc_now_us();
        if (atomic_load(&e->releases) != since || now >= until_us)
            break;
        int64_t to = until_us;
        if (cancel != NULL && to - now > LC_CANCEL_LATENCY_MS * 1000LL)
            to = now + LC_CANCEL_LATENCY_MS * 1000LL;
        struct timespec ts = {.tv_sec = to / 1000000, .tv_nsec = (to % 1000000) * 1000};
        int w = pthread_cond_timedwait(&e->release, &e->mu, &ts);
        SVC_ASSERT(w == 0 || w == ETIMEDOUT);
    }
    atomic_fetch_sub(&e->sleepers, 1);
    SVC_PT(pthread_mutex_unlock(&e->mu));
    return rc;
}

static bool same_layout(const svc_layout *a, const svc_layout *b)
{
    if (a->n != b->n)
        return false;
    /* the SKU's own keys: no record, no id, no salt that means anything */
    return a->n == 1 || (strcmp(a->id, b->id) == 0 && memcmp(a->salt, b->salt, (size_t)a->n) == 0);
}

int svc_bucket_recheck(lc_conn *conn, const char *sku, svc_layout *l, uint64_t *gen, char *err,
                       size_t len)
{
    svc_layout now;
    int rc = read_record(conn, sku, &now, err, len);
    if (rc != 0)
        return rc;
    if (same_layout(&now, l))
        return 0;
    entry *e = find_or_add(sku);
    uint64_t g = 0;
    if (e != NULL) {
        learn(e, &now);
        SVC_PT(pthread_mutex_lock(&e->mu));
        g = e->gen;
        SVC_PT(pthread_mutex_unlock(&e->mu));
    }
    *l = now;
    *gen = g;
    return 1;
}

int svc_bucket_search_end(lc_conn *conn, const char *sku, svc_layout *l, uint64_t *gen, bool gone,
                          char *detail, size_t len)
{
    int rc = svc_bucket_recheck(conn, sku, l, gen, detail, len);
    if (rc < 0)
        return rc;
    if (rc == 0 && !gone) {
        detail[0] = '\0'; /* what the last try left is not this ending's */
        return 0;
    }
    snprintf(detail, len, "%s", rc == 1 ? SVC_BUCKET_RESET_UNLEARNT : SVC_BUCKET_RESET_UNDER_WAY);
    return 1;
}

bool svc_bucket_unsplit_reset(lc_conn *conn, const char *sku, svc_layout *l, uint64_t *gen)
{
    SVC_ASSERT(l->n == 1);
    char why[LC_ERRSTR_LEN + 64];
    return svc_bucket_search_end(conn, sku, l, gen, false, why, sizeof why) == 1;
}

/* ---- one buy per user ---- */

/* One call of reserve.lua on conn (arg2 NULL: left out): its reply (the
 * caller frees it), or NULL with err set. EVALSHA first; NOSCRIPT (a
 * flushed cache: nothing ran) sends its text. */
static redisReply *reserve_call(lc_conn *conn, const char *const *keys, const char *user,
                                const char *op, const char *arg, const char *arg2, char *err,
                                size_t len)
{
    redisReply *rep = NULL;
    for (int eval = 0; eval < 2; eval++) {
        const char *argv[] = {eval ? "EVAL" : "EVALSHA",
                              eval ? SVC_SCRIPT_RESERVE : SVC_SCRIPT_RESERVE_SHA,
                              "2",
                              keys[0],
                              keys[1],
                              user,
                              op,
                              arg,
                              arg2};
        int argc = (int)(sizeof argv / sizeof argv[0]) - (arg2 == NULL);
        lc_pipe p;
        lc_pipe_init(&p);
        lc_status st = lc_pipe_append_argv(&p, argc, argv, NULL);
        if (st == LC_OK)
            (void)lc_conn_pipe(conn, &p); /* a missing reply is seen below */
        rep = st == LC_OK ? lc_pipe_take(&p, 0) : NULL;
        lc_pipe_clear(&p);
        if (rep == NULL) {
            snprintf(err, len, "%.200s",
                     st != LC_OK               ? "out of memory"
                     : lc_conn_errstr(conn)[0] ? lc_conn_errstr(conn)
                                               : "no reply");
            return NULL;
        }
        if (rep->type != REDIS_REPLY_ERROR || strncmp(rep->str, "NOSCRIPT", 8) != 0)
            return rep;
        freeReplyObject(rep);
    }
    snprintf(err, len, "NOSCRIPT after EVAL");
    return NULL;
}

static void home_keys(const char *sku, const svc_layout *l, int home, char *reserved, char *epoch)
{
    char tag[SVC_TAG_MAX];
    svc_layout_tag(l, sku, home, tag);
    svc_key(reserved, tag, "reserved");
    svc_key(epoch, tag, "epoch");
}

int svc_bucket_reserve(lc_conn *conn, const char *sku, const svc_layout *l, const char *user,
                       long long limit, svc_reservation *rv, long long *held, char *err, size_t len)
{
    char reserved[SVC_KEY_MAX], epoch[SVC_KEY_MAX], lim[24];
    memset(rv, 0, sizeof *rv);
    rv->home = svc_bucket_home(user, l->n);
    home_keys(sku, l, rv->home, reserved, epoch);
    snprintf(lim, sizeof lim, "%lld", limit);
    const char *keys[] = {reserved, epoch};
    char why[256];
    redisReply *rep = reserve_call(conn, keys, user, "+", lim, l->id, why, sizeof why);
    int rc = -1;
    if (rep == NULL) {
        snprintf(err, len, "reserving the purchase of user %s: %s", user, why);
    } else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 &&
               rep->element[0]->type == REDIS_REPLY_INTEGER && rep->element[0]->integer == 3) {
        /* The home bucket was written by another reset than the one whose
         * layout this instance follows: that layout is stale (the reset's
         * notice is on its way) — the record read again puts the new one
         * in the cache — or a reset is rewriting the buckets, or they were
         * written by an earlier miaosha (the record unchanged: the cache
         * and its empty buckets stay). */
        svc_layout cur = *l;
        uint64_t gen = 0;
        char why2[200];
        (void)svc_bucket_recheck(conn, sku, &cur, &gen, why2, sizeof why2);
        snprintf(err, len, "%s", SVC_BUCKET_RESET_UNLEARNT);
        rc = 2;
    } else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 &&
               rep->element[0]->type == REDIS_REPLY_INTEGER &&
               rep->element[1]->type == REDIS_REPLY_INTEGER &&
               rep->element[2]->type == REDIS_REPLY_STRING) {
        *held = rep->element[1]->integer;
        rc = rep->element[0]->integer == 1 ? 1 : 0;
        rv->held = rc == 1;
        snprintf(rv->epoch, sizeof rv->epoch, "%s", rep->element[2]->str);
        if (rc == 0)
            snprintf(err, len,
                     "user %s already holds %lld order(s) or reservation(s) of this sku (a "
                     "reservation: a purchase of theirs under way, or one that ended before "
                     "writing its order; purchase.limit_per_user = %lld); nothing was written",
                     user, *held, limit);
    } else {
        snprintf(err, len, "reserving the purchase of user %s: %.200s", user,
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
    }
    freeReplyObject(rep);
    return rc;
}

void svc_bucket_unreserve(lc_conn *conn, const char *sku, const svc_layout *l, const char *user,
                          svc_reservation *rv)
{
    if (!rv->held)
        return;
    rv->held = false;
    char reserved[SVC_KEY_MAX], epoch[SVC_KEY_MAX], why[256];
    home_keys(sku, l, rv->home, reserved, epoch);
    const char *keys[] = {reserved, epoch};
    redisReply *rep = reserve_call(conn, keys, user, "-", rv->epoch, NULL, why, sizeof why);
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY)
        svc_log(SVC_WARN,
                "sku %s: the reservation of user %s could not be given back (%s); the user is "
                "refused until the next stock reset",
                sku, user, rep != NULL && rep->type == REDIS_REPLY_ERROR ? rep->str : why);
    freeReplyObject(rep);
}

/* ---- counters ---- */

#define STATS_SKUS 64

typedef struct stats_entry {
    _Atomic int state;
    char sku[SVC_SKU_MAX + 1];
    _Atomic int n; /* the most buckets it had: the array's length */
    _Atomic uint64_t sold[SVC_BUCKETS_MAX];
    _Atomic uint64_t probes, hops;
} stats_entry;

static stats_entry stats[STATS_SKUS];
static _Atomic int nstats;
static _Atomic uint64_t all_probes, all_hops, all_rechecks;
static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;

static stats_entry *stats_of(const char *sku)
{
    int n = atomic_load_explicit(&nstats, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (strcmp(stats[i].sku, sku) == 0)
            return &stats[i];
    stats_entry *e = NULL;
    SVC_PT(pthread_mutex_lock(&stats_mu));
    n = atomic_load_explicit(&nstats, memory_order_relaxed);
    for (int i = 0; i < n && e == NULL; i++)
        if (strcmp(stats[i].sku, sku) == 0)
            e = &stats[i];
    if (e == NULL && n < STATS_SKUS && strlen(sku) <= SVC_SKU_MAX) {
        e = &stats[n];
        strcpy(e->sku, sku);
        atomic_store_explicit(&nstats, n + 1, memory_order_release);
    }
    SVC_PT(pthread_mutex_unlock(&stats_mu));
    return e;
}

void svc_bucket_count(const char *sku, int n, int b, bool sold, int probes, int hops)
{
    atomic_fetch_add_explicit(&all_probes, (uint64_t)probes, memory_order_relaxed);
    atomic_fetch_add_explicit(&all_hops, (uint64_t)hops, memory_order_relaxed);
    stats_entry *e = stats_of(sku);
    if (e == NULL || n > SVC_BUCKETS_MAX)
        return;
    int had = atomic_load(&e->n);
    while (n > had && !atomic_compare_exchange_weak(&e->n, &had, n)) {
    }
    atomic_fetch_add_explicit(&e->probes, (uint64_t)probes, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->hops, (uint64_t)hops, memory_order_relaxed);
    if (b < 0 || b >= n)
        return;
    if (sold)
        atomic_fetch_add_explicit(&e->sold[b], 1, memory_order_relaxed);
}

void svc_bucket_count_recheck(void)
{
    atomic_fetch_add_explicit(&all_rechecks, 1, memory_order_relaxed);
}

void svc_bucket_stats_json(svc_buf *b)
{
    svc_buf_printf(b, ",\"buckets\":{\"probes\":%llu,\"hops\":%llu,\"rechecks\":%llu,\"skus\":{",
                   (unsigned long long)atomic_load(&all_probes),
                   (unsigned long long)atomic_load(&all_hops),
                   (unsigned long long)atomic_load(&all_rechecks));
    int n = atomic_load_explicit(&nstats, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        stats_entry *e = &stats[i];
        /* the SKU is a validated id: nothing to escape */
        svc_buf_printf(b, "%s\"%s\":{\"sold\":[", i ? "," : "", e->sku);
        int k = atomic_load(&e->n);
        for (int j = 0; j < k; j++)
            svc_buf_printf(b, "%s%llu", j ? "," : "", (unsigned long long)atomic_load(&e->sold[j]));
        svc_buf_printf(b, "],\"probes\":%llu,\"hops\":%llu}",
                       (unsigned long long)atomic_load(&e->probes),
                       (unsigned long long)atomic_load(&e->hops));
    }
    svc_buf_printf(b, "}}");
}

void svc_bucket_totals(uint64_t *probes, uint64_t *hops, uint64_t *rechecks)
{
    *probes = atomic_load_explicit(&all_probes, memory_order_relaxed);
    *hops = atomic_load_explicit(&all_hops, memory_order_relaxed);
    *rechecks = atomic_load_explicit(&all_rechecks, memory_order_relaxed);
}

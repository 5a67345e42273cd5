/* svc_step.c — stepped purchases (svc_step.h).
 *
 * One table of 2 x teach.max_steps places under one mutex; at most
 * teach.max_steps of them hold a running step, the rest keep finished ones
 * for GET /steps until their place is needed (the oldest finished goes
 * first). A step is, at every moment, exactly one of: paused at a stage
 * (waiting for next/run), moving (told to go on, not arrived yet: a lock
 * wait, a round trip) or done. One condition variable on the monotonic
 * clock tells every waiter — paused steps and the next/run calls waiting
 * for them — that some step changed; with at most a few dozen waiters, a
 * broadcast costs less than keeping one per step.
 *
 * Waits are cut into slices of at most SLICE_US so that SIGTERM (which
 * raises a flag, not this condition) ends them within a slice.
 */
#include "svc_step.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_check.h"
#include "svc_keys.h"
#include "svc_shutdown.h"
#include "svc_stats.h"

#define SLICE_US 100000           /* longest single wait: SIGTERM's latency */
#define NEXT_WAIT_MS_DEFAULT 1000 /* next and run without ?wait_ms= */

struct svc_step {
    uint64_t id;      /* 0: a free place */
    bool live;        /* its thread runs */
    svc_req *r;       /* live: its purchase's request (the thread's) */
    svc_job_fn job;   /* what the thread runs once told to leave start */
    svc_mode mode;    /* the fields below are copies: r is the thread's */
    bool locked_mode; /* a lock mode: every stage; lua: start → done */
    char sku[SVC_SKU_MAX + 1];
    char user[SVC_SKU_MAX + 1]; /* "" = none */

    svc_stage stage; /* the last stage reached */
    bool paused;     /* waiting at stage for next/run */
    bool moving;     /* told to go on, not arrived yet */
    bool go;         /* next/run let it go: the pause ends */
    bool run_all;    /* run: pause nowhere any more */
    bool abandoned;  /* left paused for teach.step_timeout_s */
    bool ending;     /* SIGTERM ended a pause */
    int64_t touched_us, paused_us;
    int64_t at_us[SVC_STAGE_COUNT]; /* when each stage was reached; 0 = not */
    int64_t left_start_us;          /* when it was let go from start */

    svc_step_facts f;
    char error[32];  /* f.error, copied (the done reply's is not static) */
    unsigned status; /* done: the reply's HTTP status */
    char *reply;     /* done: the reply's body (malloc'd) */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static svc_step *places;
static int nplaces, max_live, nlive;
static int64_t timeout_us;
static uint64_t last_id;
static const cfg_config *S;
static lc_client *client;
static svc_pool_done_fn done_fn;
static _Thread_local svc_step *self;

static const char *const stage_names[SVC_STAGE_COUNT] = {
    "start", "locked", "read", "written", "released", "done",
};

const char *svc_stage_name(svc_stage stage)
{
    return stage >= 0 && stage < SVC_STAGE_COUNT ? stage_names[stage] : "?";
}

int svc_step_init(const cfg_config *s, lc_client *c, svc_pool_done_fn done, char *err,
                  size_t errlen)
{
    pthread_condattr_t a;
    SVC_PT(pthread_condattr_init(&a));
    SVC_PT(pthread_condattr_setclock(&a, CLOCK_MONOTONIC)); /* lc_now_us's clock */
    SVC_PT(pthread_cond_init(&cv, &a));
    SVC_PT(pthread_condattr_destroy(&a));
    S = s;
    client = c;
    done_fn = done;
    max_live = s->teach.max_steps;
    nplaces = 2 * max_live;
    timeout_us = (int64_t)s->teach.step_timeout_s * 1000000;
    places = calloc((size_t)nplaces, sizeof *places);
    if (places == NULL) {
        snprintf(err, errlen, "stepped purchases: out of memory");
        return -1;
    }
    return 0;
}

void svc_step_free(void)
{
    SVC_PT(pthread_mutex_lock(&mu));
    svc_step *p = nlive == 0 ? places : NULL;
    if (p != NULL)
        places = NULL;
    SVC_PT(pthread_mutex_unlock(&mu));
    if (p == NULL)
        return;
    for (int i = 0; i < nplaces; i++)
        free(p[i].reply);
    free(p);
}

/* ---- the table (callers hold mu) ---- */

static svc_step *find(uint64_t id)
{
    for (int i = 0; places != NULL && id != 0 && i < nplaces; i++)
        if (places[i].id == id)
            return &places[i];
    return NULL;
}

/* Waits on cv until deadline_us (lc_now_us clock) at the latest, and at
 * most one slice. */
static void wait_until(int64_t deadline_us)
{
    int64_t now = lc_now_us(), until = deadline_us < now + SLICE_US ? deadline_us : now + SLICE_US;
    struct timespec ts = {(time_t)(until / 1000000), (long)(until % 1000000) * 1000};
    int rc = pthread_cond_timedwait(&cv, &mu, &ts);
    SVC_ASSERT(rc == 0 || rc == ETIMEDOUT);
}

svc_step *svc_step_reserve(const svc_req *r)
{
    SVC_PT(pthread_mutex_lock(&mu));
    svc_step *st = NULL;
    for (int i = 0; places != NULL && nlive < max_live && i < nplaces; i++) {
        svc_step *p = &places[i];
        if (p->id == 0) {
            st = p;
            break;
        }
        if (!p->live && (st == NULL || p->id < st->id))
            st = p; /* the oldest finished, unless a free place comes */
    }
    if (st != NULL) {
        free(st->reply);
        memset(st, 0, sizeof *st);
        st->id = ++last_id;
        st->live = true;
        nlive++;
        st->mode = r->mode;
        st->locked_mode = svc_mode_lock(r->mode) != NULL;
        snprintf(st->sku, sizeof st->sku, "%s", r->sku);
        snprintf(st->user, sizeof st->user, "%s", (r->p.seen & SVC_P_USER) ? r->p.user : "");
        /* at start from now on: a next may come before its thread does */
        st->stage = SVC_STAGE_START;
        st->paused = true;
        st->touched_us = st->paused_us = st->at_us[SVC_STAGE_START] = lc_now_us();
        SVC_PT(pthread_cond_broadcast(&cv));
    }
    SVC_PT(pthread_mutex_unlock(&mu));
    return st;
}

int svc_step_exists(uint64_t id)
{
    SVC_PT(pthread_mutex_lock(&mu));
    int yes = find(id) != NULL;
    SVC_PT(pthread_mutex_unlock(&mu));
    return yes;
}

svc_step *svc_step_self(void)
{
    return self;
}

/* ---- a step's own thread ---- */

/* Records the arrival at stage with f (NULL: no new fact). */
static void arrive(svc_step *st, svc_stage stage, const svc_step_facts *f)
{
    if (f != NULL) {
        st->f.holds_lock = f->holds_lock;
        st->f.lease_gone_us = f->lease_gone_us;
        if (f->has_read) {
            st->f.has_read = true;
            st->f.read = f->read;
        }
        if (f->has_written) {
            st->f.has_written = true;
            st->f.written = f->written;
        }
        if (f->fence > 0)
            st->f.fence = f->fence;
        st->f.lock_lost |= f->lock_lost;
        st->f.deleted_other_lock |= f->deleted_other_lock;
        if (f->error != NULL)
            snprintf(st->error, sizeof st->error, "%s", f->error);
    }
    st->stage = stage;
    st->at_us[stage] = lc_now_us();
    st->moving = false;
}

/* The pause at st->stage: until next/run lets it go (true), or it is
 * abandoned or SIGTERM comes (false, *why set). Holds mu. */
static bool wait_to_go(svc_step *st, purchase_result *why)
{
    bool ok = true;
    if (st->abandoned || st->ending) {
        *why = st->abandoned ? PR_STEP_ABANDONED : PR_SHUTTING_DOWN;
        ok = false;
    } else if (!st->run_all) {
        if (!st->paused) {
            st->paused = true;
            st->paused_us = lc_now_us();
            SVC_PT(pthread_cond_broadcast(&cv));
        }
        while (!st->go) {
            if (svc_shutting_down()) {
                st->ending = true;
                *why = PR_SHUTTING_DOWN;
                ok = false;
                break;
            }
            int64_t from = st->touched_us > st->paused_us ? st->touched_us : st->paused_us;
            if (lc_now_us() >= from + timeout_us) {
                st->abandoned = true;
                *why = PR_STEP_ABANDONED;
                ok = false;
                break;
            }
            wait_until(from + timeout_us);
        }
    }
    if (ok && st->stage == SVC_STAGE_START)
        st->left_start_us = lc_now_us();
    st->go = false;
    st->paused = false;
    st->moving = true; /* on to the next stage, or to done when it ended here */
    SVC_PT(pthread_cond_broadcast(&cv));
    return ok;
}

bool svc_step_pause(svc_step *st, svc_stage stage, const svc_step_facts *f, purchase_result *why)
{
    SVC_ASSERT(stage > SVC_STAGE_START && stage < SVC_STAGE_DONE);
    SVC_PT(pthread_mutex_lock(&mu));
    arrive(st, stage, f);
    bool ok = wait_to_go(st, why);
    SVC_PT(pthread_mutex_unlock(&mu));
    return ok;
}

/* A step ended at start answers itself: nothing was tried. */
static void answer_unstarted(const svc_step *st, svc_req *r, purchase_result why)
{
    char detail[200];
    if (why == PR_STEP_ABANDONED)
        snprintf(detail, sizeof detail,
                 "stepped purchase left at stage start for %d s (teach.step_timeout_s); nothing "
                 "was done",
                 S->teach.step_timeout_s);
    else
        snprintf(detail, sizeof detail, "server shutting down; nothing was done");
    /* The shape of every purchase's reply (svc_order.h): nothing ran, so
     * nothing rode anywhere. */
    cJSON *extra = cJSON_CreateObject();
    if (extra != NULL) {
        cJSON_AddStringToObject(extra, "mode", svc_mode_name(st->mode));
        cJSON_AddBoolToObject(extra, "pipeline", 0);
        cJSON_AddStringToObject(extra, "sku", st->sku);
        cJSON_AddStringToObject(extra, "instance", S->instance_id);
    }
    svc_reply_error(r, svc_result[why].status, svc_result[why].error, detail, extra);
    svc_stats_purchase(r->mode, svc_stats_sku_slot(r->sku), svc_result[why].out, 0, 0,
                       lc_now_us() - r->t0_us, -1);
}

/* The value of "key": in reply, a body cJSON printed unformatted (a quote
 * inside a string is escaped, so the first match is the member): a
 * pointer just past the colon, or NULL. */
static const char *member_of(const char *reply, const char *key)
{
    char pat[40];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = reply != NULL ? strstr(reply, pat) : NULL;
    return at != NULL ? at + strlen(pat) : NULL;
}

/* Done: what the reply says, kept for GET /steps. */
static void finish(svc_step *st, const svc_req *r)
{
    char *copy = NULL;
    if (r->resp != NULL && (copy = malloc(r->resp_len + 1)) != NULL) {
        memcpy(copy, r->resp, r->resp_len);
        copy[r->resp_len] = '\0';
    }
    const char *err = member_of(copy, "error"), *left = member_of(copy, "stock_left");
    const char *lost = member_of(copy, "lock_lost");
    SVC_PT(pthread_mutex_lock(&mu));
    st->status = r->status ? r->status : 503;
    st->reply = copy;
    if (err != NULL && *err == '"')
        snprintf(st->error, sizeof st->error, "%.*s", (int)strcspn(err + 1, "\""), err + 1);
    if (lost != NULL && strncmp(lost, "true", 4) == 0)
        st->f.lock_lost = true;
    if (!st->locked_mode && st->status == 200 && left != NULL) {
        /* lua's script read stock_left + 1 and wrote stock_left, in one step */
        st->f.has_read = st->f.has_written = true;
        st->f.written = strtoll(left, NULL, 10);
        st->f.read = st->f.written + 1;
    }
    st->f.holds_lock = false;
    arrive(st, SVC_STAGE_DONE, NULL);
    if (!st->locked_mode && st->f.has_read)
        st->at_us[SVC_STAGE_READ] = st->at_us[SVC_STAGE_WRITTEN] = st->at_us[SVC_STAGE_DONE];
    st->paused = false;
    st->live = false;
    st->r = NULL;
    nlive--;
    SVC_PT(pthread_cond_broadcast(&cv));
    SVC_PT(pthread_mutex_unlock(&mu));
}

static void *step_main(void *arg)
{
    svc_step *st = arg;
    svc_req *r = st->r; /* set before the thread was made: its own from now on */
    svc_job_fn job = st->job;
    self = st;
    lc_conn *conn = NULL;
    if (lc_conn_new(client, &conn) != LC_OK)
        conn = NULL; /* the job answers 503 */
    purchase_result why = PR_STEP_ABANDONED;
    SVC_PT(pthread_mutex_lock(&mu));
    bool go = wait_to_go(st, &why);
    SVC_PT(pthread_mutex_unlock(&mu));
    if (go) {
        r->queued_us = lc_now_us(); /* the wait at start is not a queue */
        job(r, conn);
    } else {
        answer_unstarted(st, r, why);
    }
    lc_conn_free(conn); /* before the answer: the client may be freed after it */
    finish(st, r);
    self = NULL;
    done_fn(r); /* st and r are not touched after this */
    return NULL;
}

int svc_step_launch(svc_step *st, svc_req *r, svc_job_fn job)
{
    pthread_attr_t attr;
    pthread_t t;
    st->r = r;
    st->job = job;
    SVC_PT(pthread_attr_init(&attr));
    SVC_PT(pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED));
    SVC_PT(pthread_attr_setstacksize(&attr, 512 * 1024));
    int rc = pthread_create(&t, &attr, step_main, st);
    SVC_PT(pthread_attr_destroy(&attr));
    if (rc == 0)
        return 0;
    SVC_PT(pthread_mutex_lock(&mu));
    memset(st, 0, sizeof *st);
    nlive--;
    SVC_PT(pthread_cond_broadcast(&cv));
    SVC_PT(pthread_mutex_unlock(&mu));
    return -1;
}

/* ---- the routes' jobs ---- */

static void add_time(cJSON *o, const char *key, int64_t us)
{
    if (us > 0)
        svc_json_add_int(o, key, us);
    else
        cJSON_AddNullToObject(o, key);
}

static void add_num_or_null(cJSON *o, const char *key, bool has, long long v)
{
    if (has)
        svc_json_add_int(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* One step as GET /steps shows it (service/README.md, "Stepped
 * purchases"). Holds mu. */
static cJSON *step_json(const svc_step *st, int64_t now)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    svc_json_add_int(o, "id", (long long)st->id);
    cJSON_AddStringToObject(o, "mode", svc_mode_name(st->mode));
    cJSON_AddStringToObject(o, "sku", st->sku);
    if (st->user[0])
        cJSON_AddStringToObject(o, "user", st->user);
    else
        cJSON_AddNullToObject(o, "user");
    cJSON_AddStringToObject(o, "stage", svc_stage_name(st->stage));
    cJSON *stages = cJSON_AddArrayToObject(o, "stages");
    for (int s = 0; stages != NULL && s < SVC_STAGE_COUNT; s++)
        if (st->locked_mode || s == SVC_STAGE_START || s == SVC_STAGE_DONE)
            (void)svc_json_add_item(stages, NULL, cJSON_CreateString(stage_names[s]));
    bool done = st->stage == SVC_STAGE_DONE;
    cJSON_AddBoolToObject(o, "paused", st->paused && !done);
    cJSON_AddBoolToObject(o, "waiting", st->moving && !done);
    add_num_or_null(o, "read", st->f.has_read, st->f.read);
    add_num_or_null(o, "written", st->f.has_written, st->f.written);
    cJSON_AddBoolToObject(o, "holds_lock", st->f.holds_lock && !done);
    bool leased = st->f.holds_lock && !done && st->f.lease_gone_us > 0;
    int64_t left = leased ? (st->f.lease_gone_us - now) / 1000 : 0;
    add_num_or_null(o, "lease_left_ms", leased, left > 0 ? left : 0);
    add_num_or_null(o, "fence", st->f.fence > 0, st->f.fence);
    cJSON_AddBoolToObject(o, "lock_lost", st->f.lock_lost);
    cJSON_AddBoolToObject(o, "deleted_other_lock", st->f.deleted_other_lock);
    if (st->error[0])
        cJSON_AddStringToObject(o, "error", st->error);
    else
        cJSON_AddNullToObject(o, "error");
    cJSON_AddBoolToObject(o, "abandoned", st->abandoned);
    int64_t from = st->touched_us > st->paused_us ? st->touched_us : st->paused_us;
    int64_t in = (from + timeout_us - now) / 1000;
    add_num_or_null(o, "abandon_in_ms", st->paused && !done, in > 0 ? in : 0);
    add_num_or_null(o, "status", done, st->status);
    if (done && st->reply != NULL)
        (void)svc_json_add_item(o, "reply", cJSON_CreateRaw(st->reply)); /* our own JSON */
    else
        cJSON_AddNullToObject(o, "reply");
    if (!st->locked_mode)
        cJSON_AddStringToObject(o, "why",
                                "lua takes no lock: one script reads and writes the stock in one "
                                "atomic step, so there is no point between them to stop at");
    /* the trace's names (GET /trace), so the timeline renderer draws it */
    add_time(o, "received_us", st->at_us[SVC_STAGE_START]);
    add_time(o, "wait_start_us", st->locked_mode ? st->left_start_us : 0);
    add_time(o, "acquired_us", st->at_us[SVC_STAGE_LOCKED]);
    add_time(o, "read_us", st->at_us[SVC_STAGE_READ]);
    add_time(o, "committed_us", st->f.has_written ? st->at_us[SVC_STAGE_WRITTEN] : 0);
    add_time(o, "released_us", st->at_us[SVC_STAGE_RELEASED]);
    add_time(o, "responded_us", st->at_us[SVC_STAGE_DONE]);
    return o;
}

/* The SKUs and lock keys GET /steps reads: each SKU once, with the modes
 * whose lock lives under a key of it. */
typedef struct key_set {
    int n;
    struct {
        char sku[SVC_SKU_MAX + 1];
        bool mode[SVC_MODE_COUNT];
    } s[64 + 1];
} key_set;

static void want_sku(key_set *k, const char *sku, svc_mode mode)
{
    int i = 0;
    while (i < k->n && strcmp(k->s[i].sku, sku) != 0)
        i++;
    if (i == k->n) {
        if (k->n == (int)(sizeof k->s / sizeof k->s[0]))
            return;
        memset(&k->s[k->n], 0, sizeof k->s[0]);
        snprintf(k->s[k->n++].sku, sizeof k->s[0].sku, "%s", sku);
    }
    const lc_mode_info *lock = svc_mode_lock(mode);
    if (lock != NULL && lock->lock_in_redis)
        k->s[i].mode[mode] = true;
}

/* Every listed step, oldest first, into "steps"; their SKUs into k.
 * Holds mu. */
static cJSON *steps_json(key_set *k, int64_t now)
{
    cJSON *arr = cJSON_CreateArray();
    uint64_t after = 0;
    for (;;) {
        const svc_step *next = NULL;
        for (int i = 0; places != NULL && i < nplaces; i++)
            if (places[i].id > after && (next == NULL || places[i].id < next->id))
                next = &places[i];
        if (next == NULL)
            break;
        after = next->id;
        (void)svc_json_add_item(arr, NULL, step_json(next, now));
        want_sku(k, next->sku, next->mode);
    }
    return arr;
}

/* An integer reply (or a string holding one) into o[key], else null. */
static void add_reply_int(cJSON *o, const char *key, const redisReply *rep)
{
    char *end = NULL;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER) {
        svc_json_add_int(o, key, rep->integer);
        return;
    }
    long long v = rep != NULL && rep->type == REDIS_REPLY_STRING ? strtoll(rep->str, &end, 10) : 0;
    if (end != NULL && end != rep->str && *end == '\0')
        svc_json_add_int(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* A lock key's value: a string (setnx, token, fenced), or a hash
 * (reentrant: "field=holds"); null when the key is absent. */
static void add_lock_value(cJSON *o, const redisReply *get, const redisReply *hash)
{
    if (get != NULL && get->type == REDIS_REPLY_STRING) {
        cJSON_AddStringToObject(o, "value", get->str);
        return;
    }
    if (hash != NULL && hash->type == REDIS_REPLY_ARRAY && hash->elements >= 2) {
        char buf[512] = "";
        size_t n = 0;
        for (size_t i = 0; i + 1 < hash->elements && n < sizeof buf; i += 2)
            if (hash->element[i]->type == REDIS_REPLY_STRING &&
                hash->element[i + 1]->type == REDIS_REPLY_STRING)
                n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s=%s", n ? "," : "",
                                      hash->element[i]->str, hash->element[i + 1]->str);
        cJSON_AddStringToObject(o, "value", buf);
        return;
    }
    cJSON_AddNullToObject(o, "value");
}

/* Sends p alone and takes its n replies into reps (NULL: none came);
 * false when Redis did not answer at all. */
static bool round_trip(lc_conn *conn, lc_pipe *p, redisReply **reps, int n)
{
    bool ok = conn != NULL && lc_conn_pipe(conn, p) == LC_OK;
    for (int i = 0; i < n; i++)
        reps[i] = ok ? lc_pipe_take(p, i) : NULL;
    lc_pipe_clear(p);
    return ok;
}

static void free_replies(redisReply **reps, int n)
{
    for (int i = 0; i < n; i++)
        freeReplyObject(reps[i]);
}

/* One SKU's keys: stock, sold and the fence's high-water mark in one
 * round trip, then each lock key of its steps' modes in one; null when
 * Redis did not answer. */
static cJSON *sku_keys(lc_conn *conn, const char *sku, const bool *modes)
{
    static const char *const names[] = {"stock", "sold", "fence_hwm"};
    redisReply *reps[3];
    char key[SVC_KEY_MAX];
    lc_pipe p;
    lc_pipe_init(&p);
    for (int i = 0; i < 3; i++) {
        svc_key(key, sku, names[i]);
        (void)lc_pipe_append(&p, "GET %s", key);
    }
    if (!round_trip(conn, &p, reps, 3))
        return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < 3; i++)
        add_reply_int(o, names[i], reps[i]);
    free_replies(reps, 3);
    cJSON *locks = cJSON_AddObjectToObject(o, "locks");
    for (svc_mode m = 0; m < SVC_MODE_COUNT; m++) {
        if (!modes[m])
            continue;
        svc_lock_key(key, sku, (lc_mode)m);
        /* the key's type decides which of GET and HGETALL answers: the
         * other is WRONGTYPE */
        (void)lc_pipe_append(&p, "GET %s", key);
        (void)lc_pipe_append(&p, "HGETALL %s", key);
        (void)lc_pipe_append(&p, "PTTL %s", key);
        cJSON *l = cJSON_CreateObject();
        cJSON_AddStringToObject(l, "key", key);
        (void)round_trip(conn, &p, reps, 3);
        add_lock_value(l, reps[0], reps[1]);
        /* -2: no such key; -1: a key without a TTL (setnx's crash) */
        add_num_or_null(l, "pttl_ms", reps[2] != NULL && reps[2]->type == REDIS_REPLY_INTEGER,
                        reps[2] != NULL ? reps[2]->integer : 0);
        free_replies(reps, 3);
        (void)svc_json_add_item(locks, svc_mode_name(m), l);
    }
    return o;
}

/* Fills o (a reply being built) with what GET /steps answers; st_id > 0
 * also adds that step as "step". 0; -1 when that step is not listed (the
 * caller answers 404 unknown_step); -2 out of memory (503). Takes mu for
 * the table, reads Redis without it. */
static int fill(svc_req *r, lc_conn *conn, cJSON *o, uint64_t st_id)
{
    key_set *k = calloc(1, sizeof *k);
    if (k == NULL)
        return -2;
    if (r->p.seen & SVC_P_SKU)
        want_sku(k, r->p.sku, SVC_MODE_LUA);
    int64_t now = lc_now_us();
    SVC_PT(pthread_mutex_lock(&mu));
    const svc_step *st = st_id > 0 ? find(st_id) : NULL;
    if (st_id > 0 && st == NULL) {
        SVC_PT(pthread_mutex_unlock(&mu));
        free(k);
        return -1;
    }
    if (st != NULL)
        (void)svc_json_add_item(o, "step", step_json(st, now));
    (void)svc_json_add_item(o, "steps", steps_json(k, now));
    SVC_PT(pthread_mutex_unlock(&mu));
    cJSON_AddStringToObject(o, "instance", r->s->instance_id);
    svc_json_add_int(o, "now_us", now);
    cJSON *redis = cJSON_AddObjectToObject(o, "redis");
    for (int i = 0; redis != NULL && i < k->n; i++)
        (void)svc_json_add_item(redis, k->s[i].sku, sku_keys(conn, k->s[i].sku, k->s[i].mode));
    free(k);
    return 0;
}

static void unknown_step(svc_req *r)
{
    char detail[160];
    snprintf(detail, sizeof detail,
             "no stepped purchase %llu is listed (a finished one stays until its place is needed)",
             (unsigned long long)r->step);
    svc_reply_error(r, 404, "unknown_step", detail, NULL);
}

void svc_steps_list_job(svc_req *r, lc_conn *conn)
{
    cJSON *o = cJSON_CreateObject();
    if (o != NULL) {
        cJSON_AddBoolToObject(o, "ok", 1);
        if (fill(r, conn, o, 0) != 0) {
            cJSON_Delete(o);
            o = NULL; /* svc_reply_json stores 503 out_of_memory */
        }
    }
    svc_reply_json(r, 200, o);
}

/* next (all false) and run (all true). */
static void drive(svc_req *r, lc_conn *conn, bool all)
{
    int64_t wait_ms = (r->p.seen & SVC_P_WAIT_MS) ? r->p.wait_ms : NEXT_WAIT_MS_DEFAULT;
    int64_t deadline = lc_now_us() + wait_ms * 1000;
    SVC_PT(pthread_mutex_lock(&mu));
    svc_step *st = find(r->step);
    if (st != NULL && st->stage != SVC_STAGE_DONE) {
        st->touched_us = lc_now_us();
        st->run_all |= all;
        if (st->paused) {
            st->go = true;
            st->moving = true;
            SVC_PT(pthread_cond_broadcast(&cv));
        }
    }
    /* until it arrives (next) or is done (run), or wait_ms is over */
    while ((st = find(r->step)) != NULL && st->stage != SVC_STAGE_DONE && (all || st->moving) &&
           !svc_shutting_down() && lc_now_us() < deadline)
        wait_until(deadline);
    SVC_PT(pthread_mutex_unlock(&mu));
    cJSON *o = cJSON_CreateObject();
    int rc = o != NULL ? 0 : -2;
    if (o != NULL) {
        cJSON_AddBoolToObject(o, "ok", 1);
        rc = fill(r, conn, o, r->step);
    }
    if (rc != 0) {
        cJSON_Delete(o);
        if (rc == -1) {
            unknown_step(r);
            return;
        }
        o = NULL; /* svc_reply_json stores 503 out_of_memory */
    }
    svc_reply_json(r, 200, o);
}

void svc_step_next_job(svc_req *r, lc_conn *conn)
{
    drive(r, conn, false);
}

void svc_step_run_job(svc_req *r, lc_conn *conn)
{
    drive(r, conn, true);
}

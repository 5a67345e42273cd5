/* test_service_steps.c — stepped purchases over HTTP (?step=1, GET /steps,
 * POST /steps/{id}/next|run): the learner is the scheduler.
 *
 * The lessons, each in the one order that teaches it, against the real
 * Redis:
 *   none    A reads, B reads, A writes, B writes: both 200, the audit says
 *           oversold 1 (stock 10 → 9, sold 2);
 *   token   B waits (waiting:true, stage start) while A holds, and gets in
 *           only once A released: 10 → 8, sold 2, exact;
 *   lease   A (300 ms lease) reads and sits past its lease; B gets in and
 *           reads the same stock; both sell: oversold 1, A's release finds
 *           B's lock (lock_lost);
 *   fenced  the same order: A's write is 409 fenced_out, B sells: exact;
 *   lua     start → done in one step, and the step says why.
 * The bounds: eight paused steps and the ninth is 429 too_many_steps, while
 * a burst of ordinary purchases on a server with only eight workers runs as
 * fast beside them as without them (the steps hold no worker); unknown ids
 * 404; an abandoned step releases its lock, writes nothing and answers 409
 * step_abandoned; SIGTERM ends a paused one 503; 403 without faults.enabled,
 * 401/403 without the admin token. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_test.h"

static svc_server srv;

/* ---- one stepped purchase's HTTP request, answered when it is done ---- */

typedef struct buyer {
    const svc_server *s;
    char path[300];
    svc_resp resp;
    pthread_t t;
    long long id;
} buyer;

static void *buyer_main(void *arg)
{
    buyer *b = arg;
    svc_req(b->s, "POST", b->path, NULL, NULL, &b->resp);
    return NULL;
}

/* The step whose user is user (the newest, not done), from GET /steps:
 * its JSON (detached: the caller deletes it), or NULL. */
static cJSON *step_of(const svc_server *s, const char *user, long long id)
{
    svc_resp r;
    svc_req(s, "GET", "/steps", NULL, NULL, &r);
    cJSON *found = NULL;
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(r.json, "steps");
    cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        const char *u = svc_jstr(e, "user");
        const char *stage = svc_jstr(e, "stage");
        if ((id > 0 && (long long)svc_jnum(e, "id") == id) ||
            (id <= 0 && u != NULL && user != NULL && strcmp(u, user) == 0 &&
             (stage == NULL || strcmp(stage, "done") != 0))) {
            cJSON_Delete(found);
            found = cJSON_Duplicate(e, 1);
        }
    }
    svc_resp_free(&r);
    return found;
}

/* Starts buyer user's stepped purchase of mode on sku (query: more
 * parameters, "" for none) and waits until GET /steps lists it. */
static void start(buyer *b, const svc_server *s, const char *mode, const char *sku,
                  const char *user, const char *query)
{
    memset(b, 0, sizeof *b);
    b->s = s;
    snprintf(b->path, sizeof b->path, "/miaosha/%s?sku=%s&user=%s&step=1%s", mode, sku, user,
             query);
    pthread_create(&b->t, NULL, buyer_main, b);
    int64_t deadline = lc_now_ms() + tu_slack(5000);
    cJSON *st = NULL;
    while ((st = step_of(s, user, 0)) == NULL && lc_now_ms() < deadline)
        tu_sleep_ms(5);
    TU_REQUIRE(st != NULL, "GET /steps lists %s's %s purchase", user, mode);
    b->id = (long long)svc_jnum(st, "id");
    TU_CHECK(strcmp(svc_jstr(st, "stage"), "start") == 0 && svc_jbool(st, "paused") == 1 &&
                 svc_jbool(st, "waiting") == 0,
             "%s starts paused at start", user);
    cJSON_Delete(st);
}

/* The purchase's own reply (it comes at done). */
static svc_resp *finish(buyer *b)
{
    pthread_join(b->t, NULL);
    return &b->resp;
}

/* POST /steps/{id}/next (or run) with wait_ms (0: the default); the reply
 * in *r (freed by the caller), the step's JSON returned (owned by r). */
static cJSON *drive(const svc_server *s, long long id, const char *verb, int wait_ms, svc_resp *r)
{
    char path[120];
    if (wait_ms > 0)
        snprintf(path, sizeof path, "/steps/%lld/%s?wait_ms=%d", id, verb, wait_ms);
    else
        snprintf(path, sizeof path, "/steps/%lld/%s", id, verb);
    svc_req(s, "POST", path, NULL, NULL, r);
    TU_CHECK(r->status == 200, "%s %lld: %ld %s", verb, id, r->status, B(r));
    return cJSON_GetObjectItemCaseSensitive(r->json, "step");
}

/* One next that must arrive at stage; returns the step's "read" (or -1). */
static long long next_to(buyer *b, const char *stage)
{
    svc_resp r;
    cJSON *st = drive(b->s, b->id, "next", 0, &r);
    const char *got = svc_jstr(st, "stage");
    TU_CHECK(got != NULL && strcmp(got, stage) == 0 && svc_jbool(st, "waiting") == 0,
             "step %lld: next arrives at %s: %s", b->id, stage, B(&r));
    long long read = (long long)svc_jnum(st, "read");
    svc_resp_free(&r);
    return read;
}

/* The lock key's value of sku's lock for mode from a reply of next or GET
 * /steps ("" when the key is absent). */
static void lock_value(const svc_resp *r, const char *sku, const char *mode, char *out, size_t len)
{
    cJSON *k = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r->json, "redis"), sku),
        "locks");
    const char *v = svc_jstr(cJSON_GetObjectItemCaseSensitive(k, mode), "value");
    snprintf(out, len, "%s", v ? v : "");
}

static long long redis_num(const svc_resp *r, const char *sku, const char *key)
{
    cJSON *k = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r->json, "redis"),
                                                sku);
    return (long long)svc_jnum(k, key);
}

/* ---- the lessons ---- */

static void lost_update(void)
{
    buyer a, b;
    svc_audit au;
    TU_REQUIRE(svc_set_stock(&srv, "st_none", 10, NULL) == 200, "stock st_none");
    start(&a, &srv, "none", "st_none", "A", "");
    start(&b, &srv, "none", "st_none", "B", "");
    next_to(&a, "locked");
    TU_CHECK(next_to(&a, "read") == 10, "A reads 10");
    next_to(&b, "locked");
    TU_CHECK(next_to(&b, "read") == 10, "B reads 10 too: none keeps nobody out");
    svc_resp r;
    cJSON *st = drive(&srv, a.id, "next", 0, &r);
    TU_CHECK(strcmp(svc_jstr(st, "stage"), "written") == 0 && svc_jnum(st, "written") == 9 &&
                 redis_num(&r, "st_none", "stock") == 9 && redis_num(&r, "st_none", "sold") == 1,
             "A writes 9: stock 9, sold 1 in Redis: %s", B(&r));
    svc_resp_free(&r);
    st = drive(&srv, b.id, "next", 0, &r);
    TU_CHECK(strcmp(svc_jstr(st, "stage"), "written") == 0 && svc_jnum(st, "written") == 9 &&
                 redis_num(&r, "st_none", "stock") == 9 && redis_num(&r, "st_none", "sold") == 2,
             "B writes 9 over it: stock 9, sold 2: %s", B(&r));
    svc_resp_free(&r);
    next_to(&a, "released");
    next_to(&b, "released");
    next_to(&a, "done");
    next_to(&b, "done");
    svc_resp *ra = finish(&a), *rb = finish(&b);
    TU_CHECK(ra->status == 200 && rb->status == 200, "both sell: %ld %ld", ra->status, rb->status);
    TU_CHECK(svc_jbool(ra->json, "pipeline") == 0, "a stepped purchase is not pipelined: %s",
             B(ra));
    TU_CHECK(svc_get_audit(&srv, "st_none", &au) == 200 && au.oversold == 1 && au.sold == 2 &&
                 au.stock == 9,
             "the lost update: oversold %lld, sold %lld, stock %lld", au.oversold, au.sold,
             au.stock);
    svc_resp_free(ra);
    svc_resp_free(rb);
}

static void lock_waits(void)
{
    buyer a, b;
    svc_audit au;
    char va[128], vb[128];
    TU_REQUIRE(svc_set_stock(&srv, "st_token", 10, NULL) == 200, "stock st_token");
    start(&a, &srv, "token", "st_token", "A", "&wait_ms=30000");
    start(&b, &srv, "token", "st_token", "B", "&wait_ms=30000");
    svc_resp r;
    cJSON *st = drive(&srv, a.id, "next", 0, &r);
    lock_value(&r, "st_token", "token", va, sizeof va);
    TU_CHECK(strcmp(svc_jstr(st, "stage"), "locked") == 0 && svc_jbool(st, "holds_lock") == 1 &&
                 va[0] != '\0' && svc_jnum(st, "lease_left_ms") > 0,
             "A holds the lock, its key holds A's token: %s", B(&r));
    svc_resp_free(&r);
    /* B, told to go on, waits for the lock A holds: at every stage of A */
    st = drive(&srv, b.id, "next", 200, &r);
    TU_CHECK(strcmp(svc_jstr(st, "stage"), "start") == 0 && svc_jbool(st, "waiting") == 1,
             "B waits while A is locked: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(next_to(&a, "read") == 10, "A reads 10");
    st = drive(&srv, b.id, "next", 200, &r);
    TU_CHECK(svc_jbool(st, "waiting") == 1, "B still waits while A has read: %s", B(&r));
    svc_resp_free(&r);
    /* the same wait given in a JSON body is the one waited (not the
     * default 1000 ms) */
    char bpath[64];
    snprintf(bpath, sizeof bpath, "/steps/%lld/next", b.id);
    int64_t t0 = lc_now_ms();
    svc_req(&srv, "POST", bpath, "{\"wait_ms\":200}", NULL, &r);
    int64_t took = lc_now_ms() - t0;
    st = cJSON_GetObjectItemCaseSensitive(r.json, "step");
    TU_CHECK(r.status == 200 && svc_jbool(st, "waiting") == 1 && took < tu_slack(700),
             "wait_ms 200 in the body: waiting after %lld ms: %s", (long long)took, B(&r));
    svc_resp_free(&r);
    next_to(&a, "written");
    st = drive(&srv, b.id, "next", 200, &r);
    TU_CHECK(svc_jbool(st, "waiting") == 1 && svc_jnum(st, "read") < -1e17,
             "B still waits while A has written, and has read nothing: %s", B(&r));
    svc_resp_free(&r);
    next_to(&a, "released");
    /* B's wait ends by itself once A released: it arrives at locked and
     * pauses there without another next */
    int64_t deadline = lc_now_ms() + tu_slack(5000);
    while ((st = step_of(&srv, NULL, b.id)) != NULL &&
           strcmp(svc_jstr(st, "stage"), "locked") != 0 && lc_now_ms() < deadline) {
        cJSON_Delete(st);
        tu_sleep_ms(5);
    }
    TU_CHECK(st != NULL && strcmp(svc_jstr(st, "stage"), "locked") == 0 &&
                 svc_jbool(st, "paused") == 1 && svc_jbool(st, "waiting") == 0,
             "B gets in once A released, and pauses at locked");
    cJSON_Delete(st);
    svc_req(&srv, "GET", "/steps", NULL, NULL, &r);
    lock_value(&r, "st_token", "token", vb, sizeof vb);
    TU_CHECK(vb[0] != '\0' && strcmp(va, vb) != 0, "the key holds B's token now: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(next_to(&b, "read") == 9, "B reads what A wrote: 9");
    next_to(&b, "written");
    next_to(&b, "released");
    next_to(&b, "done");
    next_to(&a, "done");
    svc_resp *ra = finish(&a), *rb = finish(&b);
    TU_CHECK(ra->status == 200 && rb->status == 200, "both sell: %ld %ld", ra->status, rb->status);
    TU_CHECK(svc_get_audit(&srv, "st_token", &au) == 200 && au.oversold == 0 && au.sold == 2 &&
                 au.stock == 8,
             "exact: oversold %lld, sold %lld, stock %lld", au.oversold, au.sold, au.stock);
    svc_resp_free(ra);
    svc_resp_free(rb);
}

/* Waits until sku's lock key for mode is gone (A's lease ran out). */
static void lease_runs_out(const char *sku, const char *mode)
{
    char q[120], v[128] = "x";
    snprintf(q, sizeof q, "/steps?sku=%s", sku);
    int64_t deadline = lc_now_ms() + tu_slack(5000);
    while (v[0] != '\0' && lc_now_ms() < deadline) {
        svc_resp r;
        svc_req(&srv, "GET", q, NULL, NULL, &r);
        lock_value(&r, sku, mode, v, sizeof v);
        svc_resp_free(&r);
        if (v[0] != '\0')
            tu_sleep_ms(20);
    }
    TU_CHECK(v[0] == '\0', "%s: A's lease ran out while A sat paused", mode);
}

/* A (a 300 ms lease) reads, sits past its lease; B (a long one) gets in and
 * reads the same stock. token: both sell; fenced: A's write is refused. */
static void lease_lesson(const char *mode)
{
    buyer a, b;
    svc_audit au;
    char sku[32], va[128], vb[128];
    snprintf(sku, sizeof sku, "st_lease_%s", mode);
    TU_REQUIRE(svc_set_stock(&srv, sku, 10, NULL) == 200, "stock %s", sku);
    start(&a, &srv, mode, sku, "A", "&lease_ms=300");
    start(&b, &srv, mode, sku, "B", "&lease_ms=30000&wait_ms=30000");
    next_to(&a, "locked");
    TU_CHECK(next_to(&a, "read") == 10, "%s: A reads 10", mode);
    lease_runs_out(sku, mode);
    next_to(&b, "locked");
    svc_resp r;
    cJSON *st = drive(&srv, b.id, "next", 0, &r);
    lock_value(&r, sku, mode, vb, sizeof vb);
    TU_CHECK(strcmp(svc_jstr(st, "stage"), "read") == 0 && svc_jnum(st, "read") == 10 &&
                 vb[0] != '\0',
             "%s: B got in while A still works, and reads 10 too: %s", mode, B(&r));
    if (strcmp(mode, "fenced") == 0)
        TU_CHECK(redis_num(&r, sku, "fence_hwm") == svc_jnum(st, "fence"),
                 "fenced: B's read moved the high-water mark to its token: %s", B(&r));
    svc_resp_free(&r);
    st = drive(&srv, a.id, "next", 0, &r);
    const char *err = svc_jstr(st, "error");
    if (strcmp(mode, "fenced") == 0)
        TU_CHECK(strcmp(svc_jstr(st, "stage"), "written") == 0 && err != NULL &&
                     strcmp(err, "fenced_out") == 0 && svc_jnum(st, "written") < -1e17 &&
                     redis_num(&r, sku, "stock") == 10,
                 "fenced: A's write is refused, nothing written: %s", B(&r));
    else
        TU_CHECK(strcmp(svc_jstr(st, "stage"), "written") == 0 && err == NULL &&
                     svc_jnum(st, "written") == 9 && redis_num(&r, sku, "sold") == 1,
                 "token: A writes 9 although its lease ran out: %s", B(&r));
    svc_resp_free(&r);
    st = drive(&srv, a.id, "next", 0, &r);
    lock_value(&r, sku, mode, va, sizeof va);
    TU_CHECK(strcmp(svc_jstr(st, "stage"), "released") == 0 && svc_jbool(st, "lock_lost") == 1 &&
                 strcmp(va, vb) == 0,
             "%s: A's release finds B's lock and leaves it: lock_lost: %s", mode, B(&r));
    svc_resp_free(&r);
    next_to(&b, "written");
    next_to(&b, "released");
    next_to(&a, "done");
    next_to(&b, "done");
    svc_resp *ra = finish(&a), *rb = finish(&b);
    TU_CHECK(svc_jbool(ra->json, "lock_lost") == 1, "%s: A's reply says lock_lost: %s", mode,
             B(ra));
    TU_CHECK(svc_get_audit(&srv, sku, &au) == 200, "audit %s", sku);
    if (strcmp(mode, "fenced") == 0) {
        TU_CHECK(ra->status == 409 && svc_jerr_is(ra, "fenced_out") && rb->status == 200,
                 "fenced: A 409 fenced_out, B 200: %ld %ld", ra->status, rb->status);
        TU_CHECK(au.oversold == 0 && au.sold == 1 && au.stock == 9,
                 "fenced: exact: oversold %lld sold %lld stock %lld", au.oversold, au.sold,
                 au.stock);
    } else {
        TU_CHECK(ra->status == 200 && rb->status == 200, "token: both sell: %ld %ld", ra->status,
                 rb->status);
        TU_CHECK(au.oversold == 1 && au.sold == 2 && au.stock == 9,
                 "token: the lease ran out: oversold %lld sold %lld stock %lld", au.oversold,
                 au.sold, au.stock);
    }
    svc_resp_free(ra);
    svc_resp_free(rb);
}

static void lua_one_step(void)
{
    buyer a;
    TU_REQUIRE(svc_set_stock(&srv, "st_lua", 10, NULL) == 200, "stock st_lua");
    start(&a, &srv, "lua", "st_lua", "A", "");
    svc_resp r;
    cJSON *st = drive(&srv, a.id, "next", 0, &r);
    cJSON *stages = cJSON_GetObjectItemCaseSensitive(st, "stages");
    TU_CHECK(strcmp(svc_jstr(st, "stage"), "done") == 0 && cJSON_GetArraySize(stages) == 2 &&
                 svc_jstr(st, "why") != NULL && strstr(svc_jstr(st, "why"), "atomic") != NULL,
             "lua goes start → done in one step, and says why: %s", B(&r));
    TU_CHECK(svc_jnum(st, "read") == 10 && svc_jnum(st, "written") == 9 &&
                 svc_jnum(st, "status") == 200,
             "lua's step read 10 and wrote 9: %s", B(&r));
    svc_resp_free(&r);
    svc_resp *ra = finish(&a);
    TU_CHECK(ra->status == 200 && svc_jnum(ra->json, "stock_left") == 9, "lua sells: %s", B(ra));
    svc_resp_free(ra);
}

/* ---- the bounds ---- */

/* n threads, each per_thread keep-alive purchases of mode on sku: the
 * seconds it took, and every reply must be 200. */
typedef struct burst {
    const char *sku;
    int per_thread;
    long bad;
} burst;

static void *burst_main(void *arg)
{
    burst *b = arg;
    void *h = NULL;
    char path[120];
    snprintf(path, sizeof path, "/miaosha/token?sku=%s&wait_ms=10000", b->sku);
    for (int i = 0; i < b->per_thread; i++) {
        svc_resp r;
        svc_req_keep(&h, &srv, "POST", path, &r);
        if (r.status != 200)
            __atomic_fetch_add(&b->bad, 1, __ATOMIC_RELAXED);
        svc_resp_free(&r);
    }
    svc_handle_free(h);
    return NULL;
}

#define BURST_THREADS 8
#define BURST_EACH 150

static double time_burst(const char *sku)
{
    pthread_t t[BURST_THREADS];
    burst b = {sku, BURST_EACH, 0};
    TU_REQUIRE(svc_set_stock(&srv, sku, BURST_THREADS * BURST_EACH, NULL) == 200, "stock %s", sku);
    int64_t t0 = lc_now_us();
    for (int i = 0; i < BURST_THREADS; i++)
        pthread_create(&t[i], NULL, burst_main, &b);
    for (int i = 0; i < BURST_THREADS; i++)
        pthread_join(t[i], NULL);
    double s = (double)(lc_now_us() - t0) / 1e6;
    TU_CHECK(b.bad == 0, "every purchase of the burst on %s sells: %ld did not", sku, b.bad);
    return s;
}

static void bounds(void)
{
    buyer bs[8];
    char user[16];
    svc_resp r;
    TU_REQUIRE(svc_set_stock(&srv, "st_bound", 100, NULL) == 200, "stock st_bound");
    (void)time_burst("st_burst0"); /* warm up: connections, script cache */
    double before = time_burst("st_burst1"), again = time_burst("st_burst3");
    before = again < before ? again : before; /* the quicker: noise only slows */
    /* eight paused steps, each holding its token lock on a SKU of its own */
    for (int i = 0; i < 8; i++) {
        char sku[32];
        snprintf(user, sizeof user, "P%d", i);
        snprintf(sku, sizeof sku, "st_bound%d", i);
        TU_REQUIRE(svc_set_stock(&srv, sku, 1, NULL) == 200, "stock %s", sku);
        start(&bs[i], &srv, "token", sku, user, "");
        next_to(&bs[i], "locked");
        next_to(&bs[i], "read");
    }
    svc_req(&srv, "POST", "/miaosha/token?sku=st_bound&user=N&step=1", NULL, NULL, &r);
    TU_CHECK(r.status == 429 && svc_jerr_is(&r, "too_many_steps") &&
                 svc_jdetail_has(&r, "teach.max_steps (8)"),
             "the ninth: 429 too_many_steps: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    double beside = time_burst("st_burst2");
    printf("a burst of %d token purchases (%d threads, 8 workers): %.3f s alone, %.3f s beside "
           "eight paused steps\n",
           BURST_THREADS * BURST_EACH, BURST_THREADS, before, beside);
    TU_CHECK(beside < 3 * before + 0.2,
             "the service keeps its speed while eight steps sit paused: %.3f s vs %.3f s", beside,
             before);
    svc_req(&srv, "GET", "/steps", NULL, NULL, &r);
    int paused = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(r.json, "steps"))
    {
        paused += svc_jbool(e, "paused") == 1 && strcmp(svc_jstr(e, "stage"), "read") == 0;
    }
    TU_CHECK(paused == 8, "eight steps sat paused at read through the burst: %d", paused);
    svc_resp_free(&r);
    for (int i = 0; i < 8; i++) {
        cJSON *st = drive(&srv, bs[i].id, "run", 5000, &r);
        TU_CHECK(strcmp(svc_jstr(st, "stage"), "done") == 0 && svc_jnum(st, "status") == 200,
                 "run takes step %lld to done: %s", bs[i].id, B(&r));
        svc_resp_free(&r);
        svc_resp *f = finish(&bs[i]);
        TU_CHECK(f->status == 200, "P%d sells: %ld", i, f->status);
        svc_resp_free(f);
    }
    /* a finished step is still listed: next answers it done */
    drive(&srv, bs[0].id, "next", 0, &r);
    svc_resp_free(&r);

    svc_req(&srv, "POST", "/steps/999999/next", NULL, NULL, &r);
    TU_CHECK(r.status == 404 && svc_jerr_is(&r, "unknown_step"), "unknown id: %ld %s", r.status,
             B(&r));
    svc_resp_free(&r);
    svc_req(&srv, "POST", "/steps/abc/run", NULL, NULL, &r);
    TU_CHECK(r.status == 404 && svc_jerr_is(&r, "unknown_step"), "not an id: %ld %s", r.status,
             B(&r));
    svc_resp_free(&r);
    svc_req(&srv, "GET", "/steps/1/next", NULL, NULL, &r);
    TU_CHECK(r.status == 405 && strcmp(r.allow, "POST") == 0, "GET next: %ld allow '%s'", r.status,
             r.allow);
    svc_resp_free(&r);
    svc_req(&srv, "POST", "/steps/1/next?bogus=1", NULL, NULL, &r);
    TU_CHECK(r.status == 400, "an unknown parameter: %ld", r.status);
    svc_resp_free(&r);
    /* wait_ms in a JSON body is taken as in the query; anything else in
     * it is refused, never ignored */
    char path[64];
    snprintf(path, sizeof path, "/steps/%lld/next", bs[0].id);
    svc_req(&srv, "POST", path, "{\"wait_ms\":50}", NULL, &r);
    TU_CHECK(r.status == 200, "wait_ms in the body: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    svc_req(&srv, "POST", path, "{\"bogus\":1}", NULL, &r);
    TU_CHECK(r.status == 400 && svc_jdetail_has(&r, "bogus"), "an unknown body member: %ld %s",
             r.status, B(&r));
    svc_resp_free(&r);
    svc_req(&srv, "POST", path, "{\"wait_ms\":-1}", NULL, &r);
    TU_CHECK(r.status == 400 && svc_jdetail_has(&r, "wait_ms"), "a bad wait_ms in the body: %ld %s",
             r.status, B(&r));
    svc_resp_free(&r);
    svc_req(&srv, "POST", "/miaosha/token?step=2", NULL, NULL, &r);
    TU_CHECK(r.status == 400 && svc_jdetail_has(&r, "step"), "step=2: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    svc_req_hdr(&srv, "POST", "/miaosha/token?step=1", "Idempotency-Key: k1", &r);
    TU_CHECK(r.status == 400 && svc_jdetail_has(&r, "Idempotency-Key"), "a key with step=1: %ld %s",
             r.status, B(&r));
    svc_resp_free(&r);
}

/* With an admin token every route of the steps needs it, as PUT /stock. */
static void guarded(void)
{
    svc_server s2;
    const char *extra[] = {"--set", "faults.enabled=true", "--set", "admin_token=s3cret", NULL};
    TU_REQUIRE(svc_start(&s2, tu_redis_port(), extra) == 0, "server with an admin token");
    TU_REQUIRE(svc_set_stock(&s2, "st_guard", 10, "Bearer s3cret") == 200, "stock st_guard");
    svc_resp r;
    svc_req(&s2, "POST", "/miaosha/token?sku=st_guard&step=1", NULL, NULL, &r);
    TU_CHECK(r.status == 401 && svc_jerr_is(&r, "unauthorized") &&
                 strcmp(r.www_auth, "Bearer") == 0,
             "a stepped purchase without the token: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    svc_req(&s2, "POST", "/miaosha/token?sku=st_guard&step=1", NULL, "Bearer wrong", &r);
    TU_CHECK(r.status == 403 && svc_jerr_is(&r, "forbidden"), "with a wrong token: %ld", r.status);
    svc_resp_free(&r);
    svc_req(&s2, "GET", "/steps", NULL, NULL, &r);
    TU_CHECK(r.status == 401, "GET /steps without the token: %ld", r.status);
    svc_resp_free(&r);
    svc_req(&s2, "POST", "/steps/1/next", NULL, "Bearer wrong", &r);
    TU_CHECK(r.status == 403, "next with a wrong token: %ld", r.status);
    svc_resp_free(&r);
    svc_req(&s2, "POST", "/steps/1/run", NULL, NULL, &r);
    TU_CHECK(r.status == 401, "run without the token: %ld", r.status);
    svc_resp_free(&r);
    svc_req(&s2, "GET", "/steps", NULL, "Bearer s3cret", &r);
    TU_CHECK(r.status == 200 && svc_jbool(r.json, "ok") == 1, "GET /steps with it: %ld %s",
             r.status, B(&r));
    svc_resp_free(&r);
    svc_audit au;
    TU_CHECK(svc_get_audit(&s2, "st_guard", &au) == 200 && au.sold == 0 && au.stock == 10,
             "nothing bought: sold %lld", au.sold);
    TU_CHECK(svc_stop(&s2, 5000) == 0, "clean stop (guarded server)");
}

/* With teach.step_timeout_s=1 and no token: abandoned after the lock and
 * at start; then SIGTERM while a step is paused. */
static void abandoned(void)
{
    svc_server s3;
    const char *extra[] = {"--set", "faults.enabled=true", "--set", "teach.step_timeout_s=1", NULL};
    TU_REQUIRE(svc_start(&s3, tu_redis_port(), extra) == 0, "server with a 1 s step timeout");
    TU_REQUIRE(svc_set_stock(&s3, "st_gone", 10, NULL) == 200, "stock st_gone");
    buyer a, z;
    start(&a, &s3, "token", "st_gone", "A", "&lease_ms=60000");
    start(&z, &s3, "token", "st_gone", "Z", "");
    next_to(&a, "locked");
    TU_CHECK(next_to(&a, "read") == 10, "A reads 10");
    int64_t t0 = lc_now_ms();
    svc_resp *ra = finish(&a), *rz = finish(&z);
    int64_t waited = lc_now_ms() - t0;
    TU_CHECK(ra->status == 409 && svc_jerr_is(ra, "step_abandoned") &&
                 svc_jdetail_has(ra, "stage read"),
             "left paused at read: 409 step_abandoned: %ld %s", ra->status, B(ra));
    TU_CHECK(waited >= 700 && waited < tu_slack(5000), "abandoned after about 1 s: %lld ms",
             (long long)waited);
    TU_CHECK(rz->status == 409 && svc_jerr_is(rz, "step_abandoned") &&
                 svc_jdetail_has(rz, "nothing was done"),
             "left at start: 409 step_abandoned: %ld %s", rz->status, B(rz));
    svc_resp_free(ra);
    svc_resp_free(rz);
    char lk[64];
    TU_CHECK(tu_redis_str(tu_redis_port(), lk, sizeof lk, "GET miaosha:{st_gone}:lock:token") ==
                     0 &&
                 lk[0] == '\0',
             "its lock released long before its 60 s lease: '%s'", lk);
    svc_audit au;
    TU_CHECK(svc_get_audit(&s3, "st_gone", &au) == 200 && au.stock == 10 && au.sold == 0,
             "nothing written: stock %lld sold %lld", au.stock, au.sold);
    svc_resp r;
    svc_req(&s3, "POST", "/steps/1/next", NULL, NULL, &r);
    cJSON *st = cJSON_GetObjectItemCaseSensitive(r.json, "step");
    TU_CHECK(r.status == 200 && svc_jbool(st, "abandoned") == 1 && svc_jnum(st, "status") == 409,
             "the abandoned step is listed as such: %s", B(&r));
    svc_resp_free(&r);

    /* SIGTERM while a step sits paused holding its lock: 503, nothing
     * written, and the server stops in time. */
    start(&a, &s3, "token", "st_gone", "S", "");
    next_to(&a, "locked");
    TU_CHECK(svc_stop(&s3, 5000) == 0, "the server stops with a step paused");
    ra = finish(&a);
    TU_CHECK(ra->status == 503 && svc_jerr_is(ra, "shutting_down"), "SIGTERM: %ld %s", ra->status,
             B(ra));
    svc_resp_free(ra);
    TU_CHECK(tu_redis_int(tu_redis_port(), "EXISTS miaosha:{st_gone}:lock:token") == 0,
             "its lock released");
}

static void disabled(void)
{
    svc_server s4;
    TU_REQUIRE(svc_start(&s4, tu_redis_port(), NULL) == 0, "server without faults.enabled");
    svc_resp r;
    svc_req(&s4, "POST", "/miaosha/token?step=1", NULL, NULL, &r);
    TU_CHECK(r.status == 403 && svc_jerr_is(&r, "faults_disabled"), "step=1: %ld %s", r.status,
             B(&r));
    svc_resp_free(&r);
    svc_req(&s4, "GET", "/steps", NULL, NULL, &r);
    TU_CHECK(r.status == 403 && svc_jerr_is(&r, "faults_disabled"), "GET /steps: %ld", r.status);
    svc_resp_free(&r);
    svc_req(&s4, "POST", "/steps/1/run", NULL, NULL, &r);
    TU_CHECK(r.status == 403, "run: %ld", r.status);
    svc_resp_free(&r);
    svc_req(&s4, "POST", "/miaosha/token?step=0&sku=st_plain", NULL, NULL, &r);
    TU_CHECK(r.status != 403, "step=0 is an ordinary purchase: %ld", r.status);
    svc_resp_free(&r);
    TU_CHECK(svc_stop(&s4, 5000) == 0, "clean stop (no faults)");
}

int main(void)
{
    const char *extra[] = {"--set", "faults.enabled=true", "--set", "server.workers=8", NULL};
    TU_REQUIRE(svc_start(&srv, tu_redis_port(), extra) == 0, "server starts");
    lost_update();
    lock_waits();
    lease_lesson("token");
    lease_lesson("fenced");
    lua_one_step();
    bounds();
    TU_CHECK(svc_stop(&srv, 5000) == 0, "clean stop");
    abandoned();
    guarded();
    disabled();
    return tu_done();
}

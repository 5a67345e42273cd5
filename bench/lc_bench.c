/* lc_bench — the lock core against the round-trip bound, in one run.
 *
 *   lc_bench PORT [SECONDS [all|peer]]
 *   lc_bench PORT SECONDS redlock HOST:PORT,HOST:PORT,... (odd count, 3..9)
 *
 * Part 1, uncontended: per mode (fenced too: its acquire script and
 * token's release), acquire+release cycles/s on one thread, and
 * in the same run a raw hiredis loop sending the very same commands (the
 * round-trip bound). Runs alternate raw/mode three times and report medians,
 * because this machine is shared and noisy: only the ratio means anything.
 *
 * Part 2, contended: 8 and 32 threads loop acquire → GET → SET → release on
 * one key (the critical section of the seckill walkthrough, docs/locks.md) for
 * each mode; reports critical sections/s, fairness = min/max completions
 * per thread, and what Redis says the run cost it per section (commands,
 * including those scripts call, and µs spent in scripts: see redis_work).
 * token and reentrant, the pair the target compares, alternate three times
 * (medians). Then the same pair with the pipelined section: GET in the
 * acquire's round trip (lc_acquire_pipe), SET in the release's
 * (lc_release_pipe), as the service's purchase.pipeline does.
 *
 * Part "peer" (alone): token acquire+release cycles/s, 8 threads on one key
 * (wait 1000 ms), the figure bench/run.sh sets against redis-py's Lock
 * (bench/redis_py_lock.py) with 8 threads on the same key pattern.
 *
 * Part "redlock" (alone): acquire+release cycles/s, redlock on the given
 * nodes against token on PORT, in the same run (alternating, medians of 3),
 * at 1 thread (target: redlock >= 0.5x token: the N nodes are asked in
 * parallel, so a cycle should cost about one round trip more than token's
 * two, not N times as many) and 8 threads (shown), each thread on its own
 * key, so the figure is the fan-out's cost, not contention.
 *
 * Targets (bench/README.md): each Redis mode >= 0.9x its raw loop; with 8
 * and 32 threads reentrant (pub/sub) >= 0.8x token (polling) with fairness
 * >= 0.5 (Redisson's semantics kept: no local handoff to beat polling);
 * pipelined, reentrant >= 0.8x token with fairness >= 0.5.
 */
#include "lockcore.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int port;
static double seconds = 2.0;
static lc_client *cli;

/* Seconds on lockcore's monotonic clock. */
static double now_s(void)
{
    return (double)lc_now_us() / 1e6;
}

static redisReply *cmd_or_die(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "lc_bench: redis: %s\n", r ? r->str : c->errstr);
        exit(1);
    }
    return r;
}

/* --- raw loops: the same commands as the mode, straight through hiredis --- */

static char sha_token_release[41], sha_acquire[41], sha_release[41], sha_fenced[41];

static void load_scripts(redisContext *c)
{
    static const char *tr = "if redis.call('get', KEYS[1]) == ARGV[1] then return "
                            "redis.call('del', KEYS[1]) end return 0";
    static const char *ra = "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', "
                            "KEYS[1], ARGV[2]) == 1)) then "
                            "redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', "
                            "KEYS[1], ARGV[1]); return nil; end; "
                            "return redis.call('pttl', KEYS[1]);";
    static const char *rr =
        "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; "
        "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
        "if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; "
        "else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; "
        "return nil;";
    static const char *fa = "if redis.call('exists', KEYS[1]) == 1 then return false end "
                            "local fence = redis.call('incr', KEYS[2]) "
                            "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return fence";
    redisReply *r = cmd_or_die(c, "SCRIPT LOAD %s", tr);
    snprintf(sha_token_release, 41, "%s", r->str);
    freeReplyObject(r);
    r = cmd_or_die(c, "SCRIPT LOAD %s", fa);
    snprintf(sha_fenced, 41, "%s", r->str);
    freeReplyObject(r);
    r = cmd_or_die(c, "SCRIPT LOAD %s", ra);
    snprintf(sha_acquire, 41, "%s", r->str);
    freeReplyObject(r);
    r = cmd_or_die(c, "SCRIPT LOAD %s", rr);
    snprintf(sha_release, 41, "%s", r->str);
    freeReplyObject(r);
}

static double raw_rate(redisContext *c, lc_mode mode)
{
    const char *key = "bench:{raw}:lock";
    long n = 0;
    double t0 = now_s(), end = t0 + seconds;
    while (now_s() < end) {
        for (int i = 0; i < 50; i++, n++) {
            if (mode == LC_SETNX) {
                freeReplyObject(cmd_or_die(c, "SETNX %s 1", key));
                freeReplyObject(cmd_or_die(c, "PEXPIRE %s 5000", key));
                freeReplyObject(cmd_or_die(c, "DEL %s", key));
            } else if (mode == LC_TOKEN) {
                const char *tok = "6f1c9a5e-3b7d-4c2a-9e8f-0a1b2c3d4e5f";
                freeReplyObject(cmd_or_die(c, "SET %s %s NX PX 5000", key, tok));
                freeReplyObject(cmd_or_die(c, "EVALSHA %s 1 %s %s", sha_token_release, key, tok));
            } else if (mode == LC_FENCED) {
                const char *tok = "6f1c9a5e-3b7d-4c2a-9e8f-0a1b2c3d4e5f";
                freeReplyObject(cmd_or_die(c, "EVALSHA %s 2 %s bench:{raw}:fence %s 5000",
                                           sha_fenced, key, tok));
                freeReplyObject(cmd_or_die(c, "EVALSHA %s 1 %s %s", sha_token_release, key, tok));
            } else {
                const char *field = "6f1c9a5e-3b7d-4c2a-9e8f-0a1b2c3d4e5f:bench";
                freeReplyObject(cmd_or_die(c, "EVALSHA %s 1 %s 30000 %s", sha_acquire, key, field));
                freeReplyObject(cmd_or_die(c,
                                           "EVALSHA %s 2 %s redisson_lock__channel:%s 0 30000 %s",
                                           sha_release, key, key, field));
            }
        }
    }
    return n / (now_s() - t0);
}

static double mode_rate(lc_conn *conn, lc_mode mode)
{
    lc_lock_args a;
    memset(&a, 0, sizeof a);
    a.mode = mode;
    a.key = "bench:{lc}:lock";
    a.fence_key = "bench:{lc}:fence"; /* fenced's counter; ignored by the others */
    a.owner = "bench";
    a.lease_ms = mode == LC_REENTRANT ? 0 : 5000;
    long n = 0;
    double t0 = now_s(), end = t0 + seconds;
    while (now_s() < end) {
        for (int i = 0; i < 50; i++, n++) {
            lc_guard *g;
            if (lc_acquire(conn, &a, &g) != LC_OK || lc_release(conn, g) != LC_OK) {
                fprintf(stderr, "lc_bench: %s cycle failed: %s\n", lc_mode_name(mode),
                        lc_conn_errstr(conn));
                exit(1);
            }
        }
    }
    return n / (now_s() - t0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void uncontended(void)
{
    struct timeval tv = {2, 0};
    redisContext *raw = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!raw || raw->err) {
        fprintf(stderr, "lc_bench: cannot connect to 127.0.0.1:%d\n", port);
        exit(1);
    }
    load_scripts(raw);
    lc_conn *conn;
    lc_conn_new(cli, &conn);
    printf("uncontended acquire+release, 1 thread, %.1f s x 3 alternating runs, medians\n",
           seconds);
    printf("  %-10s %12s %12s %8s %s\n", "mode", "cycles/s", "raw loop/s", "ratio", "target");
    const lc_mode modes[] = {LC_NONE, LC_MUTEX, LC_SETNX, LC_TOKEN, LC_REENTRANT, LC_FENCED};
    for (int i = 0; i < 6; i++) {
        double m[3], r[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            if (modes[i] >= LC_SETNX)
                r[k] = raw_rate(raw, modes[i]);
            m[k] = mode_rate(conn, modes[i]);
        }
        qsort(m, 3, sizeof *m, cmp_double);
        qsort(r, 3, sizeof *r, cmp_double);
        if (modes[i] >= LC_SETNX)
            printf("  %-10s %12.0f %12.0f %8.2f %s\n", lc_mode_name(modes[i]), m[1], r[1],
                   m[1] / r[1], m[1] / r[1] >= 0.9 ? ">= 0.9 ok" : ">= 0.9 MISSED");
        else
            printf("  %-10s %12.0f %12s %8s (no Redis)\n", lc_mode_name(modes[i]), m[1], "-", "-");
    }
    lc_conn_free(conn);
    redisFree(raw);
}

/* --- contended ----------------------------------------------------------- */

typedef struct worker {
    lc_mode mode;
    int id;
    int section; /* 0 none (acquire+release), 1 GET/SET, 2 pipelined GET/SET */
    const char *key;
    atomic_bool *stop;
    long done, failed;
} worker;

/* The pipelined critical section: GET with the acquire, SET with the
 * release. */
static int pipelined_section(lc_conn *conn, const lc_lock_args *a)
{
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "GET bench:{cs}:stock");
    lc_guard *g;
    if (lc_acquire_pipe(conn, a, &p, &g) != LC_OK) {
        lc_pipe_clear(&p);
        return -1;
    }
    redisReply *r = lc_pipe_take(&p, 0);
    long v = r && r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
    if (r)
        freeReplyObject(r);
    lc_pipe_clear(&p);
    lc_pipe_append(&p, "SET bench:{cs}:stock %ld", v + 1);
    lc_release_pipe(conn, g, &p);
    lc_pipe_clear(&p);
    return 0;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    lc_conn *conn;
    lc_conn_new(cli, &conn);
    char owner[32];
    snprintf(owner, sizeof owner, "w%d", w->id);
    lc_lock_args a;
    memset(&a, 0, sizeof a);
    a.mode = w->mode;
    a.key = w->key;
    a.owner = owner;
    a.lease_ms = w->mode == LC_REENTRANT ? 0 : 5000;
    a.wait_ms = 1000;
    while (!atomic_load(w->stop)) {
        lc_guard *g;
        if (w->section == 2) {
            if (pipelined_section(conn, &a) != 0)
                w->failed++;
            else
                w->done++;
            continue;
        }
        if (w->section == 0) {
            if (lc_acquire(conn, &a, &g) != LC_OK) {
                w->failed++;
                continue;
            }
            if (lc_release(conn, g) != LC_OK)
                w->failed++;
            else
                w->done++;
            continue;
        }
        if (lc_acquire(conn, &a, &g) != LC_OK) {
            w->failed++;
            continue;
        }
        redisContext *c = lc_conn_redis(conn);
        redisReply *r = redisCommand(c, "GET bench:{cs}:stock");
        long v = r && r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
        if (r)
            freeReplyObject(r);
        r = redisCommand(c, "SET bench:{cs}:stock %ld", v + 1);
        if (r)
            freeReplyObject(r);
        lc_release(conn, g);
        w->done++;
    }
    lc_conn_free(conn);
    return NULL;
}

/* Redis's own account of its work so far (INFO commandstats): commands
 * executed (INFO and CONFIG excluded; Redis counts the commands a script
 * calls as well as the EVALSHA itself) and microseconds spent running
 * scripts (EVAL/EVALSHA, their calls included). Redis serves one command at
 * a time and sits on the lock's critical path, so script time per critical
 * section is a cost a mode adds there, and unlike sections/s it hardly
 * depends on the shared machine's mood. */
typedef struct redis_work {
    double calls, script_us;
} redis_work;

static redis_work redis_work_now(redisContext *c)
{
    redis_work w = {0, 0};
    redisReply *r = cmd_or_die(c, "INFO commandstats");
    char *save = NULL;
    for (char *line = strtok_r(r->str, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        char name[64];
        long long calls, usec;
        if (sscanf(line, "cmdstat_%63[^:]:calls=%lld,usec=%lld", name, &calls, &usec) != 3 ||
            !strcmp(name, "info") || !strncmp(name, "config", 6))
            continue;
        w.calls += calls;
        if (!strcmp(name, "eval") || !strcmp(name, "evalsha"))
            w.script_us += usec;
    }
    freeReplyObject(r);
    return w;
}

static redisContext *stats_conn;

/* One contended run of mode: critical sections/s; fairness and Redis's
 * script microseconds per section through *fair and *script_us. */
static double contended_run(lc_mode mode, int threads, int section, double *fair, double *script_us)
{
    redis_work before = redis_work_now(stats_conn);
    worker ws[64];
    pthread_t th[64];
    atomic_bool stop = false;
    double t0 = now_s();
    for (int k = 0; k < threads; k++) {
        ws[k] = (worker){mode,  k, section, section ? "bench:{cs}:lock" : "bench:{peer}:lock",
                         &stop, 0, 0};
        pthread_create(&th[k], NULL, worker_main, &ws[k]);
    }
    struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&stop, true);
    long total = 0, failed = 0, mn = -1, mx = 0;
    for (int k = 0; k < threads; k++) {
        pthread_join(th[k], NULL);
        total += ws[k].done;
        failed += ws[k].failed;
        if (mn < 0 || ws[k].done < mn)
            mn = ws[k].done;
        if (ws[k].done > mx)
            mx = ws[k].done;
    }
    double rate = total / (now_s() - t0);
    redis_work after = redis_work_now(stats_conn);
    double n = total ? total : 1;
    *fair = mx ? (double)mn / mx : 0;
    *script_us = (after.script_us - before.script_us) / n;
    printf("  %-10s %12.0f %10.2f %8ld %10.1f %12.1f\n", lc_mode_name(mode), rate, *fair, failed,
           (after.calls - before.calls) / n, *script_us);
    return rate;
}

/* mutex and setnx once each for reference; then token and reentrant
 * alternate three times and their medians are compared, because the
 * machine's speed drifts within seconds (bench/README.md, "Noise"). */
static void contended(int threads)
{
    printf("contended critical sections (acquire, GET, SET, release), %d threads, %.1f s per run\n",
           threads, seconds);
    printf("  %-10s %12s %10s %8s %10s %12s\n", "mode", "sections/s", "fairness", "failed",
           "redis cmds", "script us");
    double fair, script;
    contended_run(LC_MUTEX, threads, 1, &fair, &script);
    contended_run(LC_SETNX, threads, 1, &fair, &script);
    double tok[3], re[3], ref[3], tscript[3], rscript[3];
    for (int k = 0; k < 3; k++) {
        tok[k] = contended_run(LC_TOKEN, threads, 1, &fair, &tscript[k]);
        re[k] = contended_run(LC_REENTRANT, threads, 1, &fair, &rscript[k]);
        ref[k] = fair;
    }
    qsort(tok, 3, sizeof *tok, cmp_double);
    qsort(re, 3, sizeof *re, cmp_double);
    qsort(ref, 3, sizeof *ref, cmp_double);
    qsort(tscript, 3, sizeof *tscript, cmp_double);
    qsort(rscript, 3, sizeof *rscript, cmp_double);
    printf("  medians: token %.0f, reentrant %.0f sections/s; Redis script time per section: token "
           "%.1f us, "
           "reentrant %.1f us\n",
           tok[1], re[1], tscript[1], rscript[1]);
    printf("  reentrant/token = %.2f (target >= 0.8), reentrant fairness %.2f (worst %.2f; target "
           ">= 0.5): %s\n",
           re[1] / tok[1], ref[1], ref[0],
           re[1] >= 0.8 * tok[1] && ref[0] >= 0.5 ? "ok" : "MISSED");

    printf("pipelined critical sections (acquire+GET in one round trip, SET+release in one), %d "
           "threads\n",
           threads);
    for (int k = 0; k < 3; k++) {
        tok[k] = contended_run(LC_TOKEN, threads, 2, &fair, &tscript[k]);
        re[k] = contended_run(LC_REENTRANT, threads, 2, &fair, &rscript[k]);
        ref[k] = fair;
    }
    qsort(tok, 3, sizeof *tok, cmp_double);
    qsort(re, 3, sizeof *re, cmp_double);
    qsort(ref, 3, sizeof *ref, cmp_double);
    printf("  pipelined: token %.0f, reentrant %.0f sections/s\n", tok[1], re[1]);
    printf("  pipelined: reentrant vs token %.2f (target >= 0.8), reentrant fairness %.2f (worst "
           "%.2f; "
           "target >= 0.5): %s\n",
           re[1] / tok[1], ref[1], ref[0],
           re[1] >= 0.8 * tok[1] && ref[0] >= 0.5 ? "ok" : "MISSED");
}

/* Token acquire+release on one key from 8 threads, for the peer
 * comparison (bench/redis_py_lock.py does the same with redis-py). */
static void peer(void)
{
    double fair, script;
    double rate = contended_run(LC_TOKEN, 8, 0, &fair, &script);
    printf("peer token threads=8 cycles_per_s=%.0f fairness=%.2f\n", rate, fair);
}

/* --- redlock against token ------------------------------------------------ */

static lc_client *cli_rl;

typedef struct rl_worker {
    lc_client *c;
    lc_mode mode;
    int id;
    atomic_bool *stop;
    long done, failed;
} rl_worker;

static void *rl_worker_main(void *arg)
{
    rl_worker *w = arg;
    lc_conn *conn;
    if (lc_conn_new(w->c, &conn) != LC_OK)
        return NULL;
    char key[64];
    snprintf(key, sizeof key, "bench:{rl-%d}:lock", w->id);
    lc_lock_args a;
    memset(&a, 0, sizeof a);
    a.mode = w->mode;
    a.key = key;
    a.owner = "bench";
    a.lease_ms = 5000;
    while (!atomic_load(w->stop)) {
        lc_guard *g;
        if (lc_acquire(conn, &a, &g) != LC_OK || lc_release(conn, g) != LC_OK)
            w->failed++;
        else
            w->done++;
    }
    lc_conn_free(conn);
    return NULL;
}

static double rl_run(lc_mode mode, int threads, long *failed)
{
    pthread_t t[8];
    rl_worker w[8];
    atomic_bool stop = false;
    double t0 = now_s();
    for (int k = 0; k < threads; k++) {
        w[k] = (rl_worker){
            .c = mode == LC_REDLOCK ? cli_rl : cli, .mode = mode, .id = k, .stop = &stop};
        pthread_create(&t[k], NULL, rl_worker_main, &w[k]);
    }
    struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&stop, true);
    long done = 0;
    for (int k = 0; k < threads; k++) {
        pthread_join(t[k], NULL);
        done += w[k].done;
        *failed += w[k].failed;
    }
    return done / (now_s() - t0);
}

static int redlock_part(char *list)
{
    const char *nodes[LC_REDLOCK_MAX_NODES];
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == LC_REDLOCK_MAX_NODES) {
            fprintf(stderr, "lc_bench: at most %d redlock nodes\n", LC_REDLOCK_MAX_NODES);
            return 2;
        }
        nodes[n++] = tok;
    }
    lc_options o;
    lc_options_init(&o);
    o.redis_port = port;
    o.redlock_nodes = nodes;
    o.redlock_node_count = n;
    char err[256];
    if (lc_client_new(&o, &cli_rl, err, sizeof err) != LC_OK) {
        fprintf(stderr, "lc_bench: %s\n", err);
        return 2;
    }
    printf("redlock (%d nodes) vs token (1 node), acquire+release cycles/s, one key per "
           "thread, %.1f s x 3 alternating runs, medians\n",
           n, seconds);
    printf("  %-8s %12s %12s %8s %8s %s\n", "threads", "redlock/s", "token/s", "ratio", "failed",
           "target");
    const int threads[] = {1, 8};
    for (int i = 0; i < 2; i++) {
        double rl[3], tok[3];
        long failed = 0;
        for (int k = 0; k < 3; k++) {
            tok[k] = rl_run(LC_TOKEN, threads[i], &failed);
            rl[k] = rl_run(LC_REDLOCK, threads[i], &failed);
        }
        qsort(rl, 3, sizeof *rl, cmp_double);
        qsort(tok, 3, sizeof *tok, cmp_double);
        double ratio = rl[1] / tok[1];
        printf("  %-8d %12.0f %12.0f %8.2f %8ld %s\n", threads[i], rl[1], tok[1], ratio, failed,
               threads[i] == 1 ? (ratio >= 0.5 ? ">= 0.5 ok" : ">= 0.5 MISSED") : "(shown)");
    }
    lc_client_free(cli_rl);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: lc_bench PORT [SECONDS]\n");
        return 2;
    }
    port = atoi(argv[1]);
    if (argc > 2)
        seconds = atof(argv[2]);
    int only_peer = argc > 3 && strcmp(argv[3], "peer") == 0;
    int only_redlock = argc > 4 && strcmp(argv[3], "redlock") == 0;
    if (argc > 3 && !only_peer && !only_redlock && strcmp(argv[3], "all") != 0) {
        fprintf(stderr, "usage: lc_bench PORT [SECONDS [all|peer]]\n"
                        "       lc_bench PORT SECONDS redlock HOST:PORT,HOST:PORT,...\n");
        return 2;
    }
    lc_options o;
    lc_options_init(&o);
    o.redis_port = port;
    char err[256];
    if (lc_client_new(&o, &cli, err, sizeof err) != LC_OK) {
        fprintf(stderr, "lc_bench: %s\n", err);
        return 1;
    }
    if (only_redlock) {
        int rc = redlock_part(argv[4]);
        lc_client_free(cli);
        return rc;
    }
    if (!only_peer)
        uncontended();
    struct timeval tv = {2, 0};
    stats_conn = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!stats_conn || stats_conn->err) {
        fprintf(stderr, "lc_bench: cannot connect to 127.0.0.1:%d\n", port);
        return 1;
    }
    if (only_peer) {
        printf("  %-10s %12s %10s %8s %10s %12s\n", "mode", "cycles/s", "fairness", "failed",
               "redis cmds", "script us");
        peer();
    } else {
        contended(8);
        contended(32);
    }
    redisFree(stats_conn);
    lc_client_free(cli);
    return 0;
}

/* lg_engine.c — see lg_engine.h. */
#include "lg_engine.h"

#include <lockcore.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lg_thread.h"

#define SBUF_CAP 4096
#define RBUF_INIT 8192
#define RBUF_MAX (16u << 20)
#define RECONNECT_BACKOFF_NS 50000000LL

enum cstate { C_WAIT, C_CONNECTING, C_IDLE, C_SENDING, C_RECEIVING, C_DONE };

typedef struct conn {
    int fd;
    int target;
    enum cstate state;
    int in_flight;    /* a request is claimed and not yet ended */
    int had_response; /* the connection completed at least one response */
    int out_armed;    /* EPOLLOUT asked for (a send hit EAGAIN): level-
                         triggered, it must go once the send is done */
    uint64_t idx;
    int64_t t_start;  /* ns */
    int64_t retry_at; /* C_WAIT: ns; C_CONNECTING: deadline ns */
    const char *req;
    size_t req_len, req_off;
    char *sbuf;
    char *rbuf;
    size_t rlen, rcap;
    lg_http_parser p;
} conn;

/* The start barrier. Not a pthread_barrier_t: when a thread cannot be
 * created, the ones already waiting must be sent home (aborted), which a
 * pthread barrier cannot do. The last worker to arrive opens it. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, need;
    int open, aborted;
} gate;

static void gate_init(gate *g, int need)
{
    lg_pt_must(pthread_mutex_init(&g->mu, NULL), "engine: gate mutex");
    lg_pt_must(pthread_cond_init(&g->cv, NULL), "engine: gate cond");
    g->arrived = 0;
    g->need = need;
    g->open = g->aborted = 0;
}

/* Waits until every worker arrived (0) or the start was aborted (-1). */
static int gate_wait(gate *g)
{
    lg_pt_must(pthread_mutex_lock(&g->mu), "engine: gate lock");
    if (++g->arrived == g->need) {
        g->open = 1;
        lg_pt_must(pthread_cond_broadcast(&g->cv), "engine: gate broadcast");
    }
    while (!g->open && !g->aborted)
        lg_pt_must(pthread_cond_wait(&g->cv, &g->mu), "engine: gate wait");
    int rc = g->open ? 0 : -1;
    lg_pt_must(pthread_mutex_unlock(&g->mu), "engine: gate unlock");
    return rc;
}

static void gate_abort(gate *g)
{
    lg_pt_must(pthread_mutex_lock(&g->mu), "engine: gate lock");
    g->aborted = 1;
    lg_pt_must(pthread_cond_broadcast(&g->cv), "engine: gate broadcast");
    lg_pt_must(pthread_mutex_unlock(&g->mu), "engine: gate unlock");
}

static void gate_destroy(gate *g)
{
    lg_pt_must(pthread_cond_destroy(&g->cv), "engine: gate cond destroy");
    lg_pt_must(pthread_mutex_destroy(&g->mu), "engine: gate mutex destroy");
}

typedef struct shared {
    const lg_engine_cfg *cfg;
    _Atomic uint64_t next;
    gate start;
    int64_t end_ns; /* absolute deadline */
    struct sockaddr_in *addrs;
} shared;

typedef struct worker {
    shared *sh;
    int id;
    int nconns;
    conn *conns;
    int ep;
    _Atomic uint64_t done; /* for progress */
    int64_t t0, t1;
    int64_t now;    /* cached clock: set after each response and event */
    int64_t end_ns; /* this thread's end: barrier exit + duration */
    lg_engine_result r;
    char pad[64];
} worker;

const char *lg_err_name(lg_err e)
{
    static const char *n[] = {"none", "connect", "closed", "parse", "timeout", "io"};
    return (unsigned)e < LG_ERR_COUNT ? n[e] : "?";
}

/* The engine counts in ns; the clock (lockcore's, the project's one) in µs. */
static int64_t now_ns(void)
{
    return lc_now_us() * 1000;
}

static int stop_requested(const shared *sh)
{
    /* set by a signal handler, or by another thread (the matrix's fault
     * scenarios stop their background burst from the main thread) */
    return sh->cfg->stop && __atomic_load_n(sh->cfg->stop, __ATOMIC_RELAXED);
}

static void conn_close(worker *w, conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    c->rlen = 0;
}

/* Ends the current request with an error or a response. */
static void finish(worker *w, conn *c, int status, lg_err err, const char *body, size_t blen)
{
    const lg_engine_cfg *cfg = w->sh->cfg;
    int64_t t = now_ns();
    w->now = t;
    uint64_t lat = (uint64_t)((t - c->t_start) / 1000);
    if (err == LG_ERR_NONE) {
        w->r.completed++;
        if (status >= 0 && status < 600)
            w->r.status[status]++;
        lg_hist_record(&w->r.hist, lat);
    } else {
        w->r.errors[err]++;
    }
    c->in_flight = 0;
    if (cfg->done)
        cfg->done(cfg->done_ud, c->idx, status, err, body, blen, lat);
    atomic_store_explicit(&w->done, atomic_load_explicit(&w->done, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    w->t1 = t;
}

/* Claims the next request index; 0 when there is no more work. */
static int claim(worker *w, uint64_t *idx)
{
    shared *sh = w->sh;
    if (stop_requested(sh))
        return 0;
    if (sh->cfg->requests == 0) {
        if (w->now >= w->end_ns)
            return 0;
        *idx = atomic_fetch_add_explicit(&sh->next, 1, memory_order_relaxed);
        return 1;
    }
    if (atomic_load_explicit(&sh->next, memory_order_relaxed) >= sh->cfg->requests)
        return 0;
    uint64_t i = atomic_fetch_add_explicit(&sh->next, 1, memory_order_relaxed);
    if (i >= sh->cfg->requests)
        return 0;
    *idx = i;
    return 1;
}

static void start_connect(worker *w, conn *c);

static void schedule_reconnect(worker *w, conn *c, int64_t delay_ns)
{
    conn_close(w, c);
    c->state = C_WAIT;
    c->retry_at = now_ns() + delay_ns;
}

static void flush_send(worker *w, conn *c);

/* Sends the next request on an idle connected conn (or parks it). */
static void start_request(worker *w, conn *c)
{
    uint64_t idx;
    if (!claim(w, &idx)) {
        c->state = C_DONE;
        return;
    }
    const lg_engine_cfg *cfg = w->sh->cfg;
    c->idx = idx;
    c->in_flight = 1;
    c->t_start = w->now;
    size_t len = 0;
    c->req = cfg->build(cfg->build_ud, idx, c->target, c->sbuf, SBUF_CAP, &len);
    if (!c->req || len == 0) {
        finish(w, c, 0, LG_ERR_IO, NULL, 0);
        c->state = C_IDLE;
        return; /* the caller loops */
    }
    c->req_len = len;
    c->req_off = 0;
    c->rlen = 0;
    lg_http_parser_init(&c->p, 0);
    c->state = C_SENDING;
    flush_send(w, c);
}

static void flush_send(worker *w, conn *c)
{
    while (c->req_off < c->req_len) {
        ssize_t n = send(c->fd, c->req + c->req_off, c->req_len - c->req_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->req_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->out_armed) {
                struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
                epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev);
                c->out_armed = 1;
            }
            return;
        }
        finish(w, c, 0, errno == EPIPE || errno == ECONNRESET ? LG_ERR_CLOSED : LG_ERR_IO, NULL, 0);
        schedule_reconnect(w, c, 0);
        return;
    }
    if (c->state == C_SENDING) {
        c->state = C_RECEIVING;
    }
    if (c->out_armed) { /* sent, whichever path finished it */
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->out_armed = 0;
    }
}

static void on_connected(worker *w, conn *c)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->out_armed = 0;
    c->state = C_IDLE;
    c->had_response = 0;
}

static void connect_failed(worker *w, conn *c, int started)
{
    conn_close(w, c);
    if (started) {
        /* a request routed to a dead backend fails, as through a balancer */
        uint64_t idx;
        if (!claim(w, &idx)) {
            /* nothing left to send: do not keep knocking on a dead backend
             * until the deadline */
            c->state = C_DONE;
            return;
        }
        c->idx = idx;
        c->t_start = now_ns();
        c->in_flight = 1;
        finish(w, c, 0, LG_ERR_CONNECT, NULL, 0);
    }
    c->state = C_WAIT;
    c->retry_at = now_ns() + RECONNECT_BACKOFF_NS;
}

static void start_connect(worker *w, conn *c)
{
    const lg_engine_cfg *cfg = w->sh->cfg;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    c->fd = fd;
    if (fd < 0) {
        c->state = C_WAIT;
        c->retry_at = now_ns() + RECONNECT_BACKOFF_NS;
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = connect(fd, (struct sockaddr *)&w->sh->addrs[c->target], sizeof(struct sockaddr_in));
    if (rc < 0 && errno != EINPROGRESS) {
        close(fd);
        c->fd = -1;
        c->state = C_WAIT; /* caller decides (connect_failed) */
        c->retry_at = -1;
        return;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        close(fd);
        c->fd = -1;
        c->state = C_WAIT;
        c->retry_at = -1;
        return;
    }
    c->state = C_CONNECTING;
    c->retry_at = now_ns() +
                  (cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 2000) * 1000000LL;
}

static int check_connect(conn *c)
{
    int e = 0;
    socklen_t l = sizeof e;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
        return -1;
    return e == 0 ? 0 : -1;
}

/* Reads what is there and completes a response if it is whole. */
static void on_readable(worker *w, conn *c)
{
    for (;;) {
        if (c->rlen == c->rcap) {
            if (c->rcap >= RBUF_MAX) {
                finish(w, c, 0, LG_ERR_PARSE, NULL, 0);
                schedule_reconnect(w, c, 0);
                return;
            }
            char *nb = realloc(c->rbuf, c->rcap * 2);
            if (!nb) {
                finish(w, c, 0, LG_ERR_IO, NULL, 0);
                schedule_reconnect(w, c, 0);
                return;
            }
            c->rbuf = nb;
            c->rcap *= 2;
        }
        ssize_t n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (c->in_flight)
                finish(w, c, 0, errno == ECONNRESET ? LG_ERR_CLOSED : LG_ERR_IO, NULL, 0);
            schedule_reconnect(w, c, 0);
            return;
        }
        if (n == 0 && c->state == C_DONE) {
            conn_close(w, c);
            return;
        }
        if (n == 0) {
            if (c->in_flight) {
                if (c->state == C_RECEIVING && c->rlen > 0 &&
                    lg_http_eof(&c->p, c->rbuf, c->rlen) == LG_HTTP_DONE)
                    finish(w, c, c->p.status, LG_ERR_NONE, c->rbuf + c->p.body_off, c->p.body_len);
                else
                    finish(w, c, 0, LG_ERR_CLOSED, NULL, 0);
            }
            w->r.reconnects++;
            schedule_reconnect(w, c, 0);
            return;
        }
        if (!c->in_flight) {
            /* bytes nobody asked for */
            if (c->state == C_DONE) {
                conn_close(w, c);
                return;
            }
            schedule_reconnect(w, c, 0);
            return;
        }
        c->rlen += (size_t)n;
        lg_http_rc rc = lg_http_parse(&c->p, c->rbuf, c->rlen);
        if (rc == LG_HTTP_INCOMPLETE) {
            if (c->rlen < c->rcap)
                return;
            continue; /* buffer full: grow and read on */
        }
        if (rc == LG_HTTP_ERROR) {
            finish(w, c, 0, LG_ERR_PARSE, NULL, 0);
            schedule_reconnect(w, c, 0);
            return;
        }
        int keep = c->p.keep_alive && c->p.consumed == c->rlen;
        finish(w, c, c->p.status, LG_ERR_NONE, c->rbuf + c->p.body_off, c->p.body_len);
        c->had_response = 1;
        if (!keep) {
            w->r.reconnects++;
            schedule_reconnect(w, c, 0);
            return;
        }
        c->state = C_IDLE;
        return;
    }
}

/* Drives one connection after an event or a timer. */
static void drive(worker *w, conn *c, int started)
{
    for (int guard = 0; guard < 4; guard++) {
        if (c->state == C_IDLE && started) {
            start_request(w, c);
            if (c->state == C_IDLE)
                continue; /* the build failed: try the next index */
            return;
        }
        if (c->state == C_WAIT && c->retry_at == -1) {
            connect_failed(w, c, started);
            return;
        }
        return;
    }
}

static void handle_event(worker *w, conn *c, uint32_t evs, int started)
{
    if (c->state == C_CONNECTING) {
        if (evs & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
            w->now = now_ns();
            if (check_connect(c) == 0) {
                on_connected(w, c);
                drive(w, c, started);
            } else {
                connect_failed(w, c, started);
            }
        }
        return;
    }
    if (c->state == C_SENDING && (evs & EPOLLOUT))
        flush_send(w, c);
    if (evs & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        if (c->fd >= 0)
            on_readable(w, c);
    }
    if (c->state == C_IDLE)
        drive(w, c, started);
}

/* Timers: reconnects that are due, connect timeouts. Returns how many
 * connections still have work (not C_DONE). */
static int timers(worker *w, int started, int64_t now)
{
    int active = 0;
    for (int i = 0; i < w->nconns; i++) {
        conn *c = &w->conns[i];
        if (c->state == C_WAIT && c->retry_at >= 0 && now >= c->retry_at &&
            w->sh->cfg->requests != 0 &&
            atomic_load_explicit(&w->sh->next, memory_order_relaxed) >= w->sh->cfg->requests) {
            /* every request is claimed: a connection still waiting to
             * (re)connect — socket() refused, EMFILE past the fd limit —
             * has nothing left to send and must not hold the run open */
            c->state = C_DONE;
        } else if (c->state == C_WAIT && c->retry_at >= 0 && now >= c->retry_at) {
            start_connect(w, c);
            if (c->state == C_WAIT && c->retry_at == -1)
                connect_failed(w, c, started);
        } else if (c->state == C_CONNECTING && now >= c->retry_at) {
            connect_failed(w, c, started);
        }
        if (c->state != C_DONE)
            active++;
    }
    return active;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    shared *sh = w->sh;
    struct epoll_event evs[256];
    /* 1. connect everything */
    for (int i = 0; i < w->nconns; i++) {
        conn *c = &w->conns[i];
        start_connect(w, c);
        if (c->state == C_WAIT) {
            c->retry_at = now_ns(); /* try again right after the start */
        }
    }
    int64_t limit = now_ns() +
                    (sh->cfg->connect_timeout_ms > 0 ? sh->cfg->connect_timeout_ms : 2000) *
                        1000000LL;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < w->nconns; i++)
            pending += w->conns[i].state == C_CONNECTING;
        if (!pending || now_ns() >= limit || stop_requested(sh))
            break;
        int n = epoll_wait(w->ep, evs, 256, 20);
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (c->state == C_CONNECTING) {
                if (check_connect(c) == 0) {
                    on_connected(w, c);
                } else {
                    conn_close(w, c);
                    c->state = C_WAIT;
                    c->retry_at = now_ns();
                }
            }
        }
    }
    /* 2. barrier: every thread starts its burst together */
    if (gate_wait(&sh->start) < 0) {
        /* another thread could not be created: no load */
        for (int i = 0; i < w->nconns; i++)
            conn_close(w, &w->conns[i]);
        return NULL;
    }
    w->t0 = now_ns();
    w->t1 = w->t0;
    w->now = w->t0;
    w->end_ns = w->t0 + sh->cfg->duration_ms * 1000000LL;
    if (w->end_ns > sh->end_ns)
        w->end_ns = sh->end_ns;
    for (int i = 0; i < w->nconns; i++) {
        conn *c = &w->conns[i];
        if (c->state == C_CONNECTING) {
            /* still connecting: handled by its event or its timeout */
            c->retry_at = w->t0 + 2000000000LL;
        } else if (c->state == C_IDLE) {
            drive(w, c, 1);
        }
    }
    /* 3. the load */
    int64_t next_timer = 0;
    for (;;) {
        int64_t now = now_ns();
        w->now = now;
        if (now >= w->end_ns) {
            w->r.deadline_hit = sh->cfg->requests != 0;
            break;
        }
        if (stop_requested(sh)) {
            w->r.stopped = 1;
            break;
        }
        if (now >= next_timer) {
            if (timers(w, 1, now) == 0)
                break;
            next_timer = now + 10000000LL;
        }
        int64_t left_ms = (w->end_ns - now) / 1000000 + 1;
        int n = epoll_wait(w->ep, evs, 256, left_ms < 10 ? (int)left_ms : 10);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0)
            w->now = now_ns();
        for (int i = 0; i < n; i++)
            handle_event(w, evs[i].data.ptr, evs[i].events, 1);
    }
    /* whatever is still in flight ends now */
    for (int i = 0; i < w->nconns; i++) {
        conn *c = &w->conns[i];
        if (c->in_flight) {
            if (sh->cfg->requests != 0)
                finish(w, c, 0, LG_ERR_TIMEOUT, NULL, 0);
            else
                c->in_flight = 0; /* bench: an unfinished request is not counted */
        }
        conn_close(w, c);
    }
    return NULL;
}

int lg_engine_run(const lg_engine_cfg *cfg, lg_engine_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    lg_hist_init(&res->hist);
    if (!cfg->targets || cfg->ntargets < 1 || cfg->concurrency < 1 || !cfg->build ||
        cfg->duration_ms <= 0) {
        snprintf(err, errlen, "engine: bad configuration");
        return -1;
    }
    int nthreads = cfg->threads;
    if (nthreads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = cpus >= 2 ? 2 : 1;
    }
    if (nthreads > cfg->concurrency)
        nthreads = cfg->concurrency;
    if (nthreads > 64)
        nthreads = 64;
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.cfg = cfg;
    atomic_init(&sh.next, 0);
    sh.addrs = calloc((size_t)cfg->ntargets, sizeof *sh.addrs);
    worker *ws = calloc((size_t)nthreads, sizeof *ws);
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    conn *conns = calloc((size_t)cfg->concurrency, sizeof *conns);
    int *joined = calloc((size_t)nthreads, sizeof *joined);
    int rc = -1, nstarted = 0, barrier = 0;
    if (!sh.addrs || !ws || !tids || !conns || !joined) {
        snprintf(err, errlen, "engine: out of memory");
        goto out;
    }
    for (int t = 0; t < nthreads; t++)
        ws[t].ep = -1;
    for (int i = 0; i < cfg->ntargets; i++) {
        sh.addrs[i].sin_family = AF_INET;
        sh.addrs[i].sin_port = htons((uint16_t)cfg->targets[i].port);
        if (inet_pton(AF_INET, cfg->targets[i].ip, &sh.addrs[i].sin_addr) != 1) {
            snprintf(err, errlen, "engine: bad address %s", cfg->targets[i].ip);
            goto out;
        }
    }
    /* Connections: j goes to target j % ntargets and thread j % nthreads;
     * each thread's share is contiguous in `conns`. */
    int pos = 0;
    for (int t = 0; t < nthreads; t++) {
        ws[t].sh = &sh;
        ws[t].id = t;
        ws[t].conns = conns + pos;
        ws[t].ep = -1;
        lg_hist_init(&ws[t].r.hist);
        for (int j = t; j < cfg->concurrency; j += nthreads) {
            conn *c = &conns[pos++];
            c->fd = -1;
            c->target = j % cfg->ntargets;
            c->state = C_WAIT;
            c->sbuf = malloc(SBUF_CAP);
            c->rbuf = malloc(RBUF_INIT);
            c->rcap = RBUF_INIT;
            if (!c->sbuf || !c->rbuf) {
                snprintf(err, errlen, "engine: out of memory");
                goto out;
            }
            ws[t].nconns++;
        }
        ws[t].ep = epoll_create1(EPOLL_CLOEXEC);
        if (ws[t].ep < 0) {
            snprintf(err, errlen, "engine: epoll_create1: %s", strerror(errno));
            goto out;
        }
    }
    gate_init(&sh.start, nthreads);
    barrier = 1;
    int64_t conn_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 2000;
    int64_t begin = now_ns();
    /* the deadline counts from after the connect phase at the latest */
    sh.end_ns = begin + (cfg->duration_ms + conn_ms) * 1000000LL;
    for (int t = 0; t < nthreads; t++) {
        int e = pthread_create(&tids[t], NULL, worker_main, &ws[t]);
        if (e != 0) {
            snprintf(err, errlen, "engine: pthread_create: %s", strerror(e));
            break;
        }
        nstarted++;
    }
    if (nstarted != nthreads) {
        /* the gate would never open: send the started threads home */
        gate_abort(&sh.start);
        for (int t = 0; t < nstarted; t++)
            lg_pt_must(pthread_join(tids[t], NULL), "engine: join");
        goto out;
    }
    /* progress, on this thread */
    uint64_t total = cfg->requests;
    for (unsigned tick = 1;; tick++) {
        struct timespec ts = {0, 50000000L};
        nanosleep(&ts, NULL);
        uint64_t done = 0;
        for (int t = 0; t < nthreads; t++)
            done += atomic_load_explicit(&ws[t].done, memory_order_relaxed);
        if (cfg->progress && tick % 4 == 0)
            cfg->progress(cfg->progress_ud, done, total, (double)(now_ns() - begin) / 1e9);
        /* finished when every thread has ended: poll with tryjoin */
        int alive = 0;
        for (int t = 0; t < nthreads; t++) {
            if (joined[t])
                continue;
            int e = pthread_tryjoin_np(tids[t], NULL);
            if (e == 0)
                joined[t] = 1;
            else if (e != EBUSY)
                lg_pt_must(e, "engine: tryjoin");
            if (!joined[t])
                alive++;
        }
        if (!alive)
            break;
    }
    /* the load's elapsed time: from the earliest barrier exit to the last
     * response (bench: to the end of the duration) */
    int64_t t0 = INT64_MAX, t1 = 0;
    for (int t = 0; t < nthreads; t++) {
        if (ws[t].t0 && ws[t].t0 < t0)
            t0 = ws[t].t0;
        if (ws[t].t1 > t1)
            t1 = ws[t].t1;
        lg_engine_result *r = &ws[t].r;
        res->completed += r->completed;
        for (int e = 0; e < LG_ERR_COUNT; e++)
            res->errors[e] += r->errors[e];
        for (int s = 0; s < 600; s++)
            res->status[s] += r->status[s];
        res->reconnects += r->reconnects;
        res->deadline_hit |= r->deadline_hit;
        res->stopped |= r->stopped;
        lg_hist_merge(&res->hist, &r->hist);
    }
    if (cfg->requests == 0 && t0 != INT64_MAX) {
        int64_t dur_end = t0 + cfg->duration_ms * 1000000LL;
        if (t1 < dur_end && !res->stopped)
            t1 = dur_end;
    }
    res->elapsed_s = t0 != INT64_MAX && t1 > t0 ? (double)(t1 - t0) / 1e9 : 0.0;
    uint64_t claimed = atomic_load(&sh.next);
    if (cfg->requests && claimed > cfg->requests)
        claimed = cfg->requests;
    res->claimed = claimed;
    if (cfg->requests == 0) {
        /* bench: the end of the duration also bounds the load */
        res->claimed = res->completed + res->errors[LG_ERR_CONNECT] + res->errors[LG_ERR_CLOSED] +
                       res->errors[LG_ERR_PARSE] + res->errors[LG_ERR_IO];
    }
    rc = 0;
out:
    if (barrier)
        gate_destroy(&sh.start);
    if (ws) {
        for (int t = 0; t < nthreads; t++)
            if (ws[t].ep >= 0)
                close(ws[t].ep);
    }
    if (conns) {
        for (int i = 0; i < cfg->concurrency; i++) {
            free(conns[i].sbuf);
            free(conns[i].rbuf);
        }
    }
    free(conns);
    free(joined);
    free(tids);
    free(ws);
    free(sh.addrs);
    return rc;
}

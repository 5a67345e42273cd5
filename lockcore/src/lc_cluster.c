/* lc_cluster.c — Redis Cluster (lc_cluster.h): hash slots, redirects, the
 * keys of a command, and the client's slot map.
 *
 * The slot is the cluster specification's: CRC16-CCITT (XMODEM: polynomial
 * 0x1021, initial value 0) of the key or of its hash tag, mod 16384.
 *
 * The map comes from CLUSTER NODES, asked of one node at a time until one
 * answers. Which node: first the one that just answered MOVED (it has the
 * newer view of that slot), then the masters of the current map, then the
 * seeds, then every other node ever seen; a node whose connection was just
 * refused comes last. A map that contradicts the MOVED that made the
 * refresh due (the slot still at its old master) comes from a node that
 * has not learnt of the change yet: it is passed over, so a stale node can
 * never undo a redirect just followed (clients that took the first seed's
 * answer ping-ponged between the old and the new master). A master that
 * refuses connections makes a refresh due too, asked of another node: a
 * dead master is never used past the failover that replaced it.
 */
#include "lc_cluster.h"

#include "lc_util.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static uint16_t crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint16_t)(unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

int lc_key_slot(const char *key, size_t len)
{
    /* The tag: between the first '{' and the first '}' after it, when
     * something lies between them; else the whole key ("foo{}{bar}" hashes
     * all of itself, "foo{{bar}}zap" hashes "{bar"). */
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        size_t start = (size_t)(open - key) + 1;
        const char *close = memchr(key + start, '}', len - start);
        if (close != NULL && close > key + start)
            return crc16(key + start, (size_t)(close - (key + start))) & (LC__SLOTS - 1);
    }
    return crc16(key, len) & (LC__SLOTS - 1);
}

/* A decimal in lo..hi spanning exactly [s, e). */
static int number(const char *s, const char *e, long lo, long hi, int *out)
{
    if (s == e || e - s > 6)
        return -1;
    long v = 0;
    for (const char *p = s; p < e; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

void lc__channel_name(const char *prefix, const char *key, char *out, size_t len)
{
    int want = lc_key_slot(key, strlen(key));
    if (strchr(key, '{'))
        snprintf(out, len, "%s:%s", prefix, key);
    else
        snprintf(out, len, "%s:{%s}", prefix, key);
    if (lc_key_slot(out, strlen(out)) == want)
        return;
    /* every slot is the slot of some number below 2^17 (the largest
     * smallest one is 109757): a search of at most a millisecond, for odd
     * keys only */
    for (int n = 0; n < (1 << 17); n++) {
        char tag[16];
        int tl = snprintf(tag, sizeof tag, "%d", n);
        if (lc_key_slot(tag, (size_t)tl) == want) {
            snprintf(out, len, "%s:{%s}%s", prefix, tag, key);
            return;
        }
    }
}

int lc__redirect_parse(const char *str, size_t len, lc__redirect *out)
{
    const char *end = str + len;
    memset(out, 0, sizeof *out);
    if (len > 6 && memcmp(str, "MOVED ", 6) == 0) {
        out->kind = LC__REDIR_MOVED;
        str += 6;
    } else if (len > 4 && memcmp(str, "ASK ", 4) == 0) {
        out->kind = LC__REDIR_ASK;
        str += 4;
    } else {
        return -1;
    }
    const char *sp = memchr(str, ' ', (size_t)(end - str));
    if (sp == NULL || number(str, sp, 0, LC__SLOTS - 1, &out->slot) != 0)
        return -1;
    const char *host = sp + 1, *colon = NULL;
    for (const char *p = host; p < end; p++)
        if (*p == ':')
            colon = p;
    if (colon == NULL || number(colon + 1, end, 1, 65535, &out->port) != 0)
        return -1;
    const char *hend = colon;
    if (hend - host >= 2 && host[0] == '[' && hend[-1] == ']') {
        host++;
        hend--;
    }
    size_t hlen = (size_t)(hend - host);
    if (hlen >= sizeof out->host || memchr(host, ' ', hlen) != NULL)
        return -1;
    memcpy(out->host, host, hlen);
    out->host[hlen] = '\0';
    return 0;
}

bool lc__cluster_try_later(const char *str, size_t len)
{
    static const char *const words[] = {"TRYAGAIN", "CLUSTERDOWN", "LOADING"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i]);
        if (len >= n && memcmp(str, words[i], n) == 0 && (len == n || str[n] == ' '))
            return true;
    }
    return false;
}

/* --- the keys a command names ---------------------------------------------- */

enum {
    K_ONE = 1, /* the first argument */
    K_ALL,     /* every argument */
    K_PAIRS,   /* every other argument from the first (MSET) */
    K_NUMKEYS, /* EVAL-like: numkeys, then that many keys */
    K_NONE,    /* no key */
    K_SECOND   /* the second argument (OBJECT ENCODING key) */
};

typedef struct cmd_spec {
    const char *name;
    unsigned char keys;
    bool reads; /* reads only: lc__cmd.reads */
} cmd_spec;

/* Sorted by name: bsearch. */
static const cmd_spec specs[] = {
    {"APPEND", K_ONE, false},
    {"ASKING", K_NONE, false},
    {"AUTH", K_NONE, false},
    {"BGSAVE", K_NONE, false},
    {"CLIENT", K_NONE, false},
    {"CLUSTER", K_NONE, false},
    {"COMMAND", K_NONE, false},
    {"CONFIG", K_NONE, false},
    {"DBSIZE", K_NONE, false},
    {"DEBUG", K_NONE, false},
    {"DECR", K_ONE, false},
    {"DECRBY", K_ONE, false},
    {"DEL", K_ALL, false},
    {"DISCARD", K_NONE, false},
    {"DUMP", K_ONE, true},
    {"ECHO", K_NONE, false},
    {"EVAL", K_NUMKEYS, false},
    {"EVALSHA", K_NUMKEYS, false},
    {"EVALSHA_RO", K_NUMKEYS, false},
    {"EVAL_RO", K_NUMKEYS, false},
    {"EXEC", K_NONE, false},
    {"EXISTS", K_ALL, true},
    {"EXPIRE", K_ONE, false},
    {"EXPIREAT", K_ONE, false},
    {"FCALL", K_NUMKEYS, false},
    {"FCALL_RO", K_NUMKEYS, false},
    {"FLUSHALL", K_NONE, false},
    {"FLUSHDB", K_NONE, false},
    {"GET", K_ONE, true},
    {"GETDEL", K_ONE, false},
    {"GETEX", K_ONE, false},
    {"GETRANGE", K_ONE, true},
    {"GETSET", K_ONE, false},
    {"HDEL", K_ONE, false},
    {"HELLO", K_NONE, false},
    {"HEXISTS", K_ONE, true},
    {"HGET", K_ONE, true},
    {"HGETALL", K_ONE, true},
    {"HINCRBY", K_ONE, false},
    {"HINCRBYFLOAT", K_ONE, false},
    {"HKEYS", K_ONE, true},
    {"HLEN", K_ONE, true},
    {"HMGET", K_ONE, true},
    {"HMSET", K_ONE, false},
    {"HSET", K_ONE, false},
    {"HSETNX", K_ONE, false},
    {"HVALS", K_ONE, true},
    {"INCR", K_ONE, false},
    {"INCRBY", K_ONE, false},
    {"INCRBYFLOAT", K_ONE, false},
    {"INFO", K_NONE, false},
    {"LASTSAVE", K_NONE, false},
    {"LINDEX", K_ONE, true},
    {"LLEN", K_ONE, true},
    {"LPOP", K_ONE, false},
    {"LPUSH", K_ONE, false},
    {"LRANGE", K_ONE, true},
    {"LREM", K_ONE, false},
    {"LSET", K_ONE, false},
    {"LTRIM", K_ONE, false},
    {"MEMORY", K_NONE, false},
    {"MGET", K_ALL, true},
    {"MSET", K_PAIRS, false},
    {"MSETNX", K_PAIRS, false},
    {"MULTI", K_NONE, false},
    {"OBJECT", K_SECOND, false},
    {"PERSIST", K_ONE, false},
    {"PEXPIRE", K_ONE, false},
    {"PEXPIREAT", K_ONE, false},
    {"PING", K_NONE, false},
    {"PSETEX", K_ONE, false},
    {"PTTL", K_ONE, true},
    {"PUBLISH", K_NONE, false},
    {"READONLY", K_NONE, false},
    {"READWRITE", K_NONE, false},
    {"RESTORE", K_ONE, false},
    {"ROLE", K_NONE, false},
    {"RPOP", K_ONE, false},
    {"RPUSH", K_ONE, false},
    {"SADD", K_ONE, false},
    {"SCARD", K_ONE, true},
    {"SCRIPT", K_NONE, false},
    {"SET", K_ONE, false},
    {"SETEX", K_ONE, false},
    {"SETNX", K_ONE, false},
    {"SETRANGE", K_ONE, false},
    {"SISMEMBER", K_ONE, true},
    {"SMEMBERS", K_ONE, true},
    {"SREM", K_ONE, false},
    {"STRLEN", K_ONE, true},
    {"TIME", K_NONE, false},
    {"TOUCH", K_ALL, false},
    {"TTL", K_ONE, true},
    {"TYPE", K_ONE, true},
    {"UNLINK", K_ALL, false},
    {"UNWATCH", K_NONE, false},
    {"WAIT", K_NONE, false},
    {"WATCH", K_ALL, false},
    {"ZADD", K_ONE, false},
    {"ZCARD", K_ONE, true},
    {"ZINCRBY", K_ONE, false},
    {"ZRANGE", K_ONE, true},
    {"ZRANGEBYSCORE", K_ONE, true},
    {"ZREM", K_ONE, false},
    {"ZREVRANGE", K_ONE, true},
    {"ZSCORE", K_ONE, true},
};

static int spec_cmp(const void *a, const void *b)
{
    return strcmp(((const cmd_spec *)a)->name, ((const cmd_spec *)b)->name);
}

/* One bulk string of a multi-bulk at *p (end: the text's end): its bytes
 * and length, *p moved past it. -1 when malformed. */
static int bulk(const char **p, const char *end, const char **arg, size_t *alen)
{
    const char *s = *p;
    if (s >= end || *s != '$')
        return -1;
    size_t n = 0;
    for (s++; s < end && *s >= '0' && *s <= '9'; s++) {
        n = n * 10 + (size_t)(*s - '0');
        if (n > (1u << 30))
            return -1;
    }
    if (end - s < 2 || s[0] != '\r' || s[1] != '\n' || (size_t)(end - s - 2) < n + 2)
        return -1;
    s += 2;
    *arg = s;
    *alen = n;
    s += n;
    if (s[0] != '\r' || s[1] != '\n')
        return -1;
    *p = s + 2;
    return 0;
}

int lc__cmd_parse(const char *resp, size_t len, lc__cmd *out)
{
    memset(out, 0, sizeof *out);
    out->slot = LC__CMD_UNKNOWN;
    const char *p = resp, *end = resp + len;
    if (p >= end || *p != '*')
        return -1;
    long argc = 0;
    for (p++; p < end && *p >= '0' && *p <= '9'; p++) {
        argc = argc * 10 + (*p - '0');
        if (argc > 1000000)
            return -1;
    }
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n' || argc < 1)
        return -1;
    p += 2;
    const char *arg;
    size_t alen;
    if (bulk(&p, end, &arg, &alen) != 0)
        return -1;
    char name[24];
    if (alen >= sizeof name)
        return 0; /* no command of the table is that long: unknown */
    for (size_t i = 0; i < alen; i++)
        name[i] = (char)toupper((unsigned char)arg[i]);
    name[alen] = '\0';
    out->multi = !strcmp(name, "MULTI");
    out->exec = !strcmp(name, "EXEC");
    out->discard = !strcmp(name, "DISCARD");
    out->watch = !strcmp(name, "WATCH");
    out->unwatch = !strcmp(name, "UNWATCH");
    out->free = out->unwatch || !strcmp(name, "PING") || !strcmp(name, "ECHO");
    cmd_spec key = {name, 0, false};
    const cmd_spec *sp = bsearch(&key, specs, sizeof specs / sizeof specs[0], sizeof specs[0],
                                 spec_cmp);
    if (sp == NULL)
        return 0;
    out->reads = sp->reads;
    if (sp->keys == K_NONE) {
        out->slot = LC__CMD_KEYLESS;
        return 0;
    }
    long first = sp->keys == K_SECOND ? 2 : 1, last = argc - 1, step = sp->keys == K_PAIRS ? 2 : 1;
    if (sp->keys == K_ONE || sp->keys == K_SECOND)
        last = first;
    int slot = LC__CMD_KEYLESS;
    for (long i = 1; i < argc; i++) {
        if (bulk(&p, end, &arg, &alen) != 0)
            return -1;
        if (sp->keys == K_NUMKEYS && i == 2) {
            /* numkeys: the keys are the arguments right after it */
            long nk = 0;
            for (size_t k = 0; k < alen; k++) {
                if (arg[k] < '0' || arg[k] > '9' || nk > 1000000)
                    return 0; /* Redis refuses it: unknown here, sent as it is */
                nk = nk * 10 + (arg[k] - '0');
            }
            first = 3;
            last = 2 + nk;
            if (last >= argc)
                return 0;
            continue;
        }
        if (sp->keys == K_NUMKEYS && i < 3)
            continue;
        if (i < first || i > last || (i - first) % step != 0)
            continue;
        int s = lc_key_slot(arg, alen);
        if (slot == LC__CMD_KEYLESS)
            slot = s;
        else if (slot != s)
            slot = LC__CMD_CROSS;
    }
    if (sp->keys == K_NUMKEYS && first != 3)
        return 0; /* numkeys missing */
    out->slot = slot;
    return 0;
}

/* --- the slot map ----------------------------------------------------------- */

#define REFRESH_RETRY_MS 100 /* a refresh that found no node is not tried sooner */
#define ASK_TIMEOUT_CAP_MS 500

static lc_status bad(char *err, size_t errlen, const char *what, const char *node)
{
    if (err && errlen)
        snprintf(err, errlen, "lockcore: cluster_nodes%s%s%s: %s", node ? " \"" : "",
                 node ? node : "", node ? "\"" : "", what);
    return LC_MISUSE;
}

lc_status lc__cluster_setup(lc_cluster *cl, const lc_options *o, char *err, size_t errlen)
{
    memset(cl, 0, sizeof *cl);
    LC_PTHREAD(pthread_mutex_init(&cl->mu, NULL));
    LC_PTHREAD(pthread_mutex_init(&cl->refresh_mu, NULL));
    for (int s = 0; s < LC__SLOTS; s++)
        atomic_init(&cl->slot[s], -1);
    atomic_init(&cl->news, 0);
    cl->rctx_addr = -1;
    int n = o->cluster_node_count;
    if (n == 0)
        return LC_OK;
    if (n < 0 || n > LC_CLUSTER_MAX_SEEDS || !o->cluster_nodes)
        return bad(err, errlen, "cluster_node_count must be 0..16, with the nodes given", NULL);
    if (o->sentinel_count > 0)
        return bad(err, errlen,
                   "set with sentinels: a client follows either a Sentinel master or a "
                   "cluster, not both",
                   NULL);
    if (o->redis_db != 0)
        return bad(err, errlen, "set with redis_db > 0: a cluster has database 0 only", NULL);
    int64_t r = o->cluster_refresh_ms == 0 ? 5000 : o->cluster_refresh_ms;
    if (r < 100 || r > 3600000)
        return bad(err, errlen, "cluster_refresh_ms must be 100..3600000", NULL);
    for (int i = 0; i < n; i++) {
        char host[LC__HOST_LEN];
        int port;
        if (lc__split_addr(o->cluster_nodes[i], true, host, sizeof host, &port) != 0)
            return bad(err, errlen, "not host:port (IPv6: [addr]:port, port 1..65535)",
                       o->cluster_nodes[i] ? o->cluster_nodes[i] : "");
        int a = lc__cluster_addr(cl, host, port);
        for (int j = 0; j < cl->nseeds; j++)
            if (cl->seed[j] == a)
                return bad(err, errlen, "listed twice", o->cluster_nodes[i]);
        cl->seed[cl->nseeds++] = a;
    }
    cl->refresh_ms = r;
    cl->connect_timeout_ms = o->connect_timeout_ms;
    cl->command_timeout_ms = o->command_timeout_ms;
    snprintf(cl->password, sizeof cl->password, "%s", o->redis_password ? o->redis_password : "");
    cl->on = 1;
    return LC_OK;
}

void lc__cluster_shutdown(lc_cluster *cl)
{
    if (cl->rctx)
        redisFree(cl->rctx);
    cl->rctx = NULL;
    LC_PTHREAD(pthread_mutex_destroy(&cl->mu));
    LC_PTHREAD(pthread_mutex_destroy(&cl->refresh_mu));
}

/* Under cl->mu: host:port's index, appended when new; -1 when full. */
static int addr_locked(lc_cluster *cl, const char *host, int port)
{
    int n = atomic_load_explicit(&cl->naddr, memory_order_relaxed);
    for (int i = 0; i < n; i++)
        if (cl->addr[i].port == port && strcmp(cl->addr[i].host, host) == 0)
            return i;
    if (n == LC__CL_MAX_ADDRS || strlen(host) >= LC__HOST_LEN)
        return -1;
    snprintf(cl->addr[n].host, sizeof cl->addr[n].host, "%s", host);
    cl->addr[n].port = port;
    atomic_store_explicit(&cl->naddr, n + 1, memory_order_release);
    return n;
}

int lc__cluster_addr(lc_cluster *cl, const char *host, int port)
{
    int n = atomic_load_explicit(&cl->naddr, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (cl->addr[i].port == port && strcmp(cl->addr[i].host, host) == 0)
            return i;
    LC_PTHREAD(pthread_mutex_lock(&cl->mu));
    int found = addr_locked(cl, host, port);
    LC_PTHREAD(pthread_mutex_unlock(&cl->mu));
    return found;
}

void lc__cluster_addr_text(const lc__cl_addr *a, char *buf, size_t len)
{
    if (strchr(a->host, ':'))
        snprintf(buf, len, "[%s]:%d", a->host, a->port);
    else
        snprintf(buf, len, "%s:%d", a->host, a->port);
}

/* Appends "; " and text to the reason being built in buf (LC_ERRSTR_LEN). */
static void add_why(char *buf, const char *text)
{
    size_t used = strlen(buf);
    if (used + 3 < LC_ERRSTR_LEN)
        snprintf(buf + used, LC_ERRSTR_LEN - used, "%s%s", used ? "; " : "", text);
}

/* Under cl->refresh_mu: a context to node i (the kept one when it is that node's
 * and healthy). NULL with why (160 bytes) set. */
static redisContext *refresh_ctx(lc_cluster *cl, int i, char *why)
{
    if (cl->rctx && (cl->rctx_addr != i || cl->rctx->err)) {
        redisFree(cl->rctx);
        cl->rctx = NULL;
    }
    if (cl->rctx)
        return cl->rctx;
    const lc__cl_addr *a = &cl->addr[i];
    char at[LC__HOST_LEN + 16];
    lc__cluster_addr_text(a, at, sizeof at);
    int t = cl->connect_timeout_ms < ASK_TIMEOUT_CAP_MS ? cl->connect_timeout_ms
                                                        : ASK_TIMEOUT_CAP_MS;
    struct timeval ct = {t / 1000, (t % 1000) * 1000};
    struct timeval cmd = {cl->command_timeout_ms / 1000, (cl->command_timeout_ms % 1000) * 1000};
    redisContext *ctx = redisConnectWithTimeout(a->host, a->port, ct);
    if (!ctx || ctx->err) {
        lc__seterr(why, "%s %s", at, ctx ? ctx->errstr : "out of memory");
        if (ctx)
            redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, cmd);
    if (cl->password[0]) {
        redisReply *r = redisCommand(ctx, "AUTH %s", cl->password);
        bool ok = r && r->type != REDIS_REPLY_ERROR;
        if (!ok)
            lc__seterr(why, "%s AUTH: %s", at, r ? r->str : ctx->errstr);
        if (r)
            freeReplyObject(r);
        if (!ok) {
            redisFree(ctx);
            return NULL;
        }
    }
    cl->rctx = ctx;
    cl->rctx_addr = i;
    return ctx;
}

/* One line's field n (0-based, space-separated) of CLUSTER NODES: its
 * start and length, or NULL. */
static const char *field(const char *line, const char *end, int n, size_t *len)
{
    const char *p = line;
    for (int i = 0; i < n; i++) {
        p = memchr(p, ' ', (size_t)(end - p));
        if (!p)
            return NULL;
        p++;
    }
    const char *e = memchr(p, ' ', (size_t)(end - p));
    *len = (size_t)((e ? e : end) - p);
    return p;
}

/* "ip:port@cport[,hostname]" of CLUSTER NODES into the book (an empty ip:
 * the node does not know its address yet, so the host asked). -1 when it
 * cannot be placed. */
static int node_addr(lc_cluster *cl, int asked, const char *f, size_t len)
{
    const char *at = memchr(f, '@', len);
    const char *end = at ? at : f + len;
    const char *colon = NULL;
    for (const char *p = f; p < end; p++)
        if (*p == ':')
            colon = p;
    if (!colon)
        return -1;
    long port = 0;
    for (const char *p = colon + 1; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        port = port * 10 + (*p - '0');
    }
    char host[LC__HOST_LEN];
    size_t hl = (size_t)(colon - f);
    if (port < 1 || port > 65535 || hl >= sizeof host)
        return -1;
    memcpy(host, f, hl);
    host[hl] = '\0';
    return lc__cluster_addr(cl, hl ? host : cl->addr[asked].host, (int)port);
}

static bool has_flag(const char *flags, size_t len, const char *flag)
{
    size_t n = strlen(flag);
    for (const char *p = flags; p + n <= flags + len;) {
        const char *comma = memchr(p, ',', (size_t)(flags + len - p));
        size_t l = (size_t)((comma ? comma : flags + len) - p);
        if (l == n && memcmp(p, flag, n) == 0)
            return true;
        if (!comma)
            break;
        p = comma + 1;
    }
    return false;
}

/* One node's CLUSTER NODES into map (slot -> address index, -1 none) and,
 * per master, its replicas (repl, nrepl: every one ever listed, failed ones
 * included). CLUSTER NODES rather than CLUSTER SLOTS: it lists every node
 * with its state (CLUSTER SLOTS leaves out a replica that has not
 * replicated a byte yet), and it answers on every version. 0, or -1 with
 * why (LC_ERRSTR_LEN bytes). */
static int ask_node(lc_cluster *cl, int i, int16_t *map, int16_t (*repl)[LC__CL_MAX_REPL],
                    int16_t *nrepl, char *why)
{
    char at[LC__HOST_LEN + 16];
    lc__cluster_addr_text(&cl->addr[i], at, sizeof at);
    redisContext *ctx = refresh_ctx(cl, i, why);
    if (!ctx)
        return -1;
    redisReply *r = redisCommand(ctx, "CLUSTER NODES");
    if (!r) {
        lc__seterr(why, "%s %s", at, ctx->errstr);
        return -1;
    }
    int rc = -1;
    if (r->type == REDIS_REPLY_ERROR) {
        if (strstr(r->str, "cluster support disabled"))
            lc__seterr(why, "%s is not in cluster mode (%s)", at, r->str);
        else
            lc__seterr(why, "%s %s", at, r->str);
        goto out;
    }
    if (r->type != REDIS_REPLY_STRING) {
        lc__seterr(why, "%s: CLUSTER NODES answered no text", at);
        goto out;
    }
    for (int s = 0; s < LC__SLOTS; s++)
        map[s] = -1;
    /* two passes: the masters (their ids, slots), then the replicas */
    enum { MAXN = 2 * LC__CL_MAX_ADDRS };
    char ids[MAXN][41];
    int idx[MAXN], nids = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (const char *line = r->str, *stop = r->str + r->len; line < stop;) {
            const char *nl = memchr(line, '\n', (size_t)(stop - line));
            const char *end = nl ? nl : stop;
            size_t lid = 0, laddr = 0, lflags = 0, lmaster = 0;
            const char *id = field(line, end, 0, &lid), *addr = field(line, end, 1, &laddr);
            const char *flags = field(line, end, 2, &lflags);
            const char *master = field(line, end, 3, &lmaster);
            line = nl ? nl + 1 : stop;
            if (!id || !addr || !flags || !master || lid != 40 ||
                has_flag(flags, lflags, "noaddr") || has_flag(flags, lflags, "handshake"))
                continue;
            bool is_master = has_flag(flags, lflags, "master");
            if (pass == 0 && is_master) {
                int a = node_addr(cl, i, addr, laddr);
                if (a < 0) {
                    lc__seterr(why, "%s: a node that cannot be placed (more than %d seen?)", at,
                               LC__CL_MAX_ADDRS);
                    goto out;
                }
                if (nids < MAXN) {
                    memcpy(ids[nids], id, 40);
                    ids[nids][40] = '\0';
                    idx[nids++] = a;
                }
                for (int f = 8;; f++) {
                    size_t ls;
                    const char *sl = field(id, end, f, &ls);
                    if (!sl || ls == 0)
                        break;
                    if (sl[0] == '[')
                        continue; /* a migration under way: ASK tells the rest */
                    long lo = 0, hi = -1;
                    const char *dash = memchr(sl, '-', ls);
                    char buf[16];
                    if (ls >= sizeof buf)
                        continue;
                    memcpy(buf, sl, ls);
                    buf[ls] = '\0';
                    if (dash) {
                        lo = strtol(buf, NULL, 10);
                        hi = strtol(buf + (dash - sl) + 1, NULL, 10);
                    } else {
                        lo = hi = strtol(buf, NULL, 10);
                    }
                    for (long s = lo < 0 ? 0 : lo; s <= hi && s < LC__SLOTS; s++)
                        map[s] = (int16_t)a;
                }
            } else if (pass == 1 && !is_master && lmaster == 40) {
                int m = -1;
                for (int k = 0; k < nids; k++)
                    if (!memcmp(ids[k], master, 40))
                        m = idx[k];
                int a = m >= 0 ? node_addr(cl, i, addr, laddr) : -1;
                if (a < 0)
                    continue;
                bool known = false;
                for (int q = 0; q < nrepl[m]; q++)
                    known |= repl[m][q] == a;
                if (!known && nrepl[m] < LC__CL_MAX_REPL)
                    repl[m][nrepl[m]++] = (int16_t)a;
            }
        }
    }
    rc = 0;
out:
    freeReplyObject(r);
    return rc;
}

static int64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* cl->news, unpacked: each field -1 when none. Packed as 16 bits of
 * generation, then hint, avoid, must_addr (8 bits each, plus one: the book
 * holds 128) and must_slot (16 bits, plus one). A MOVED and a refused
 * connection each write it by compare-and-swap, bumping the generation; a
 * refresh reads it once before asking, and afterwards clears it only when
 * it is still the word it read: news that came during the refresh stays
 * for the next one, with its refresh due. */
typedef struct news {
    unsigned gen;
    int hint, avoid, must_addr, must_slot;
} news;

static news news_get(uint64_t w)
{
    return (news){(unsigned)(w >> 48), (int)((w >> 40) & 0xff) - 1, (int)((w >> 32) & 0xff) - 1,
                  (int)((w >> 16) & 0xff) - 1, (int)(w & 0xffff) - 1};
}

static uint64_t news_put(news n)
{
    return (uint64_t)(n.gen & 0xffff) << 48 | (uint64_t)(n.hint + 1) << 40 |
           (uint64_t)(n.avoid + 1) << 32 | (uint64_t)(n.must_addr + 1) << 16 |
           (uint64_t)(n.must_slot + 1);
}

/* Under cl->refresh_mu (cl->mu taken only to read and publish the
 * replicas and the map): asks node after node (lc_cluster.c's header says in which
 * order) until one answers a map that agrees with the last MOVED; takes
 * it. 0 when a map was taken or the current one stays (every answer
 * disagreed with the MOVED: the current map has that MOVED's fix); -1 with
 * the reasons in err when no node answered. */
static int refresh_locked(lc_cluster *cl, char *err)
{
    int16_t *map = malloc(sizeof(int16_t) * LC__SLOTS);
    int16_t(*repl)[LC__CL_MAX_REPL] = malloc(sizeof(int16_t) * LC__CL_MAX_ADDRS * LC__CL_MAX_REPL);
    int16_t *nrepl = calloc(LC__CL_MAX_ADDRS, sizeof *nrepl);
    if (!map || !repl || !nrepl) {
        free(map);
        free(repl);
        free(nrepl);
        lc__seterr(err, "cluster: out of memory for a slot map");
        return -1;
    }
    uint64_t read = atomic_load(&cl->news);
    news nw = news_get(read);
    int hint = nw.hint, avoid = nw.avoid;
    int must_slot = nw.must_slot, must_addr = nw.must_addr;
    int order[LC__CL_MAX_ADDRS], n = 0;
    bool in[LC__CL_MAX_ADDRS] = {false};
#define ADD(i)                                                                                     \
    do {                                                                                           \
        int a_ = (i);                                                                              \
        if (a_ >= 0 && a_ < LC__CL_MAX_ADDRS && !in[a_] && a_ != avoid) {                          \
            in[a_] = true;                                                                         \
            order[n++] = a_;                                                                       \
        }                                                                                          \
    } while (0)
    ADD(hint);
    for (int s = 0; s < LC__SLOTS; s++)
        ADD(lc__cluster_master(cl, s));
    for (int j = 0; j < cl->nseeds; j++)
        ADD(cl->seed[j]);
    int naddr = atomic_load(&cl->naddr);
    for (int i = 0; i < naddr; i++)
        ADD(i);
    if (avoid >= 0 && avoid < naddr) {
        avoid = -1;
        ADD(nw.avoid); /* last: maybe it is back */
    }
#undef ADD
    char all[LC_ERRSTR_LEN] = "";
    int rc = -1;
    bool answered = false;
    for (int k = 0; k < n && rc != 0; k++) {
        char why[LC_ERRSTR_LEN] = "";
        LC_PTHREAD(pthread_mutex_lock(&cl->mu));
        memcpy(nrepl, cl->nrepl, sizeof cl->nrepl);
        memcpy(repl, cl->repl, sizeof cl->repl);
        LC_PTHREAD(pthread_mutex_unlock(&cl->mu));
        if (ask_node(cl, order[k], map, repl, nrepl, why) != 0) {
            add_why(all, why);
            continue;
        }
        answered = true;
        if (must_slot >= 0 && map[must_slot] != must_addr) {
            char at[LC__HOST_LEN + 16];
            lc__cluster_addr_text(&cl->addr[order[k]], at, sizeof at);
            lc__seterr(why, "%s has not learnt of slot %d's move yet", at, must_slot);
            add_why(all, why);
            continue;
        }
        LC_PTHREAD(pthread_mutex_lock(&cl->mu)); /* a snapshot sees all of it or none */
        for (int s = 0; s < LC__SLOTS; s++)
            atomic_store_explicit(&cl->slot[s], map[s], memory_order_release);
        memcpy(cl->nrepl, nrepl, sizeof cl->nrepl);
        memcpy(cl->repl, repl, sizeof cl->repl);
        atomic_store(&cl->refreshed_wall_ms, wall_ms());
        atomic_store(&cl->refreshed_ms, lc_now_ms());
        LC_PTHREAD(pthread_mutex_unlock(&cl->mu));
        atomic_fetch_add(&cl->refreshes, 1);
        rc = 0;
    }
    free(map);
    free(repl);
    free(nrepl);
    if (rc == 0 || answered) {
        /* answered, but each one older than the MOVED: the map keeps that
         * MOVED's entry, and the next periodic refresh asks again */
        if (rc != 0 && atomic_load(&cl->refreshed_ms) > 0)
            atomic_store(&cl->refreshed_ms, lc_now_ms());
        /* due cleared before the news: a MOVED whose news lands after the
         * swap sets due again after this; one whose news landed before
         * makes the swap fail, and due is set back here */
        atomic_store(&cl->due, 0);
        news none = {nw.gen, -1, -1, -1, -1};
        if (!atomic_compare_exchange_strong(&cl->news, &read, news_put(none))) {
            /* a MOVED during the refresh: the map just stored may predate
             * it, so its fix goes back in, and its refresh stays due */
            news late = news_get(read);
            if (late.must_slot >= 0)
                atomic_store_explicit(&cl->slot[late.must_slot], (int16_t)late.must_addr,
                                      memory_order_release);
            atomic_store(&cl->due, 1);
        }
        cl->failed_at_ms = 0;
        if (rc != 0 && atomic_load(&cl->refreshed_ms) == 0) {
            lc__seterr(err, "cluster: no node gave a usable slot map (%s)", all);
            return -1;
        }
        return 0;
    }
    cl->failed_at_ms = lc_now_ms();
    lc__seterr(cl->failed_err, "cluster: no node answered CLUSTER NODES (%s)", all);
    memcpy(err, cl->failed_err, LC_ERRSTR_LEN);
    return -1;
}

int lc__cluster_ensure(lc_cluster *cl, char *err)
{
    int64_t now = lc_now_ms(), at = atomic_load_explicit(&cl->refreshed_ms, memory_order_acquire);
    bool due = atomic_load_explicit(&cl->due, memory_order_relaxed);
    if (at > 0 && !due && now - at < cl->refresh_ms)
        return 0;
    if (at > 0) {
        /* Another thread refreshes: the map meanwhile is fine, due or not
         * (a MOVED's fix is in it already); only a thread with no map at
         * all waits for one. A refresh may take command_timeout_ms when
         * nodes hang, and every worker waiting on it would stall with it. */
        if (pthread_mutex_trylock(&cl->refresh_mu) != 0)
            return 0;
    } else {
        LC_PTHREAD(pthread_mutex_lock(&cl->refresh_mu));
    }
    at = atomic_load(&cl->refreshed_ms);
    due = atomic_load(&cl->due);
    int rc = 0;
    if (at > 0 && !due && lc_now_ms() - at < cl->refresh_ms) {
        rc = 0; /* refreshed while this thread waited */
    } else if (cl->failed_at_ms > 0 && lc_now_ms() - cl->failed_at_ms < REFRESH_RETRY_MS) {
        rc = at > 0 ? 0 : -1;
        if (rc)
            memcpy(err, cl->failed_err, LC_ERRSTR_LEN);
    } else {
        rc = refresh_locked(cl, err) == 0 || at > 0 ? 0 : -1;
    }
    LC_PTHREAD(pthread_mutex_unlock(&cl->refresh_mu));
    return rc;
}

void lc__cluster_moved(lc_cluster *cl, int slot, int addr, int from)
{
    if (slot < 0 || slot >= LC__SLOTS || addr < 0 || addr >= LC__CL_MAX_ADDRS)
        return;
    if (from < -1 || from >= LC__CL_MAX_ADDRS)
        from = -1;
    atomic_store_explicit(&cl->slot[slot], (int16_t)addr, memory_order_release);
    uint64_t w = atomic_load(&cl->news), to;
    do {
        news n = news_get(w);
        n.gen++;
        n.hint = from;
        n.must_slot = slot;
        n.must_addr = addr;
        to = news_put(n);
    } while (!atomic_compare_exchange_weak(&cl->news, &w, to));
    atomic_store(&cl->due, 1);
}

void lc__cluster_failed(lc_cluster *cl, int addr)
{
    if (addr < -1 || addr >= LC__CL_MAX_ADDRS)
        addr = -1;
    uint64_t w = atomic_load(&cl->news), to;
    do {
        news n = news_get(w);
        n.gen++;
        n.avoid = addr;
        to = news_put(n);
    } while (!atomic_compare_exchange_weak(&cl->news, &w, to));
    atomic_store(&cl->due, 1);
}

int lc__cluster_any(lc_cluster *cl)
{
    for (int s = 0; s < LC__SLOTS; s += 64) {
        int a = lc__cluster_master(cl, s);
        if (a >= 0)
            return a;
    }
    return cl->nseeds > 0 ? cl->seed[0] : -1;
}

int lc__cluster_snapshot(lc_cluster *cl, lc_cluster_map *out)
{
    memset(out, 0, sizeof *out);
    if (!cl->on)
        return -1;
    LC_PTHREAD(pthread_mutex_lock(&cl->mu));
    int idx[LC_CLUSTER_MAX_MASTERS];
    int prev = -1;
    lc_cluster_master *open = NULL; /* the master whose last range ends at s - 1 */
    for (int s = 0; s < LC__SLOTS; s++) {
        int a = lc__cluster_master(cl, s);
        if (a < 0) {
            prev = -1;
            open = NULL;
            continue;
        }
        out->slots_covered++;
        if (a == prev) {
            if (open)
                open->range[open->nranges - 1][1] = s;
            continue;
        }
        prev = a;
        open = NULL;
        int m = -1;
        for (int j = 0; j < out->nmasters; j++)
            if (idx[j] == a)
                m = j;
        if (m < 0 && out->nmasters == LC_CLUSTER_MAX_MASTERS) {
            out->masters_more = 1;
            continue;
        }
        if (m < 0) {
            m = out->nmasters++;
            idx[m] = a;
            lc_cluster_master *nm = &out->master[m];
            lc__cluster_addr_text(&cl->addr[a], nm->addr, sizeof nm->addr);
            for (int q = 0; q < cl->nrepl[a] && nm->nreplicas < LC_CLUSTER_MAX_REPLICAS; q++)
                lc__cluster_addr_text(&cl->addr[cl->repl[a][q]], nm->replica[nm->nreplicas++],
                                      LC_ADDR_LEN);
        }
        lc_cluster_master *cm = &out->master[m];
        if (cm->nranges == LC_CLUSTER_MAX_RANGES) {
            cm->ranges_more++;
            continue;
        }
        cm->range[cm->nranges][0] = cm->range[cm->nranges][1] = s;
        cm->nranges++;
        open = cm;
    }
    out->refreshed_wall_ms = atomic_load(&cl->refreshed_wall_ms);
    int64_t at = atomic_load(&cl->refreshed_ms);
    out->age_ms = at > 0 ? lc_now_ms() - at : -1;
    LC_PTHREAD(pthread_mutex_unlock(&cl->mu));
    return 0;
}

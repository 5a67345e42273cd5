/* config.c — the table of settings and everything derived from it.
 *
 * One table (KEYS, below; Redis config.c style) describes every setting:
 * its JSON path, the struct member it lives in, its type, bounds, default,
 * unit and description. Defaults, the three parsers (JSON file, environment,
 * flags), validation, environment variable names, --help, cfg_to_json and
 * the documented config/miaosha.json are all loops over that table, so a new
 * setting is one line here plus one member in the header, and the places can
 * never disagree. The member's C type is taken from the struct itself with
 * _Generic, so a table entry cannot store an int64_t into an int.
 *
 * Every source funnels into two functions: apply_text (environment and
 * flags: everything is a string) and apply_json (the file: typed JSON
 * values), which both end in the same bounds checks. Errors are formatted
 * once, as "<source>: <key> = <value> <why> (allowed <bounds>)", so every
 * message names the key, the value and the range.
 *
 * cJSON: the file is parsed with cJSON_ParseWithOpts and its return_parse_end
 * pointer; the position of a syntax error is computed here. cJSON_GetErrorPtr
 * is never read because it is one process-wide variable (not thread-safe).
 * cJSON still writes that variable while parsing, which is why cfg_load is a
 * start-up function; nothing else here parses.
 */
#include "miaosha_config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <uuid/uuid.h>

#ifndef MIAOSHA_VERSION
#define MIAOSHA_VERSION "0.0.0"
#endif

#define MAX_FILE_BYTES (1024 * 1024) /* a config file is a page, not data */
#define ENV_PREFIX "MIAOSHA_"
#define ENV_CONFIG "MIAOSHA_CONFIG"
#define MS_PER_DAY INT64_C(86400000)

extern char **environ;

/* --- the table -------------------------------------------------------- */

typedef enum key_type { T_INT, T_I64, T_BOOL, T_STR, T_ENUM } key_type;

/* What a string may contain. The SKU and instance id charsets match what the
 * service accepts in URLs and what is safe inside Redis key names and the
 * reentrant lock's "<instance>:<owner>" hash field (hence no ':'). */
typedef enum str_kind {
    S_ADDR,  /* numeric IPv4/IPv6: the service binds it without DNS */
    S_HOST,  /* a DNS name or address literal */
    S_SKU,   /* [A-Za-z0-9_-]{1,64} */
    S_ID,    /* [A-Za-z0-9._-]{0,63}; empty = generate one */
    S_PRINT, /* printable ASCII including space (passwords) */
    S_TOKEN, /* printable ASCII without space (a Bearer token) */
    S_HOSTS, /* "host:port" comma-separated, at most 9, none twice */
    S_SEEDS, /* the same, an IPv6 address as "[addr]:port" */
    S_NODES  /* "host:port" list, comma-separated: odd count 3..9, none twice */
} str_kind;

#define F_SECRET 0x1 /* never echoed in errors, masked in cfg_to_json */

typedef struct key_def {
    const char *path; /* JSON path, also --set name and env name source */
    key_type type;
    size_t offset;       /* into cfg_config */
    size_t size;         /* the member's size (strings: the array) */
    int64_t min, max;    /* integers: bounds; strings: length bounds */
    int64_t def_int;     /* integers, booleans, enums (index) */
    const char *def_str; /* strings */
    str_kind kind;       /* strings */
    unsigned flags;
    const char *le;   /* another key this one must not exceed, or NULL */
    int le_div;       /* ... divided by this (1, or 2 for "at most half of") */
    const char *unit; /* "ms", "s", "bytes", "" */
    const char *desc;
    const char *word;   /* integers: one more value written as this word (in
                           the environment, on the command line and as a
                           JSON string), or NULL */
    int64_t word_value; /* ... stored as this, outside min..max */
} key_def;

/* The formatter would spread each initializer over four lines. */
/* clang-format off */
#define TYPE_OF(m)                                                           \
    _Generic((((cfg_config *)0)->m), int: T_INT, int64_t: T_I64,             \
             bool: T_BOOL, char *: T_STR, default: T_ENUM)
#define MEMBER(m) TYPE_OF(m), offsetof(cfg_config, m), sizeof(((cfg_config *)0)->m)

#define K_NUM(path, m, lo, hi, def, le, unit, desc)                           \
    {path, MEMBER(m), lo, hi, def, NULL, S_PRINT, 0, le, 1, unit, desc, NULL, 0}
/* A number that must not exceed another key divided by div. */
#define K_NUM_DIV(path, m, lo, hi, def, le, div, unit, desc)                  \
    {path, MEMBER(m), lo, hi, def, NULL, S_PRINT, 0, le, div, unit, desc, NULL, 0}
/* A number that may also be written as a word (redis.wait_replicas=all). */
#define K_NUM_WORD(path, m, lo, hi, def, word, wv, unit, desc)                \
    {path, MEMBER(m), lo, hi, def, NULL, S_PRINT, 0, NULL, 1, unit, desc, word, wv}
#define K_BOOL(path, m, def, desc)                                            \
    {path, MEMBER(m), 0, 1, def, NULL, S_PRINT, 0, NULL, 1, "", desc, NULL, 0}
#define K_ENUM(path, m, def, desc)                                            \
    {path, MEMBER(m), 0, 0, def, NULL, S_PRINT, 0, NULL, 1, "", desc, NULL, 0}
#define K_STR(path, m, kind, lo, def, flags, desc)                            \
    {path, MEMBER(m), lo, (int64_t)sizeof(((cfg_config *)0)->m) - 1, 0, def, \
     kind, flags, NULL, 1, "", desc, NULL, 0}
/* clang-format on */

/* The only enum key is log.level; T_ENUM reads these names. */
static const char *const LOG_LEVELS[] = {"error", "warn", "info", "debug"};
#define LOG_LEVEL_COUNT (sizeof LOG_LEVELS / sizeof LOG_LEVELS[0])
_Static_assert(sizeof(cfg_log_level) == sizeof(int), "enum keys are stored as int");

static const key_def KEYS[] = {
    K_STR("listen.address", listen.address, S_ADDR, 1, "127.0.0.1", 0,
          "numeric IPv4 or IPv6 address to bind; 0.0.0.0 = every IPv4 interface"),
    K_NUM("listen.port", listen.port, 0, 65535, 8080, NULL, "",
          "TCP port to listen on; 0 = any free port"),
    K_NUM("listen.max_connections", listen.max_connections, 1, 1000000, 4096, NULL, "",
          "open connections at once; more wait in the listen backlog until one closes"),
    K_NUM("listen.connection_timeout_s", listen.connection_timeout_s, 1, 3600, 10, NULL, "s",
          "idle seconds before a connection is closed (an idle timeout: a client that "
          "trickles bytes is not cut; put nginx in front for that)"),
    K_NUM("listen.max_body_bytes", listen.max_body_bytes, 0, 1048576, 4096, NULL, "bytes",
          "request body limit; a larger body gets 413"),
    K_NUM_DIV("listen.max_uri_bytes", listen.max_uri_bytes, 64, 65536, 2048,
              "listen.max_header_bytes", 2, "bytes", "request URI limit; a longer URI gets 414"),
    K_NUM("listen.max_header_bytes", listen.max_header_bytes, 4096, 1048576, 16384, NULL, "bytes",
          "request line + headers limit, each header line and query parameter counted "
          "64 bytes more; a larger request gets 431"),
    K_BOOL("listen.allow_open", listen.allow_open, 0,
           "let the service run on a non-loopback listen.address with an empty admin_token, "
           "PUT /stock, ?fault=, ?step=1 and /steps then open to anyone who can connect; "
           "without it that configuration is refused"),

    K_NUM("server.io_threads", server.io_threads, 1, 64, 2, NULL, "",
          "HTTP threads that accept and parse requests"),
    K_NUM("server.workers", server.workers, 1, 4096, 16, NULL, "",
          "worker threads for requests that may block (lock waits, work_ms)"),
    K_NUM("server.max_queue", server.max_queue, 0, 1000000, 1024, NULL, "",
          "requests waiting for a free worker, per pool; more get 503 overloaded"),
    K_NUM("server.lua_batches", server.lua_batches, 0, 4096, 0, NULL, "",
          "lua batches sent at once: while this many workers each wait for a batch of queued "
          "lua purchases, the next lua purchases queue for them instead of waking another "
          "worker; fewer make bigger batches (less Redis CPU a purchase); 0 = one per CPU; "
          "at most server.workers"),

    K_STR("redis.host", redis.host, S_HOST, 1, "127.0.0.1", 0, "Redis host name or address"),
    K_NUM("redis.port", redis.port, 1, 65535, 6379, NULL, "", "Redis TCP port"),
    K_STR("redis.password", redis.password, S_PRINT, 0, "", F_SECRET,
          "AUTH password; empty = no AUTH"),
    K_NUM("redis.db", redis.db, 0, 255, 0, NULL, "",
          "database to SELECT (the server must have it)"),
    K_NUM("redis.connect_timeout_ms", redis.connect_timeout_ms, 1, 60000, 1000, NULL, "ms",
          "Redis connect timeout"),
    K_NUM("redis.command_timeout_ms", redis.command_timeout_ms, 1, 60000, 1000, NULL, "ms",
          "Redis round-trip timeout per command; bounds how late a 503 comes"),

    K_STR("redis.sentinels", redis.sentinels, S_HOSTS, 0, "", 0,
          "Redis Sentinels, host:port comma-separated (in the JSON file also an array); set: "
          "every connection goes to the "
          "master they name for redis.master_name (redis.host/port unused); empty = no Sentinel"),
    K_STR("redis.cluster_nodes", redis.cluster_nodes, S_SEEDS, 0, "", 0,
          "Redis Cluster seed nodes, host:port comma-separated (IPv6 as [addr]:port; in the JSON "
          "file also an array); set: every command goes to the master serving its key's hash "
          "slot and follows the cluster's redirects (redis.host/port and --redis unused; not "
          "with redis.sentinels, redis.wait_replicas = all or a redis.db other than 0); empty = "
          "no cluster"),
    K_NUM("redis.cluster_refresh_ms", redis.cluster_refresh_ms, 100, 3600000, 5000, NULL, "ms",
          "how often the cluster's slot map is asked afresh (also at once after a MOVED or a "
          "refused connection)"),
    K_STR("redis.master_name", redis.master_name, S_ID, 0, "mymaster", 0,
          "the master's name at the Sentinels (SENTINEL get-master-addr-by-name); required "
          "when redis.sentinels is set"),
    K_NUM_WORD("redis.wait_replicas", redis.wait_replicas, 0, 16, 0, "all", CFG_WAIT_REPLICAS_ALL,
               "",
               "after a purchase's write, WAIT until this many replicas have it, else 503 "
               "not_replicated; all = every replica the master is known to have (Sentinel's "
               "list and the master's own since the last switch), one that is down included: "
               "the only setting whose 200s survive a manual failover or a resumed master; "
               "0 = no WAIT"),
    K_NUM("redis.wait_timeout_ms", redis.wait_timeout_ms, 1, 60000, 100, "redis.command_timeout_ms",
          "ms", "timeout of that WAIT"),

    K_STR("purchase.sku", purchase.sku, S_SKU, 1, "demo", 0, "SKU when a request has no ?sku="),
    K_NUM("purchase.initial_stock", purchase.initial_stock, 0, 1000000000, 100, NULL, "",
          "stock seeded at start for purchase.sku when Redis has none"),
    K_NUM("purchase.work_ms", purchase.work_ms, 0, 600000, 0, "purchase.max_work_ms", "ms",
          "simulated business time in the critical section when a request has no ?work_ms="),
    K_NUM("purchase.max_work_ms", purchase.max_work_ms, 0, 600000, 60000, NULL, "ms",
          "cap on ?work_ms="),
    K_NUM("purchase.max_reenter", purchase.max_reenter, 0, 64, 8, NULL, "", "cap on ?reenter="),
    K_BOOL("purchase.pipeline", purchase.pipeline, 1,
           "send the stock read with the lock's acquire and the commit with its release "
           "(two round trips a purchase) when a request has no ?pipeline="),
    K_NUM("purchase.limit_per_user", purchase.limit_per_user, 0, 1000000, 0, NULL, "",
          "orders one ?user= may hold per SKU, checked atomically with the sale (409 "
          "limit_reached); 0 = unlimited"),
    K_NUM("purchase.idempotency_ttl_s", purchase.idempotency_ttl_s, 1, 2592000, 86400, NULL, "s",
          "how long the outcome of a purchase with an Idempotency-Key header is kept for its "
          "replays, and the key stays bound to that purchase's SKU, mode and user (that long "
          "plus the longest the purchase could run: its waits, work_ms and a few seconds)"),
    K_BOOL("purchase.local_sold_out", purchase.local_sold_out, 1,
           "answer purchases of a SKU this instance has seen sold out 409 from memory, without "
           "Redis, until its stock is reset"),

    K_NUM("lock.lease_ms", lock.lease_ms, 1, MS_PER_DAY, 5000, "lock.max_lease_ms", "ms",
          "lease of setnx, token, fenced and redlock locks when a request has no ?lease_ms="),
    K_NUM("lock.wait_ms", lock.wait_ms, 0, MS_PER_DAY, 0, "lock.max_wait_ms", "ms",
          "how long to wait for a held lock; 0 = try once"),
    K_NUM("lock.retry_interval_ms", lock.retry_interval_ms, 1, 60000, 10, NULL, "ms",
          "setnx/token/fenced polling interval while waiting (plus jitter); redlock "
          "sleeps a random 0..2x it between rounds"),
    K_NUM("lock.watchdog_timeout_ms", lock.watchdog_timeout_ms, 30, MS_PER_DAY, 30000, NULL, "ms",
          "reentrant lease without ?lease_ms=, renewed every third of it"),
    K_NUM("lock.max_lease_ms", lock.max_lease_ms, 1, MS_PER_DAY, 300000, NULL, "ms",
          "cap on ?lease_ms="),
    K_NUM("lock.max_wait_ms", lock.max_wait_ms, 0, MS_PER_DAY, 60000, NULL, "ms",
          "cap on ?wait_ms= (and on a stock reset's wait for its turn, which is at most 5 s)"),

    K_STR("redlock.nodes", redlock.nodes, S_NODES, 0, "", 0,
          "Redlock's independent lock masters, host:port separated by commas (in the JSON "
          "file also an array): an odd count 3..9, none twice, none named in "
          "redis.cluster_nodes, each reachable at start and no two one server (the same "
          "run_id); empty = /miaosha/redlock is not offered"),
    K_NUM("redlock.node_timeout_ms", redlock.node_timeout_ms, 1, 60000, 50, NULL, "ms",
          "how long one parallel round waits for a lock master before counting it failed; "
          "keep it far below the lease"),
    K_NUM("redlock.restart_delay_ms", redlock.restart_delay_ms, 0, MS_PER_DAY, 0, NULL, "ms",
          "a lock master up for less than this does not vote (set it to the longest lease); "
          "0 = off, the algorithm as published"),

    K_BOOL("faults.enabled", faults.enabled, 0,
           "allow ?fault= (crash_before_expire, crash_in_section) and stepped purchases "
           "(?step=1, /steps); for teaching only"),

    K_NUM("teach.max_steps", teach.max_steps, 1, 64, 8, NULL, "",
          "stepped purchases (?step=1) at once, each on a thread and a Redis connection of its "
          "own; more get 429 too_many_steps"),
    K_NUM("teach.step_timeout_s", teach.step_timeout_s, 1, 3600, 120, NULL, "s",
          "a stepped purchase left paused this long is abandoned: its lock released, nothing "
          "more written, 409 step_abandoned"),

    K_BOOL("trace.enabled", trace.enabled, 1,
           "record each purchase's timeline in its SKU's trace ring (GET /trace/{sku}) when a "
           "request has no ?trace="),
    K_NUM("trace.ring_size", trace.ring_size, 16, 65536, 4096, NULL, "",
          "trace records kept per SKU; the oldest are overwritten"),
    K_NUM("trace.max_skus", trace.max_skus, 1, 1024, 16, NULL, "",
          "SKUs that get a trace ring (each ring_size records of 344 bytes); "
          "purchases of later SKUs are not traced"),

    K_NUM("metrics.sku_gauges", metrics.sku_gauges, 0, 1024, 16, NULL, "",
          "SKUs whose audit /metrics exports as gauges (miaosha_stock, miaosha_sold, "
          "miaosha_oversold, miaosha_undersold): the ones this instance saw last; 0 = none"),
    K_NUM("metrics.refresh_ms", metrics.refresh_ms, 100, 60000, 1000, NULL, "ms",
          "how often a background thread reads those SKUs' audits from Redis (one round trip), "
          "so how old a gauge may be"),

    K_ENUM("log.level", log.level, CFG_LOG_INFO, "least severe level logged"),
    K_BOOL("log.access", log.access, 0, "log one line per request"),

    K_STR("admin_token", admin_token, S_TOKEN, 0, "", F_SECRET,
          "Bearer token that PUT /stock, ?fault=, ?step=1 and /steps require; empty = no check"),
    K_STR("instance_id", instance_id, S_ID, 0, "", 0,
          "this process's id in orders and lock fields; empty = a fresh UUID"),
};
#define KEY_COUNT (sizeof KEYS / sizeof KEYS[0])

/* --- small helpers ------------------------------------------------------ */

static void *member(cfg_config *c, const key_def *k)
{
    return (char *)c + k->offset;
}
static const void *cmember(const cfg_config *c, const key_def *k)
{
    return (const char *)c + k->offset;
}

static int64_t get_int(const cfg_config *c, const key_def *k)
{
    const void *p = cmember(c, k);
    switch (k->type) {
    case T_INT:
    case T_ENUM: {
        int v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case T_I64: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case T_BOOL: {
        bool v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case T_STR: break;
    }
    return 0;
}

static void put_int(cfg_config *c, const key_def *k, int64_t v)
{
    void *p = member(c, k);
    switch (k->type) {
    case T_INT:
    case T_ENUM: {
        int x = (int)v;
        memcpy(p, &x, sizeof x);
        break;
    }
    case T_I64: memcpy(p, &v, sizeof v); break;
    case T_BOOL: {
        bool x = v != 0;
        memcpy(p, &x, sizeof x);
        break;
    }
    case T_STR: break;
    }
}

/* Strings are stored in fixed arrays, so a value is copied whole or not at
 * all (validation has already bounded its length). */
static void put_str(cfg_config *c, const key_def *k, const char *s)
{
    size_t n = strlen(s);
    char *p = member(c, k);
    if (n >= k->size)
        n = k->size - 1;
    memcpy(p, s, n);
    p[n] = '\0';
}

static const key_def *find_key(const char *path)
{
    for (size_t i = 0; i < KEY_COUNT; i++)
        if (strcmp(KEYS[i].path, path) == 0)
            return &KEYS[i];
    return NULL;
}

/* MIAOSHA_ + the path upper-cased with '.' → '_'. */
static void env_name(const key_def *k, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%s", ENV_PREFIX);
    for (const char *s = k->path; *s && n + 1 < len; s++, n++)
        buf[n] = *s == '.' ? '_' : (char)toupper((unsigned char)*s);
    if (n < len)
        buf[n] = '\0';
}

static void append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

/* The allowed values of a key in words, for errors, --help and the docs. */
static void bounds_text(const key_def *k, char *buf, size_t len)
{
    buf[0] = '\0';
    switch (k->type) {
    case T_INT:
    case T_I64:
        append(buf, len, "%" PRId64 "..%" PRId64, k->min, k->max);
        if (k->word)
            append(buf, len, " or %s", k->word);
        if (k->le)
            append(buf, len, " and <= %s", k->le);
        if (k->le && k->le_div > 1)
            append(buf, len, " / %d", k->le_div);
        break;
    case T_BOOL: append(buf, len, "true|false"); break;
    case T_ENUM:
        for (size_t i = 0; i < LOG_LEVEL_COUNT; i++)
            append(buf, len, "%s%s", i ? "|" : "", LOG_LEVELS[i]);
        break;
    case T_STR:
        switch (k->kind) {
        case S_ADDR: append(buf, len, "a numeric IPv4 or IPv6 address"); break;
        case S_HOST: append(buf, len, "1..%" PRId64 " bytes of [A-Za-z0-9.:_-]", k->max); break;
        case S_SKU: append(buf, len, "[A-Za-z0-9_-]{1,%" PRId64 "}", k->max); break;
        case S_ID: append(buf, len, "[A-Za-z0-9._-]{0,%" PRId64 "}", k->max); break;
        case S_PRINT: append(buf, len, "0..%" PRId64 " bytes of printable ASCII", k->max); break;
        case S_TOKEN:
            append(buf, len, "0..%" PRId64 " bytes of printable ASCII without spaces", k->max);
            break;
        case S_HOSTS: append(buf, len, "host:port[,host:port...], at most 9, none twice"); break;
        case S_SEEDS:
            append(buf, len, "host:port[,host:port...] ([v6]:port), at most 9, none twice");
            break;
        case S_NODES:
            append(buf, len, "empty, or an odd count 3..9 of distinct host:port, comma-separated");
            break;
        }
        break;
    }
}

static const char *type_name(const key_def *k)
{
    switch (k->type) {
    case T_INT: return "int";
    case T_I64: return "int64";
    case T_BOOL: return "bool";
    case T_STR: return "string";
    case T_ENUM: return "enum";
    }
    return "?";
}

/* A value as it may appear in a message: secrets hidden, control bytes
 * escaped, long values cut, so a hostile value cannot forge log lines. */
static void show_text(const key_def *k, const char *s, char *buf, size_t len)
{
    if (k && (k->flags & F_SECRET)) {
        snprintf(buf, len, "(hidden, %zu bytes)", strlen(s));
        return;
    }
    buf[0] = '\0';
    append(buf, len, "'");
    size_t i = 0;
    for (; s[i] && i < 64; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch >= 0x7f || ch == '\\')
            append(buf, len, "\\x%02x", ch);
        else
            append(buf, len, "%c", ch);
    }
    append(buf, len, "%s'", s[i] ? "..." : "");
}

static void show_json(const key_def *k, const cJSON *item, char *buf, size_t len)
{
    if (k && (k->flags & F_SECRET)) { /* whatever its type: a typo'd secret is still one */
        if (cJSON_IsString(item))
            show_text(k, item->valuestring, buf, len);
        else
            snprintf(buf, len, "(hidden)");
        return;
    }
    /* cJSON prints a number past a double's range (a 5000-digit port) as
     * null, which is not what the file says */
    if (cJSON_IsNumber(item) && !isfinite(item->valuedouble)) {
        snprintf(buf, len, "%s",
                 item->valuedouble > 0 ? "(a number too large)" : "(a number too small)");
        return;
    }
    char *txt = cJSON_PrintUnformatted(item);
    if (!txt) {
        snprintf(buf, len, "(unprintable)");
        return;
    }
    size_t n = strlen(txt);
    if (n > 64)
        snprintf(buf, len, "%.64s...", txt);
    else
        snprintf(buf, len, "%s", txt);
    cJSON_free(txt);
}

/* Levenshtein distance, for "did you mean" on unknown keys. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 127 || lb > 127)
        return SIZE_MAX;
    size_t row[128];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            if (up + 1 < best)
                best = up + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *nearest_key(const char *path)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < KEY_COUNT; i++) {
        size_t d = edit_distance(path, KEYS[i].path);
        if (d < best_d) {
            best_d = d;
            best = KEYS[i].path;
        }
    }
    /* Only a near miss is a hint; anything else would mislead. */
    return best_d <= 3 && best_d < strlen(path) ? best : NULL;
}

/* --- error reporting ---------------------------------------------------- */

/* Where a value came from, prefixed to every message ("" for none). */
typedef struct ctx {
    const char *src;
    char *err;
    size_t errlen;
} ctx;

static cfg_status fail(const ctx *x, cfg_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cfg_status fail(const ctx *x, cfg_status st, const char *fmt, ...)
{
    if (!x->err || x->errlen == 0)
        return st;
    x->err[0] = '\0';
    if (x->src && *x->src)
        append(x->err, x->errlen, "%s: ", x->src);
    size_t used = strlen(x->err);
    if (used + 1 < x->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err + used, x->errlen - used, fmt, ap);
        va_end(ap);
    }
    return st;
}

static cfg_status fail_unknown(const ctx *x, const char *path)
{
    const char *near = nearest_key(path);
    char shown[96];
    show_text(NULL, path, shown, sizeof shown);
    if (near)
        return fail(x, CFG_INVALID, "unknown key %s (did you mean '%s'?)", shown, near);
    return fail(x, CFG_INVALID, "unknown key %s (see --help for every key)", shown);
}

/* --- validation and storing ---------------------------------------------- */

static int in_set(unsigned char ch, str_kind kind)
{
    if (isalnum(ch))
        return 1;
    switch (kind) {
    case S_HOST: return ch == '.' || ch == ':' || ch == '_' || ch == '-';
    case S_HOSTS: return ch == '.' || ch == ':' || ch == '_' || ch == '-' || ch == ',';
    case S_SEEDS:
        return ch == '.' || ch == ':' || ch == '_' || ch == '-' || ch == ',' || ch == '[' ||
               ch == ']';
    case S_SKU: return ch == '_' || ch == '-';
    case S_ID: return ch == '.' || ch == '_' || ch == '-';
    case S_PRINT: return ch >= 0x20 && ch < 0x7f;
    case S_TOKEN: return ch > 0x20 && ch < 0x7f;
    case S_NODES: return ch == '.' || ch == ':' || ch == '_' || ch == '-' || ch == ',';
    case S_ADDR: return 1; /* inet_pton decides */
    }
    return 0;
}

/* The host of a seed (S_SEEDS), h_len bytes at h: a name or IPv4 address
 * without ':' or brackets, or "[v6]" holding a numeric IPv6 address, so
 * that the last ':' of the entry is the one before the port. */
static int seed_host_ok(const char *h, size_t h_len)
{
    if (h_len >= 2 && h[0] == '[' && h[h_len - 1] == ']') {
        char v6[INET6_ADDRSTRLEN + 1];
        unsigned char addr[sizeof(struct in6_addr)];
        if (h_len - 2 == 0 || h_len - 2 >= sizeof v6)
            return 0;
        memcpy(v6, h + 1, h_len - 2);
        v6[h_len - 2] = '\0';
        return inet_pton(AF_INET6, v6, addr) == 1;
    }
    for (size_t i = 0; i < h_len; i++)
        if (h[i] == ':' || h[i] == '[' || h[i] == ']')
            return 0;
    return h_len > 0;
}

/* A list of host:port, comma-separated (characters already checked); with
 * seeds, an IPv6 host in brackets and a port without a leading zero. Host
 * names compare without case ("A:1" and "a:1" are one node). */
static const char *check_hosts(const char *s, bool seeds, char *why, size_t len)
{
    char items[9][CFG_HOST_LEN + 8];
    int n = 0;
    for (const char *p = s;; n++) {
        const char *end = strchr(p, ',');
        size_t l = end ? (size_t)(end - p) : strlen(p);
        if (n == 9) {
            snprintf(why, len, "lists more than 9 addresses");
            return why;
        }
        if (l == 0 || l >= sizeof items[0]) {
            snprintf(why, len, "has an empty or too long entry %d", n + 1);
            return why;
        }
        memcpy(items[n], p, l);
        items[n][l] = '\0';
        char *colon = strrchr(items[n], ':');
        char *e = NULL;
        long port = colon ? strtol(colon + 1, &e, 10) : 0;
        if (!colon || colon == items[n] || e == colon + 1 || *e || port < 1 || port > 65535 ||
            (seeds && (colon[1] == '0' || !seed_host_ok(items[n], (size_t)(colon - items[n]))))) {
            snprintf(why, len, "entry %d is not host:port with a port 1..65535%s", n + 1,
                     seeds ? " (an IPv6 address as [addr]:port)" : "");
            return why;
        }
        for (int j = 0; j < n; j++) {
            if (strcasecmp(items[j], items[n]) == 0) {
                snprintf(why, len, "lists %.64s twice", items[n]);
                return why;
            }
        }
        if (!end)
            break;
        p = end + 1;
    }
    return NULL;
}

/* redlock.nodes: "host:port" items separated by commas, an odd count
 * 3..9 (a majority of an even count tolerates no more failures than one
 * node fewer), none twice. NULL when valid, else why not (into why). */
static const char *check_nodes(const char *s, char *why, size_t len)
{
    char items[9][CFG_NODES_LEN];
    int n = 0;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        if (n == 9) {
            snprintf(why, len, "has more than 9 nodes");
            return why;
        }
        memcpy(items[n], p, l);
        items[n][l] = '\0';
        const char *colon = strrchr(items[n], ':');
        char *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || colon == items[n] || end == colon + 1 || *end || port < 1 || port > 65535) {
            snprintf(why, len, "has an item '%.64s' that is not host:port (port 1..65535)",
                     items[n]);
            return why;
        }
        for (int j = 0; j < n; j++) {
            if (strcmp(items[j], items[n]) == 0) {
                snprintf(why, len, "lists %.64s twice (the nodes must be independent)", items[n]);
                return why;
            }
        }
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    if (n < 3 || n % 2 == 0) {
        snprintf(why, len, "has %d nodes, not an odd count 3..9", n);
        return why;
    }
    return NULL;
}

/* NULL when s is a valid value of k, else why not (into why). */
static const char *check_str(const key_def *k, const char *s, char *why, size_t len)
{
    size_t n = strlen(s);
    if ((int64_t)n > k->max) {
        snprintf(why, len, "is %zu bytes, longer than %" PRId64, n, k->max);
        return why;
    }
    if ((int64_t)n < k->min) {
        snprintf(why, len, "is empty");
        return why;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!in_set(ch, k->kind)) {
            if (k->flags & F_SECRET)
                snprintf(why, len, "has a forbidden byte at offset %zu", i);
            else
                snprintf(why, len, "has a forbidden byte 0x%02x at offset %zu", ch, i);
            return why;
        }
    }
    if ((k->kind == S_HOSTS || k->kind == S_SEEDS) && n > 0)
        return check_hosts(s, k->kind == S_SEEDS, why, len);
    if (k->kind == S_NODES && n > 0)
        return check_nodes(s, why, len);
    if (k->kind == S_ADDR) {
        unsigned char addr[sizeof(struct in6_addr)];
        if (inet_pton(AF_INET, s, addr) != 1 && inet_pton(AF_INET6, s, addr) != 1) {
            snprintf(why, len, "is not a numeric IPv4 or IPv6 address");
            return why;
        }
    }
    return NULL;
}

static cfg_status apply_int(cfg_config *c, const key_def *k, int64_t v, const char *shown,
                            const ctx *x)
{
    if ((v < k->min || v > k->max) && !(k->word && v == k->word_value)) {
        char b[128];
        bounds_text(k, b, sizeof b);
        return fail(x, CFG_INVALID, "%s = %s is out of range (allowed %s)", k->path, shown, b);
    }
    put_int(c, k, v);
    return CFG_OK;
}

static cfg_status apply_str(cfg_config *c, const key_def *k, const char *s, const char *shown,
                            const ctx *x)
{
    char why[128];
    if (check_str(k, s, why, sizeof why)) {
        char b[128];
        bounds_text(k, b, sizeof b);
        return fail(x, CFG_INVALID, "%s = %s %s (allowed %s)", k->path, shown, why, b);
    }
    put_str(c, k, s);
    return CFG_OK;
}

static int enum_index(const char *s, int64_t *out)
{
    for (size_t i = 0; i < LOG_LEVEL_COUNT; i++)
        if (strcasecmp(s, LOG_LEVELS[i]) == 0) {
            *out = (int64_t)i;
            return 0;
        }
    return -1;
}

static cfg_status bad_type(const key_def *k, const char *shown, const char *what, const ctx *x)
{
    char b[128];
    bounds_text(k, b, sizeof b);
    return fail(x, CFG_INVALID, "%s = %s %s (allowed %s)", k->path, shown, what, b);
}

/* Decimal only, optional '-', no spaces, no suffix: "1e3", " 5", "0x10"
 * and "5ms" are all errors rather than guesses. */
static int parse_i64(const char *s, int64_t *out, int *overflow)
{
    *overflow = 0;
    const char *p = s[0] == '-' ? s + 1 : s;
    if (!*p)
        return -1;
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9')
            return -1;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE) {
        *overflow = 1;
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

/* A value from text: the environment, --set and the other flags. */
static cfg_status apply_text(cfg_config *c, const key_def *k, const char *s, const ctx *x)
{
    char shown[160];
    show_text(k, s, shown, sizeof shown);
    switch (k->type) {
    case T_INT:
    case T_I64: {
        int64_t v = 0;
        int overflow;
        if (k->word && strcasecmp(s, k->word) == 0)
            return apply_int(c, k, k->word_value, shown, x);
        if (parse_i64(s, &v, &overflow) != 0)
            return bad_type(k, shown, overflow ? "is out of range" : "is not a decimal integer", x);
        return apply_int(c, k, v, shown, x);
    }
    case T_BOOL: {
        bool b;
        if (parse_bool(s, &b) != 0)
            return bad_type(k, shown, "is not a boolean (true/false, 1/0, yes/no, on/off)", x);
        put_int(c, k, b);
        return CFG_OK;
    }
    case T_ENUM: {
        int64_t v;
        if (enum_index(s, &v) != 0)
            return bad_type(k, shown, "is not a known value", x);
        put_int(c, k, v);
        return CFG_OK;
    }
    case T_STR: return apply_str(c, k, s, shown, x);
    }
    return CFG_INVALID;
}

/* redlock.nodes or redis.sentinels as a JSON array of "host:port" strings: joined with
 * commas, then checked as the text form is. */
_Static_assert(CFG_SENTINELS_LEN <= CFG_NODES_LEN && CFG_CLUSTER_LEN <= CFG_NODES_LEN,
               "apply_node_array joins into CFG_NODES_LEN");

static cfg_status apply_node_array(cfg_config *c, const key_def *k, const cJSON *item,
                                   const char *shown, const ctx *x)
{
    char joined[CFG_NODES_LEN + 2] = "";
    const cJSON *e;
    cJSON_ArrayForEach(e, item)
    {
        if (!cJSON_IsString(e))
            return bad_type(k, shown, "is not an array of strings", x);
        /* one address an element: "" or "a:1,b:2" would read as none or
         * two once joined */
        if (e->valuestring[0] == '\0' || strchr(e->valuestring, ','))
            return bad_type(k, shown, "has an element that is empty or holds a comma", x);
        if (strlen(joined) + strlen(e->valuestring) + 2 > sizeof joined)
            return bad_type(k, shown, "is too long", x);
        append(joined, sizeof joined, "%s%s", joined[0] ? "," : "", e->valuestring);
    }
    return apply_str(c, k, joined, shown, x);
}

/* A value from the JSON file: the JSON type must match the key's type. */
static cfg_status apply_json(cfg_config *c, const key_def *k, const cJSON *item, const ctx *x)
{
    char shown[160];
    show_json(k, item, shown, sizeof shown);
    switch (k->type) {
    case T_INT:
    case T_I64: {
        if (k->word && cJSON_IsString(item) && strcasecmp(item->valuestring, k->word) == 0)
            return apply_int(c, k, k->word_value, shown, x);
        if (!cJSON_IsNumber(item)) {
            char what[64];
            snprintf(what, sizeof what, "is not a number%s%s%s", k->word ? " or \"" : "",
                     k->word ? k->word : "", k->word ? "\"" : "");
            return bad_type(k, shown, what, x);
        }
        double d = item->valuedouble;
        /* Check the range on the double first: converting an out-of-range
         * double to int64_t is undefined behaviour. */
        if (!(d >= (double)k->min && d <= (double)k->max))
            return bad_type(k, shown, "is out of range", x);
        if (d != (double)(int64_t)d)
            return bad_type(k, shown, "is not an integer", x);
        return apply_int(c, k, (int64_t)d, shown, x);
    }
    case T_BOOL:
        if (!cJSON_IsBool(item))
            return bad_type(k, shown, "is not true or false", x);
        put_int(c, k, cJSON_IsTrue(item));
        return CFG_OK;
    case T_ENUM: {
        int64_t v;
        if (!cJSON_IsString(item))
            return bad_type(k, shown, "is not a string", x);
        if (enum_index(item->valuestring, &v) != 0)
            return bad_type(k, shown, "is not a known value", x);
        put_int(c, k, v);
        return CFG_OK;
    }
    case T_STR:
        if ((k->kind == S_NODES || k->kind == S_HOSTS || k->kind == S_SEEDS) && cJSON_IsArray(item))
            return apply_node_array(c, k, item, shown, x);
        if (!cJSON_IsString(item))
            return bad_type(k, shown, "is not a string", x);
        return apply_str(c, k, item->valuestring, shown, x);
    }
    return CFG_INVALID;
}

/* 127.0.0.0/8, ::1 or ::ffff:127.x.y.z (listen.address is numeric). */
static int is_loopback(const char *addr)
{
    unsigned char b[16];
    if (inet_pton(AF_INET, addr, b) == 1)
        return b[0] == 127;
    if (inet_pton(AF_INET6, addr, b) != 1)
        return 0;
    static const unsigned char v6_loop[16] = {[15] = 1};
    static const unsigned char v4_mapped[12] = {[10] = 0xff, [11] = 0xff};
    return memcmp(b, v6_loop, 16) == 0 || (memcmp(b, v4_mapped, 12) == 0 && b[12] == 127);
}

/* The first item of list a (host:port items separated by commas) that list
 * b names too, host without case, into out (len bytes); false when none. */
static bool shared_item(const char *a, const char *b, char *out, size_t len)
{
    for (const char *p = a; *p;) {
        size_t n = strcspn(p, ",");
        for (const char *q = b; *q;) {
            size_t m = strcspn(q, ",");
            if (n == m && strncasecmp(p, q, n) == 0) {
                snprintf(out, len, "%.*s", (int)n, p);
                return true;
            }
            q += m + (q[m] == ',');
        }
        p += n + (p[n] == ',');
    }
    return false;
}

/* Rules between keys, checked once every source has been applied, since the
 * two keys of a rule may come from different sources. */
static cfg_status check_relations(const cfg_config *c, const ctx *x)
{
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const key_def *k = &KEYS[i];
        if (!k->le)
            continue;
        const key_def *cap = find_key(k->le);
        int64_t v = get_int(c, k), capv = cap ? get_int(c, cap) : INT64_MAX;
        if (v > capv / k->le_div) {
            char b[128];
            bounds_text(k, b, sizeof b);
            return fail(x, CFG_INVALID,
                        "%s = %" PRId64 " is larger than %s%s = %" PRId64 " (allowed %s)", k->path,
                        v, k->le_div == 2 ? "half of " : "", k->le, capv, b);
        }
    }
    if (c->redis.cluster_nodes[0] && c->redis.sentinels[0])
        return fail(x, CFG_INVALID,
                    "redis.cluster_nodes and redis.sentinels are both set: a Redis Cluster "
                    "fails over by itself, the service follows one or the other");
    if (c->redis.cluster_nodes[0] && c->redis.wait_replicas == CFG_WAIT_REPLICAS_ALL)
        return fail(x, CFG_INVALID,
                    "redis.wait_replicas = all with redis.cluster_nodes: each master has its "
                    "own replicas, give a number (WAIT runs on the master that wrote)");
    if (c->redis.cluster_nodes[0] && c->redis.db != 0)
        return fail(x, CFG_INVALID,
                    "redis.db = %d with redis.cluster_nodes: a Redis Cluster has database 0 "
                    "only",
                    c->redis.db);
    /* Redlock's masters are independent of one another by definition; a
     * cluster's node would also answer MOVED for most lock keys */
    char both[300];
    if (shared_item(c->redlock.nodes, c->redis.cluster_nodes, both, sizeof both))
        return fail(x, CFG_INVALID,
                    "redlock.nodes names %s, which redis.cluster_nodes names too: Redlock's lock "
                    "masters must be independent Redis servers, not the masters of one cluster "
                    "(they share its failovers, and a cluster node refuses keys of slots it "
                    "does not serve)",
                    both);
    if (c->redis.sentinels[0] && !c->redis.master_name[0])
        return fail(x, CFG_INVALID,
                    "redis.master_name is empty while redis.sentinels is set: the Sentinels "
                    "are asked for a master by its name");
    /* Open by default no more: reachable from other hosts, an empty admin
     * token would let anyone reset the stock or (faults.enabled) end the
     * process. Running open must be asked for. */
    if (!c->listen.allow_open && c->admin_token[0] == '\0' && !is_loopback(c->listen.address))
        return fail(
            x, CFG_INVALID,
            "listen.address = %s is not a loopback address and "
            "admin_token is empty: PUT /stock, ?fault=, ?step=1 and /steps would be open to "
            "anyone who can connect (set admin_token, or listen.allow_open = true to run open)",
            c->listen.address);
    return CFG_OK;
}

/* --- public: defaults, set, validate --------------------------------------- */

void cfg_defaults(cfg_config *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < KEY_COUNT; i++) {
        if (KEYS[i].type == T_STR)
            put_str(c, &KEYS[i], KEYS[i].def_str);
        else
            put_int(c, &KEYS[i], KEYS[i].def_int);
    }
}

static void clear_err(char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
}

cfg_status cfg_set(cfg_config *c, const char *key, const char *value, char *err, size_t errlen)
{
    ctx x = {"", err, errlen};
    clear_err(err, errlen);
    if (key == NULL || value == NULL) {
        if (err && errlen)
            snprintf(err, errlen, "cfg_set: a NULL %s", key == NULL ? "key" : "value");
        return CFG_INVALID;
    }
    const key_def *k = find_key(key);
    if (!k)
        return fail_unknown(&x, key);
    return apply_text(c, k, value, &x);
}

cfg_status cfg_validate(const cfg_config *c, char *err, size_t errlen)
{
    ctx x = {"", err, errlen};
    clear_err(err, errlen);
    /* Re-apply every stored value to a scratch copy: the same checks as the
     * parsers, so a value set directly in the struct is judged alike. */
    cfg_config scratch;
    cfg_defaults(&scratch);
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const key_def *k = &KEYS[i];
        cfg_status st;
        if (k->type == T_STR) {
            const char *s = cmember(c, k);
            if (!memchr(s, '\0', k->size))
                return fail(&x, CFG_INVALID, "%s is not NUL-terminated", k->path);
            char shown[160];
            show_text(k, s, shown, sizeof shown);
            st = apply_str(&scratch, k, s, shown, &x);
        } else if (k->type == T_ENUM || k->type == T_BOOL) {
            int64_t v = get_int(c, k);
            int64_t hi = k->type == T_ENUM ? (int64_t)LOG_LEVEL_COUNT - 1 : 1;
            if (v < 0 || v > hi)
                return fail(&x, CFG_INVALID, "%s = %" PRId64 " is not a valid %s", k->path, v,
                            type_name(k));
            st = CFG_OK;
        } else {
            char shown[32];
            snprintf(shown, sizeof shown, "%" PRId64, get_int(c, k));
            st = apply_int(&scratch, k, get_int(c, k), shown, &x);
        }
        if (st != CFG_OK)
            return st;
    }
    return check_relations(c, &x);
}

/* --- the JSON file -------------------------------------------------------- */

static cfg_status read_file(const char *path, char **out, size_t *outlen, const ctx *x)
{
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer, so
     * the check that it is a regular file must come after an open that
     * cannot block. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return fail(x, CFG_IO, "cannot open config file: %s", strerror(e));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int e = errno;
        fclose(f);
        return fail(x, CFG_IO, "cannot stat config file: %s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(f);
        return fail(x, CFG_IO, "config file is not a regular file");
    }
    if (st.st_size > MAX_FILE_BYTES) {
        fclose(f);
        return fail(x, CFG_IO, "config file is %lld bytes, larger than %d", (long long)st.st_size,
                    MAX_FILE_BYTES);
    }
    size_t cap = (size_t)st.st_size;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return fail(x, CFG_NOMEM, "out of memory reading the config file");
    }
    size_t n = fread(buf, 1, cap, f);
    int rerr = ferror(f);
    fclose(f);
    if (rerr) {
        free(buf);
        return fail(x, CFG_IO, "cannot read config file");
    }
    buf[n] = '\0';
    *out = buf;
    *outlen = n;
    return CFG_OK;
}

/* Whether the line of buf holding off names a secret key ("password",
 * "admin_token") before off: an excerpt from there could be the secret. */
static int secret_on_line(const char *buf, size_t off)
{
    size_t start = off;
    while (start > 0 && buf[start - 1] != '\n')
        start--;
    for (size_t i = 0; i < KEY_COUNT; i++) {
        if (!(KEYS[i].flags & F_SECRET))
            continue;
        const char *dot = strrchr(KEYS[i].path, '.');
        const char *name = dot ? dot + 1 : KEYS[i].path;
        size_t n = strlen(name);
        for (size_t j = start; j + n + 2 <= off; j++) /* "name" ends before off */
            if (buf[j] == '"' && strncmp(buf + j + 1, name, n) == 0 && buf[j + 1 + n] == '"')
                return 1;
    }
    return 0;
}

static cfg_status syntax_error(const char *buf, size_t len, const char *end, const ctx *x)
{
    size_t off = end && end >= buf && end <= buf + len ? (size_t)(end - buf) : 0;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < off; i++) {
        if (buf[i] == '\n') {
            line++;
            col = 1;
        } else
            col++;
    }
    char near[96];
    char frag[24];
    snprintf(frag, sizeof frag, "%.20s", buf + off);
    show_text(NULL, frag, near, sizeof near);
    if (off < len && secret_on_line(buf, off))
        snprintf(near, sizeof near, "(a line with a secret: not shown)");
    if (off >= len)
        return fail(x, CFG_INVALID, "line %zu, column %zu: invalid JSON (unexpected end of file)",
                    line, col);
    return fail(x, CFG_INVALID, "line %zu, column %zu: invalid JSON near %s", line, col, near);
}

static int is_comment(const char *name)
{
    return name && name[0] == '_';
}

/* A name at the top level is a section when some key lives under it. */
static int is_section(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < KEY_COUNT; i++)
        if (strncmp(KEYS[i].path, name, n) == 0 && KEYS[i].path[n] == '.')
            return 1;
    return 0;
}

static cfg_status apply_member(cfg_config *c, const char *path, const cJSON *item, bool *seen,
                               const ctx *x)
{
    const key_def *k = find_key(path);
    if (!k)
        return fail_unknown(x, path);
    size_t i = (size_t)(k - KEYS);
    if (seen[i])
        return fail(x, CFG_INVALID, "duplicate key '%s'", path);
    seen[i] = true;
    return apply_json(c, k, item, x);
}

static cfg_status apply_tree(cfg_config *c, const cJSON *root, const ctx *x)
{
    if (!cJSON_IsObject(root))
        return fail(x, CFG_INVALID, "the top level must be a JSON object");
    bool seen[KEY_COUNT] = {false};
    const cJSON *item;
    cJSON_ArrayForEach(item, root)
    {
        const char *name = item->string;
        if (is_comment(name))
            continue;
        if (is_section(name)) {
            if (!cJSON_IsObject(item)) {
                char shown[96];
                show_json(NULL, item, shown, sizeof shown);
                return fail(x, CFG_INVALID, "%s = %s is not an object (a section of keys %s.*)",
                            name, shown, name);
            }
            /* A section written twice would silently merge; refuse it. */
            for (const cJSON *prev = root->child; prev != item; prev = prev->next)
                if (prev->string && strcmp(prev->string, name) == 0)
                    return fail(x, CFG_INVALID, "duplicate section '%s'", name);
            const cJSON *sub;
            cJSON_ArrayForEach(sub, item)
            {
                if (is_comment(sub->string))
                    continue;
                char path[256];
                snprintf(path, sizeof path, "%s.%s", name, sub->string);
                cfg_status st = apply_member(c, path, sub, seen, x);
                if (st != CFG_OK)
                    return st;
            }
            continue;
        }
        /* Dotted names at the top level are not the file's format. */
        if (strchr(name, '.')) {
            char shown[96];
            show_text(NULL, name, shown, sizeof shown);
            if (find_key(name))
                return fail(x, CFG_INVALID,
                            "key %s: a dotted key must be written as nested "
                            "objects in the file, e.g. {\"lock\":{\"lease_ms\":200}}",
                            shown);
            return fail_unknown(x, name);
        }
        cfg_status st = apply_member(c, name, item, seen, x);
        if (st != CFG_OK)
            return st;
    }
    return CFG_OK;
}

static cfg_status load_file(cfg_config *c, const char *path, char *err, size_t errlen)
{
    ctx x = {path, err, errlen};
    char *buf = NULL;
    size_t len = 0;
    cfg_status st = read_file(path, &buf, &len, &x);
    if (st != CFG_OK)
        return st;
    if (strlen(buf) != len) {
        size_t at = strlen(buf);
        free(buf);
        return fail(&x, CFG_INVALID, "contains a NUL byte at offset %zu", at);
    }
    /* The escape \u0000 would end a string early once parsed (an admin
     * token of "\u0000" would read as none): refused like a raw NUL. */
    for (const char *p = buf; (p = strstr(p, "\\u0000")) != NULL; p++) {
        size_t slashes = 0;
        while (p - slashes > buf && p[-1 - (ptrdiff_t)slashes] == '\\')
            slashes++;
        if (slashes % 2 == 0) { /* this backslash starts an escape */
            size_t at = (size_t)(p - buf);
            free(buf);
            return fail(&x, CFG_INVALID,
                        "contains the escape \\u0000 (a NUL character) at "
                        "offset %zu",
                        at);
        }
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(buf, &end, 1);
    if (!root) {
        st = syntax_error(buf, len, end, &x);
        free(buf);
        return st;
    }
    st = apply_tree(c, root, &x);
    cJSON_Delete(root);
    free(buf);
    return st;
}

/* --- environment ---------------------------------------------------------- */

static cfg_status load_env(cfg_config *c, char *err, size_t errlen)
{
    for (size_t i = 0; i < KEY_COUNT; i++) {
        char name[96];
        env_name(&KEYS[i], name, sizeof name);
        const char *v = getenv(name);
        if (!v)
            continue;
        ctx x = {name, err, errlen};
        cfg_status st = apply_text(c, &KEYS[i], v, &x);
        if (st != CFG_OK)
            return st;
    }
    return CFG_OK;
}

size_t cfg_unknown_env(char *buf, size_t len)
{
    size_t count = 0;
    if (buf && len)
        buf[0] = '\0';
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, ENV_PREFIX, strlen(ENV_PREFIX)) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
        int known = strlen(ENV_CONFIG) == n && strncmp(*e, ENV_CONFIG, n) == 0;
        for (size_t i = 0; i < KEY_COUNT && !known; i++) {
            char name[96];
            env_name(&KEYS[i], name, sizeof name);
            known = strlen(name) == n && strncmp(*e, name, n) == 0;
        }
        if (known)
            continue;
        if (buf && len)
            append(buf, len, "%s%.*s", count ? "," : "", (int)n, *e);
        count++;
    }
    return count;
}

/* --- flags ---------------------------------------------------------------- */

typedef enum flag_id {
    FL_CONFIG,
    FL_PORT,
    FL_LISTEN,
    FL_REDIS,
    FL_INSTANCE,
    FL_SET,
    FL_PRINT,
    FL_HELP,
    FL_VERSION
} flag_id;

typedef struct flag_def {
    const char *name;
    const char *alias; /* short form or NULL */
    flag_id id;
    const char *arg; /* NULL: takes no value */
    const char *key; /* the key a one-key flag sets */
    const char *help;
} flag_def;

static const flag_def FLAGS[] = {
    {"--config", NULL, FL_CONFIG, "FILE", NULL,
     "JSON config file, at most one (default: $MIAOSHA_CONFIG, else none)"},
    {"--port", NULL, FL_PORT, "N", "listen.port", "same as --set listen.port=N"},
    {"--listen", NULL, FL_LISTEN, "ADDR", "listen.address", "same as --set listen.address=ADDR"},
    {"--redis", NULL, FL_REDIS, "HOST:PORT", NULL,
     "redis.host and redis.port; IPv6 as [ADDR]:PORT"},
    {"--instance-id", NULL, FL_INSTANCE, "ID", "instance_id", "same as --set instance_id=ID"},
    {"--set", NULL, FL_SET, "KEY=VALUE", NULL, "set any key below; repeatable"},
    {"--print-config", NULL, FL_PRINT, NULL, NULL,
     "check the config, print it as JSON (secrets masked), exit 0"},
    {"--help", "-h", FL_HELP, NULL, NULL, "print this help and exit 0"},
    {"--version", "-V", FL_VERSION, NULL, NULL, "print the version and exit 0"},
};
#define FLAG_COUNT (sizeof FLAGS / sizeof FLAGS[0])

/* Matches argv[*i] against the flags; sets *val for a flag with a value
 * ("--f=V" or "--f V", advancing *i). NULL *fd = not a known flag. */
static cfg_status next_flag(int argc, char **argv, int *i, const flag_def **fd, const char **val,
                            const ctx *x)
{
    const char *a = argv[*i];
    *fd = NULL;
    *val = NULL;
    for (size_t f = 0; f < FLAG_COUNT; f++) {
        const flag_def *d = &FLAGS[f];
        size_t n = strlen(d->name);
        if (d->alias && strcmp(a, d->alias) == 0) {
            *fd = d;
            return CFG_OK;
        }
        if (strncmp(a, d->name, n) != 0 || (a[n] != '\0' && a[n] != '='))
            continue;
        *fd = d;
        if (!d->arg) {
            if (a[n] == '=')
                return fail(x, CFG_INVALID, "option %s takes no value", d->name);
            return CFG_OK;
        }
        if (a[n] == '=') {
            *val = a + n + 1;
        } else if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
            *val = argv[++*i];
        } else {
            /* "--config --help": the next word is a flag, not a value (give
             * a value that starts with "--" as --flag=VALUE). */
            return fail(x, CFG_INVALID, "option %s needs a value (%s %s)", d->name, d->name,
                        d->arg);
        }
        return CFG_OK;
    }
    return CFG_OK;
}

/* "host:port" or "[v6addr]:port". An unbracketed IPv6 address is refused
 * because its last ':' cannot be told from the port separator. */
static cfg_status apply_redis_flag(cfg_config *c, const char *v, const ctx *x)
{
    char shown[96];
    show_text(NULL, v, shown, sizeof shown);
    char host[CFG_HOST_LEN];
    const char *port;
    if (v[0] == '[') {
        const char *close = strchr(v, ']');
        if (!close || close[1] != ':')
            return fail(x, CFG_INVALID, "%s is not HOST:PORT or [IPV6]:PORT", shown);
        size_t n = (size_t)(close - v - 1);
        if (n == 0 || n >= sizeof host)
            return fail(x, CFG_INVALID, "%s has an empty or too long host", shown);
        memcpy(host, v + 1, n);
        host[n] = '\0';
        port = close + 2;
    } else {
        const char *colon = strrchr(v, ':');
        if (!colon)
            return fail(x, CFG_INVALID, "%s is not HOST:PORT (the port is required)", shown);
        size_t n = (size_t)(colon - v);
        if (memchr(v, ':', n))
            return fail(x, CFG_INVALID, "%s is ambiguous: write an IPv6 host as [ADDR]:PORT",
                        shown);
        if (n == 0)
            return fail(x, CFG_INVALID, "%s has an empty host", shown);
        if (n >= sizeof host)
            return fail(x, CFG_INVALID, "%s has a too long host", shown);
        memcpy(host, v, n);
        host[n] = '\0';
        port = colon + 1;
    }
    cfg_config tmp = *c;
    cfg_status st = apply_text(&tmp, find_key("redis.host"), host, x);
    if (st == CFG_OK)
        st = apply_text(&tmp, find_key("redis.port"), port, x);
    if (st == CFG_OK)
        *c = tmp;
    return st;
}

static cfg_status apply_flag(cfg_config *c, const flag_def *d, const char *v, const ctx *x)
{
    if (d->key)
        return apply_text(c, find_key(d->key), v, x);
    if (d->id == FL_REDIS)
        return apply_redis_flag(c, v, x);
    if (d->id == FL_SET) {
        const char *eq = strchr(v, '=');
        if (!eq) {
            char shown[96];
            show_text(NULL, v, shown, sizeof shown);
            return fail(x, CFG_INVALID, "%s is not KEY=VALUE", shown);
        }
        char key[128];
        size_t n = (size_t)(eq - v);
        if (n >= sizeof key)
            n = sizeof key - 1;
        memcpy(key, v, n);
        key[n] = '\0';
        const key_def *k = find_key(key);
        if (!k)
            return fail_unknown(x, key);
        return apply_text(c, k, eq + 1, x);
    }
    return CFG_OK; /* --config, --print-config: handled by the first pass */
}

/* --- cfg_load -------------------------------------------------------------- */

/* Several instances share one Redis, so an unset id must still be unique. */
static void fill_instance_id(cfg_config *c)
{
    if (c->instance_id[0])
        return;
    uuid_t u;
    char text[37];
    uuid_generate(u);
    uuid_unparse_lower(u, text);
    _Static_assert(sizeof text <= CFG_ID_LEN, "a UUID fits the instance id");
    memcpy(c->instance_id, text, sizeof text);
}

static cfg_status load(cfg_config *c, int argc, char **argv, char *err, size_t errlen)
{
    const char *file = NULL;
    bool print = false, file_twice = false;

    /* First pass: help and version win over everything (even a broken
     * config), and the file must be known before the environment and the
     * other flags are applied on top of it. */
    for (int i = 1; i < argc; i++) {
        const flag_def *d;
        const char *v;
        ctx x = {argv[i], err, errlen};
        cfg_status st = next_flag(argc, argv, &i, &d, &v, &x);
        /* A malformed flag (a missing value) makes the rest of the line
         * unreadable, so it is reported even before --help. */
        if (st != CFG_OK)
            return st;
        if (!d)
            continue;
        if (d->id == FL_HELP)
            return CFG_EXIT_HELP;
        if (d->id == FL_VERSION)
            return CFG_EXIT_VERSION;
        if (d->id == FL_CONFIG) {
            file_twice = file != NULL;
            file = v;
        }
        if (d->id == FL_PRINT)
            print = true;
    }
    clear_err(err, errlen);
    /* One file is read, never a merge of two: a second --config would
     * silently drop the first's keys. (Checked after the loop, so that
     * --help still wins.) */
    if (file_twice) {
        ctx x = {"--config", err, errlen};
        return fail(&x, CFG_INVALID, "given twice (one file is read: merge them into one)");
    }

    if (!file) {
        const char *e = getenv(ENV_CONFIG);
        if (e && *e)
            file = e;
    }
    if (file) {
        if (file[0] == '\0') { /* --config "" (an empty $MIAOSHA_CONFIG means none) */
            ctx x = {"--config", err, errlen};
            return fail(&x, CFG_INVALID, "an empty file name");
        }
        if (strlen(file) >= sizeof c->config_path) {
            ctx x = {"--config", err, errlen};
            return fail(&x, CFG_INVALID, "path is longer than %zu bytes",
                        sizeof c->config_path - 1);
        }
        cfg_status st = load_file(c, file, err, errlen);
        if (st != CFG_OK)
            return st;
        snprintf(c->config_path, sizeof c->config_path, "%s", file);
    }

    cfg_status st = load_env(c, err, errlen);
    if (st != CFG_OK)
        return st;

    for (int i = 1; i < argc; i++) {
        const flag_def *d;
        const char *v;
        const char *arg = argv[i];
        ctx x = {"", err, errlen};
        st = next_flag(argc, argv, &i, &d, &v, &x);
        if (st != CFG_OK)
            return st;
        if (!d) {
            char shown[96];
            show_text(NULL, arg, shown, sizeof shown);
            if (arg[0] == '-')
                return fail(&x, CFG_INVALID, "unknown option %s (see --help)", shown);
            return fail(&x, CFG_INVALID, "unexpected argument %s (see --help)", shown);
        }
        ctx fx = {d->name, err, errlen};
        st = apply_flag(c, d, v, &fx);
        if (st != CFG_OK)
            return st;
    }

    ctx x = {"", err, errlen};
    st = check_relations(c, &x);
    if (st != CFG_OK)
        return st;
    fill_instance_id(c);
    return print ? CFG_EXIT_PRINT : CFG_OK;
}

cfg_status cfg_load(cfg_config *c, int argc, char **argv, char *err, size_t errlen)
{
    clear_err(err, errlen);
    if (argc < 0 || (argc > 0 && !argv))
        argc = 0;
    cfg_config work;
    cfg_defaults(&work);
    cfg_status st = load(&work, argc, argv, err, errlen);
    if (st == CFG_OK || st == CFG_EXIT_PRINT)
        *c = work;
    else
        cfg_defaults(c);
    return st;
}

/* --- output ---------------------------------------------------------------- */

static void default_text(const key_def *k, char *buf, size_t len)
{
    switch (k->type) {
    case T_INT:
    case T_I64: snprintf(buf, len, "%" PRId64, k->def_int); break;
    case T_BOOL: snprintf(buf, len, "%s", k->def_int ? "true" : "false"); break;
    case T_ENUM: snprintf(buf, len, "\"%s\"", LOG_LEVELS[k->def_int]); break;
    case T_STR: snprintf(buf, len, "\"%s\"", k->def_str); break;
    }
}

/* One line per key for the documented file: meaning, type, default, bounds
 * and environment variable. */
static void doc_line(const key_def *k, char *buf, size_t len)
{
    char b[128], d[96], e[96];
    bounds_text(k, b, sizeof b);
    default_text(k, d, sizeof d);
    env_name(k, e, sizeof e);
    snprintf(buf, len, "%s. %s%s%s%s, default %s, allowed %s; env %s", k->desc, type_name(k),
             *k->unit ? " (" : "", k->unit, *k->unit ? ")" : "", d, b, e);
}

/* cJSON's pretty printer indents with tabs and puts a tab after ':'. Tabs
 * never occur inside its strings (they are escaped as \t), so every tab is
 * layout and can be rewritten as spaces. */
static char *detab(const char *s)
{
    size_t n = 0;
    for (const char *p = s; *p; p++)
        n += *p == '\t' ? 2 : 1;
    char *out = malloc(n + 2);
    if (!out)
        return NULL;
    char *o = out;
    int line_start = 1;
    for (const char *p = s; *p; p++) {
        if (*p == '\t') {
            if (line_start) {
                *o++ = ' ';
                *o++ = ' ';
            } else
                *o++ = ' ';
            continue;
        }
        line_start = *p == '\n';
        *o++ = *p;
    }
    *o++ = '\n';
    *o = '\0';
    return out;
}

char *cfg_to_json(const cfg_config *c, unsigned flags)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    int ok = 1;
    if (flags & CFG_JSON_DOC)
        ok &= cJSON_AddStringToObject(
                  root, "_comment",
                  "miaosha configuration: every key with its default. Keys starting with '_' are "
                  "comments. Precedence: built-in defaults < this file < MIAOSHA_* environment < "
                  "command-line flags. See config/README.md.") != NULL;
    for (size_t i = 0; i < KEY_COUNT && ok; i++) {
        const key_def *k = &KEYS[i];
        cJSON *obj = root;
        const char *leaf = k->path;
        const char *dot = strchr(k->path, '.');
        if (dot) {
            char sec[64];
            snprintf(sec, sizeof sec, "%.*s", (int)(dot - k->path), k->path);
            obj = cJSON_GetObjectItemCaseSensitive(root, sec);
            if (!obj)
                obj = cJSON_AddObjectToObject(root, sec);
            if (!obj) {
                ok = 0;
                break;
            }
            leaf = dot + 1;
        }
        if (flags & CFG_JSON_DOC) {
            char name[80], doc[512];
            snprintf(name, sizeof name, "_%s", leaf);
            doc_line(k, doc, sizeof doc);
            ok &= cJSON_AddStringToObject(obj, name, doc) != NULL;
        }
        switch (k->type) {
        case T_INT:
        case T_I64:
            if (k->word && get_int(c, k) == k->word_value)
                ok &= cJSON_AddStringToObject(obj, leaf, k->word) != NULL;
            else
                ok &= cJSON_AddNumberToObject(obj, leaf, (double)get_int(c, k)) != NULL;
            break;
        case T_BOOL: ok &= cJSON_AddBoolToObject(obj, leaf, get_int(c, k) != 0) != NULL; break;
        case T_ENUM:
            ok &= cJSON_AddStringToObject(obj, leaf,
                                          cfg_log_level_name((cfg_log_level)get_int(c, k))) != NULL;
            break;
        case T_STR: {
            char s[CFG_PATH_LEN];
            snprintf(s, sizeof s, "%.*s", (int)(k->size - 1), (const char *)cmember(c, k));
            if ((k->flags & F_SECRET) && !(flags & CFG_JSON_SHOW_SECRETS) && s[0])
                snprintf(s, sizeof s, "***");
            ok &= cJSON_AddStringToObject(obj, leaf, s) != NULL;
            break;
        }
        }
    }
    char *txt = ok ? ((flags & CFG_JSON_PRETTY) ? cJSON_Print(root) : cJSON_PrintUnformatted(root))
                   : NULL;
    cJSON_Delete(root);
    if (!txt)
        return NULL;
    /* Our own copy, so the caller frees with free() whatever cJSON's hooks. */
    char *out = (flags & CFG_JSON_PRETTY) ? detab(txt) : strdup(txt);
    cJSON_free(txt);
    return out;
}

void cfg_print_help(FILE *out)
{
    fprintf(out, "Usage: miaosha-server [OPTION]...\n"
                 "A seckill (flash-sale) inventory service that shows how a stock counter gets\n"
                 "oversold and how each kind of lock fixes it.\n\nOptions:\n");
    for (size_t f = 0; f < FLAG_COUNT; f++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s%s", FLAGS[f].alias ? FLAGS[f].alias : "",
                 FLAGS[f].alias ? ", " : "", FLAGS[f].name, FLAGS[f].arg ? " " : "",
                 FLAGS[f].arg ? FLAGS[f].arg : "");
        fprintf(out, "  %-24s %s\n", left, FLAGS[f].help);
    }
    fprintf(out, "\nSettings (JSON path, also the --set KEY; environment variable; type;\n"
                 "default; allowed values):\n");
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const key_def *k = &KEYS[i];
        char b[128], d[96], e[96];
        bounds_text(k, b, sizeof b);
        default_text(k, d, sizeof d);
        env_name(k, e, sizeof e);
        fprintf(out, "  %-28s %s\n      %s%s%s%s, default %s, allowed %s\n      %s\n", k->path, e,
                type_name(k), *k->unit ? " (" : "", k->unit, *k->unit ? ")" : "", d, b, k->desc);
    }
    fprintf(out, "\nPrecedence, lowest first: built-in defaults < the JSON file < MIAOSHA_*\n"
                 "environment variables < command-line flags (left to right). The file is\n"
                 "nested by the dots of the path: {\"lock\":{\"lease_ms\":200}}; keys starting\n"
                 "with '_' are comments; unknown keys are errors. In the environment and on\n"
                 "the command line integers are decimal and booleans true/false, 1/0, yes/no\n"
                 "or on/off.\n"
                 "An invalid configuration exits with status 2 and names the key, the value\n"
                 "and the allowed range.\n\n"
                 "Examples:\n"
                 "  miaosha-server --config config/miaosha.json --port 8081\n"
                 "  MIAOSHA_REDIS_HOST=10.0.0.5 miaosha-server --set lock.lease_ms=200\n"
                 "  miaosha-server --redis [::1]:6380 --instance-id node-b --print-config\n");
}

void cfg_print_version(FILE *out)
{
    fprintf(out, "miaosha %s\n", MIAOSHA_VERSION);
}

const char *cfg_version(void)
{
    return MIAOSHA_VERSION;
}

int cfg_exit_code(cfg_status status)
{
    switch (status) {
    case CFG_OK: return -1;
    case CFG_EXIT_HELP:
    case CFG_EXIT_VERSION:
    case CFG_EXIT_PRINT: return 0;
    case CFG_INVALID:
    case CFG_IO: return 2;
    case CFG_NOMEM: return 1;
    }
    return 1;
}

const char *cfg_status_name(cfg_status status)
{
    switch (status) {
    case CFG_OK: return "ok";
    case CFG_EXIT_HELP: return "exit_help";
    case CFG_EXIT_VERSION: return "exit_version";
    case CFG_EXIT_PRINT: return "exit_print";
    case CFG_INVALID: return "invalid";
    case CFG_IO: return "io";
    case CFG_NOMEM: return "nomem";
    }
    return "?";
}

const char *cfg_log_level_name(cfg_log_level level)
{
    return (unsigned)level < LOG_LEVEL_COUNT ? LOG_LEVELS[level] : "?";
}

/* svc_params.h — validation of query parameters, path segments and a
 * purchase's JSON body (the same parameters). Every route names the
 * parameters it accepts; anything else is a 400 that names the
 * parameter. */
#ifndef MIAOSHA_SVC_PARAMS_H
#define MIAOSHA_SVC_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "svc.h"

enum {
    SVC_P_SKU = 1u << 0,
    SVC_P_USER = 1u << 1,
    SVC_P_WORK_MS = 1u << 2,
    SVC_P_LEASE_MS = 1u << 3,
    SVC_P_WAIT_MS = 1u << 4,
    SVC_P_REENTER = 1u << 5,
    SVC_P_FAULT = 1u << 6,
    SVC_P_STOCK = 1u << 7,
    SVC_P_OFFSET = 1u << 8,
    SVC_P_LIMIT = 1u << 9,
    SVC_P_PIPELINE = 1u << 10,
    SVC_P_TRACE = 1u << 11,   /* purchase: ?trace=0|1 (route_purchase adds it) */
    SVC_P_SINCE = 1u << 12,   /* GET /trace: ?since=N */
    SVC_P_STEP = 1u << 13,    /* purchase: ?step=0|1, a stepped purchase (svc_step.h) */
    SVC_P_PRETTY = 1u << 14,  /* GET /stats: ?pretty=0|1 */
    SVC_P_BUCKETS = 1u << 15, /* PUT /stock: ?buckets=1..SVC_BUCKETS_MAX (svc_bucket.h) */
};

#define SVC_P_PURCHASE                                                                             \
    (SVC_P_SKU | SVC_P_USER | SVC_P_WORK_MS | SVC_P_LEASE_MS | SVC_P_WAIT_MS | SVC_P_REENTER |     \
     SVC_P_FAULT | SVC_P_PIPELINE)

/* Bounds (inclusive); work_ms, lease_ms, wait_ms and reenter are capped by
 * the configuration (purchase.max_work_ms, lock.max_lease_ms,
 * lock.max_wait_ms, purchase.max_reenter). */
#define SVC_MAX_ARGS 32 /* query parameters per request */
#define SVC_STOCK_MAX 1000000000LL
#define SVC_OFFSET_MAX 1000000000LL
#define SVC_LIMIT_MAX 1000
#define SVC_LIMIT_DEFAULT 100
#define SVC_SINCE_MAX 999999999999LL /* the most svc_parse_int reads */

typedef enum {
    SVC_FAULT_NONE = 0,
    SVC_FAULT_CRASH_BEFORE_EXPIRE,
    SVC_FAULT_CRASH_IN_SECTION
} svc_fault;

typedef struct svc_params {
    unsigned seen; /* SVC_P_* bits present in the query */
    char sku[SVC_SKU_MAX + 1];
    char user[SVC_SKU_MAX + 1];
    int64_t work_ms, lease_ms, wait_ms, stock, offset, limit;
    int64_t buckets; /* ?buckets=, 0 when absent */
    int reenter;
    int pipeline;  /* ?pipeline=0|1 */
    int trace;     /* ?trace=0|1 */
    int step;      /* ?step=0|1 */
    int64_t since; /* ?since=N, 0 when absent */
    int pretty;    /* ?pretty=0|1 */
    svc_fault fault;
} svc_params;

/* 1 when s matches [A-Za-z0-9_-]{1,64}, else 0 (NULL included). Any
 * thread. */
int svc_valid_id(const char *s);
/* Strict decimal (digits only, no sign or spaces, at most 12 digits) in
 * [lo, hi]: 0 with *out set, or -1 with *out untouched (NULL or "" too).
 * Any thread. */
int svc_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Reads and validates every query argument of c (as libmicrohttpd decoded
 * them) against the allowed set (SVC_P_* bits); s gives the caps. Resets
 * *out first: seen = the parameters present, limit = SVC_LIMIT_DEFAULT,
 * the rest 0 until given. Stops at the first bad argument: an unknown or
 * disallowed name, a duplicate, a missing value ("?work_ms" without '='),
 * a value out of its bounds or shape, more than SVC_MAX_ARGS arguments.
 * Empty offset or limit ("?offset=&limit=") keep their defaults. Names are
 * quoted in detail with control and non-ASCII bytes as '?', cut at 40
 * bytes. Returns 0, or -1 with a human reason ("unknown parameter 'x'") in
 * detail (dlen bytes, always terminated). The calling HTTP thread. */
int svc_params_parse(struct MHD_Connection *c, const cfg_config *s, unsigned allowed,
                     svc_params *out, char *detail, size_t dlen);
/* The same checks on n decoded (keys[i], values[i]) pairs in query order;
 * values[i] NULL is an argument without '='. For callers without a
 * libmicrohttpd connection (the unit tests). Any thread. */
int svc_params_parse_pairs(const char *const *keys, const char *const *values, size_t n,
                           const cfg_config *s, unsigned allowed, svc_params *out, char *detail,
                           size_t dlen);

/* A purchase's JSON body, {"sku":"s","user":"u","work_ms":5,...}: the
 * query's parameters under the same names and with the same rules, merged
 * into *out, which holds the query's (svc_params_parse) and is added to.
 * The names and bounds are the query's (allowed bits, s's caps); values
 * are JSON strings for sku, user and fault, JSON integers for the numbers,
 * and 0, 1, false or true for pipeline, trace and step. The body counts its
 * own members against SVC_MAX_ARGS, apart from the query's (each source up
 * to SVC_MAX_ARGS). A parameter that is both in the query and in the body
 * is refused, whatever the two values: one rule, as PUT /stock's stock.
 * len 0 (no body) adds nothing. Returns 0, or -1 with the reason in detail
 * (dlen bytes): a body that is not one JSON object or holds a NUL character
 * (raw or escaped: a value would end there), or a member that the query
 * would refuse (named, "body: " in front). body[len] must be a NUL (the
 * daemon's buffer has one). The calling HTTP thread; parses under
 * svc_params_json's lock. */
int svc_params_parse_body(const char *body, size_t len, const cfg_config *s, unsigned allowed,
                          svc_params *out, char *detail, size_t dlen);
/* cJSON_ParseWithOpts(txt, end, require NUL after the value) under one
 * mutex: cJSON keeps its last parse error in a global, so every parse of
 * the service goes through here. Returns the document (the caller deletes
 * it) or NULL. Any thread. */
cJSON *svc_params_json(const char *txt, const char **end);

#endif

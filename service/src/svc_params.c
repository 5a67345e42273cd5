/* svc_params.c — query-string and purchase-body validation (see svc_params.h). */
#include "svc_params.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "svc_check.h"

int svc_valid_id(const char *s)
{
    size_t n = 0;
    if (s == NULL)
        return 0;
    for (; s[n] != '\0'; n++) {
        char ch = s[n];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '-';
        if (!ok || n >= SVC_SKU_MAX)
            return 0;
    }
    return n >= 1;
}

int svc_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v = 0;
    size_t n = 0;
    if (s == NULL || s[0] == '\0')
        return -1;
    for (; s[n] != '\0'; n++) {
        if (s[n] < '0' || s[n] > '9' || n >= 12)
            return -1;
        v = v * 10 + (s[n] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

typedef struct parse_ctx {
    const cfg_config *s;
    unsigned allowed;
    svc_params *out;
    char *detail;
    size_t dlen;
    int failed;
    int count;
} parse_ctx;

/* Copies an untrusted name into a short printable form for error details. */
static void printable(char *dst, size_t len, const char *src)
{
    size_t i = 0;
    for (; src != NULL && src[i] != '\0' && i + 1 < len && i < 40; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    dst[i] = '\0';
}

__attribute__((format(printf, 2, 3))) static enum MHD_Result bad(parse_ctx *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->detail, p->dlen, fmt, ap);
    va_end(ap);
    p->failed = 1;
    return MHD_NO;
}

static enum MHD_Result int_param(parse_ctx *p, const char *name, const char *v, int64_t lo,
                                 int64_t hi, int64_t *dst)
{
    if (svc_parse_int(v, lo, hi, dst) != 0) {
        snprintf(p->detail, p->dlen, "%s: must be an integer in %lld..%lld", name, (long long)lo,
                 (long long)hi);
        p->failed = 1;
        return MHD_NO;
    }
    return MHD_YES;
}

/* Every parameter a route may take; a route allows some (SVC_P_* bits). */
static const struct {
    const char *name;
    unsigned bit;
} known[] = {
    {"sku", SVC_P_SKU},           {"user", SVC_P_USER},         {"work_ms", SVC_P_WORK_MS},
    {"lease_ms", SVC_P_LEASE_MS}, {"wait_ms", SVC_P_WAIT_MS},   {"reenter", SVC_P_REENTER},
    {"fault", SVC_P_FAULT},       {"stock", SVC_P_STOCK},       {"offset", SVC_P_OFFSET},
    {"limit", SVC_P_LIMIT},       {"pipeline", SVC_P_PIPELINE}, {"trace", SVC_P_TRACE},
    {"since", SVC_P_SINCE},       {"pretty", SVC_P_PRETTY},     {"step", SVC_P_STEP},
    {"buckets", SVC_P_BUCKETS},
};

static enum MHD_Result on_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                              const char *value)
{
    parse_ctx *p = cls;
    char name[48];
    unsigned bit = 0;
    (void)kind;
    printable(name, sizeof name, key);
    if (++p->count > SVC_MAX_ARGS)
        return bad(p, "too many parameters%s", "");
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (key != NULL && strcmp(key, known[i].name) == 0)
            bit = known[i].bit;
    if (bit == 0 || (p->allowed & bit) == 0)
        return bad(p, "unknown parameter '%s'", name);
    if (p->out->seen & bit)
        return bad(p, "duplicate parameter '%s'", name);
    p->out->seen |= bit;
    /* Paging parameters left empty ("?offset=&limit=", as a form sends
     * them) mean their defaults; every other parameter needs a value. */
    if ((bit == SVC_P_OFFSET || bit == SVC_P_LIMIT) && (value == NULL || value[0] == '\0'))
        return MHD_YES;
    if (value == NULL)
        return bad(p, "%s: missing value", name);
    switch (bit) {
    case SVC_P_SKU:
    case SVC_P_USER:
        if (!svc_valid_id(value))
            return bad(p, "%s: must match [A-Za-z0-9_-]{1,64}", name);
        strcpy(bit == SVC_P_SKU ? p->out->sku : p->out->user, value);
        return MHD_YES;
    case SVC_P_WORK_MS:
        return int_param(p, name, value, 0, p->s->purchase.max_work_ms, &p->out->work_ms);
    case SVC_P_LEASE_MS:
        return int_param(p, name, value, 1, p->s->lock.max_lease_ms, &p->out->lease_ms);
    case SVC_P_WAIT_MS:
        return int_param(p, name, value, 0, p->s->lock.max_wait_ms, &p->out->wait_ms);
    case SVC_P_REENTER: {
        int64_t v = 0;
        enum MHD_Result r = int_param(p, name, value, 0, p->s->purchase.max_reenter, &v);
        p->out->reenter = (int)v;
        return r;
    }
    case SVC_P_PIPELINE: {
        int64_t v = 0;
        enum MHD_Result r = int_param(p, name, value, 0, 1, &v);
        p->out->pipeline = (int)v;
        return r;
    }
    case SVC_P_TRACE: {
        int64_t v = 0;
        enum MHD_Result r = int_param(p, name, value, 0, 1, &v);
        p->out->trace = (int)v;
        return r;
    }
    case SVC_P_STEP: {
        int64_t v = 0;
        enum MHD_Result r = int_param(p, name, value, 0, 1, &v);
        p->out->step = (int)v;
        return r;
    }
    case SVC_P_PRETTY: {
        int64_t v = 0;
        enum MHD_Result r = int_param(p, name, value, 0, 1, &v);
        p->out->pretty = (int)v;
        return r;
    }
    case SVC_P_SINCE: return int_param(p, name, value, 0, SVC_SINCE_MAX, &p->out->since);
    case SVC_P_FAULT:
        if (strcmp(value, "crash_before_expire") == 0)
            p->out->fault = SVC_FAULT_CRASH_BEFORE_EXPIRE;
        else if (strcmp(value, "crash_in_section") == 0)
            p->out->fault = SVC_FAULT_CRASH_IN_SECTION;
        else
            return bad(p, "%s: must be crash_before_expire or crash_in_section", name);
        return MHD_YES;
    case SVC_P_STOCK: return int_param(p, name, value, 0, SVC_STOCK_MAX, &p->out->stock);
    case SVC_P_BUCKETS: return int_param(p, name, value, 1, SVC_BUCKETS_MAX, &p->out->buckets);
    case SVC_P_OFFSET: return int_param(p, name, value, 0, SVC_OFFSET_MAX, &p->out->offset);
    case SVC_P_LIMIT: return int_param(p, name, value, 1, SVC_LIMIT_MAX, &p->out->limit);
    default: return bad(p, "unknown parameter '%s'", name);
    }
}

int svc_params_parse(struct MHD_Connection *c, const cfg_config *s, unsigned allowed,
                     svc_params *out, char *detail, size_t dlen)
{
    parse_ctx p = {s, allowed, out, detail, dlen, 0, 0};
    memset(out, 0, sizeof *out);
    out->limit = SVC_LIMIT_DEFAULT;
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, on_arg, &p);
    return p.failed ? -1 : 0;
}

int svc_params_parse_pairs(const char *const *keys, const char *const *values, size_t n,
                           const cfg_config *s, unsigned allowed, svc_params *out, char *detail,
                           size_t dlen)
{
    parse_ctx p = {s, allowed, out, detail, dlen, 0, 0};
    memset(out, 0, sizeof *out);
    out->limit = SVC_LIMIT_DEFAULT;
    for (size_t i = 0; i < n; i++)
        if (on_arg(&p, MHD_GET_ARGUMENT_KIND, keys[i], values[i]) != MHD_YES)
            break;
    return p.failed ? -1 : 0;
}

static pthread_mutex_t json_mu = PTHREAD_MUTEX_INITIALIZER;

cJSON *svc_params_json(const char *txt, const char **end)
{
    SVC_PT(pthread_mutex_lock(&json_mu));
    cJSON *doc = cJSON_ParseWithOpts(txt, end, 1);
    SVC_PT(pthread_mutex_unlock(&json_mu));
    return doc;
}

/* The text the query would carry for a body member's value, or "\x01"
 * (which every parameter refuses, with its own message) when the JSON
 * type is not the parameter's: strings for sku, user and fault, integers
 * for the numbers, 0, 1, false or true for pipeline and trace. */
static const char *member_text(const cJSON *it, unsigned bit, char *buf, size_t len)
{
    static const char refused[] = "\x01";
    int text = bit == SVC_P_SKU || bit == SVC_P_USER || bit == SVC_P_FAULT;
    int flag = bit == SVC_P_PIPELINE || bit == SVC_P_TRACE || bit == SVC_P_STEP;
    if (text)
        return cJSON_IsString(it) ? it->valuestring : refused;
    if (flag && cJSON_IsBool(it))
        return cJSON_IsTrue(it) ? "1" : "0";
    if (!cJSON_IsNumber(it))
        return refused;
    double d = it->valuedouble;
    /* Integers print as the query would send them; anything else (1.5,
     * -3, 1e999, NaN) as text the parameter's check refuses. */
    if (d > -1e15 && d < 1e15 && (double)(long long)d == d)
        snprintf(buf, len, "%lld", (long long)d);
    else
        snprintf(buf, len, "%.17g", d);
    return buf;
}

int svc_params_parse_body(const char *body, size_t len, const cfg_config *s, unsigned allowed,
                          svc_params *out, char *detail, size_t dlen)
{
    if (len == 0)
        return 0;
    if (memchr(body, '\0', len) != NULL || memmem(body, len, "\\u0000", 6) != NULL) {
        snprintf(detail, dlen, "body: a NUL character is not allowed");
        return -1;
    }
    cJSON *doc = svc_params_json(body, NULL);
    if (doc == NULL || !cJSON_IsObject(doc)) {
        snprintf(detail, dlen,
                 "body: must be a JSON object of the query's parameters, e.g. "
                 "{\"sku\":\"demo\",\"user\":\"amy\"}");
        cJSON_Delete(doc);
        return -1;
    }
    unsigned in_query = out->seen;
    char why[160] = "";
    parse_ctx p = {s, allowed, out, why, sizeof why, 0, 0};
    for (const cJSON *it = doc->child; it != NULL && !p.failed; it = it->next) {
        char name[48], num[40];
        const char *key = it->string ? it->string : "";
        unsigned bit = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (strcmp(key, known[i].name) == 0)
                bit = known[i].bit;
        printable(name, sizeof name, key);
        if (bit != 0 && (allowed & bit) != 0 && (in_query & bit) != 0) {
            snprintf(detail, dlen,
                     "%s: given in both the query and the body; give it in one of them", name);
            cJSON_Delete(doc);
            return -1;
        }
        (void)on_arg(&p, MHD_GET_ARGUMENT_KIND, key, member_text(it, bit, num, sizeof num));
    }
    cJSON_Delete(doc);
    if (!p.failed)
        return 0;
    snprintf(detail, dlen, "body: %s", why);
    return -1;
}

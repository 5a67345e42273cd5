/* lg_admin.c — see lg_admin.h. */
#include "lg_admin.h"

#include <curl/curl.h>
#include <lockcore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lg_json.h"

int lg_idset_add(lg_idset *s, const char *id, size_t len)
{
    if (len >= 64)
        len = 63;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 1024;
        void *p = realloc(s->ids, nc * sizeof *s->ids);
        if (!p)
            return -1;
        s->ids = p;
        s->cap = nc;
    }
    memcpy(s->ids[s->n], id, len);
    s->ids[s->n][len] = 0;
    s->n++;
    return 0;
}

static int cmp_id(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

void lg_idset_sort(lg_idset *s)
{
    if (s->n > 1)
        qsort(s->ids, s->n, sizeof *s->ids, cmp_id);
}

size_t lg_idset_duplicates(const lg_idset *s)
{
    size_t d = 0;
    for (size_t i = 1; i < s->n; i++)
        if (strcmp(s->ids[i], s->ids[i - 1]) == 0)
            d++;
    return d;
}

int lg_idset_contains(const lg_idset *s, const char *id)
{
    char key[64];
    snprintf(key, sizeof key, "%s", id);
    return s->n && bsearch(key, s->ids, s->n, sizeof *s->ids, cmp_id) != NULL;
}

void lg_idset_free(lg_idset *s)
{
    free(s->ids);
    memset(s, 0, sizeof *s);
}

typedef struct buf {
    char *p;
    size_t n;
} buf;

static size_t on_write(char *data, size_t size, size_t nmemb, void *ud)
{
    buf *b = ud;
    size_t len = size * nmemb;
    if (b->n + len > (64u << 20))
        return 0; /* more than 64 MiB: refuse */
    char *np = realloc(b->p, b->n + len + 1);
    if (!np)
        return 0;
    memcpy(np + b->n, data, len);
    b->p = np;
    b->n += len;
    b->p[b->n] = 0;
    return len;
}

int lg_http_call(const char *method, const char *url, const char *bearer, const char *body,
                 long timeout_ms, long *status, char **resp, char *err, size_t errlen)
{
    return lg_http_call_hdr(method, url, bearer, NULL, body, timeout_ms, status, resp, err, errlen);
}

/* The flag lg_admin_cancel_on named (NULL: none). */
static volatile sig_atomic_t *g_cancel;

void lg_admin_cancel_on(volatile sig_atomic_t *flag)
{
    g_cancel = flag;
}

/* libcurl calls this while it waits (about once a second when nothing
 * moves): non-zero abandons the transfer. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    const volatile sig_atomic_t *flag = ud;
    return *flag != 0;
}

/* lg_http_call_hdr, abandoned once *cancel turns non-zero (NULL: never). */
static int http_call(const char *method, const char *url, const char *bearer, const char *header,
                     const char *body, long timeout_ms, const volatile sig_atomic_t *cancel,
                     long *status, char **resp, char *err, size_t errlen)
{
    *status = 0;
    if (resp)
        *resp = NULL;
    if (cancel != NULL && *cancel) {
        snprintf(err, errlen, "%s %s: interrupted", method, url);
        return -1;
    }
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(err, errlen, "curl_easy_init failed");
        return -1;
    }
    buf b = {NULL, 0};
    struct curl_slist *hdrs = NULL;
    char auth[300];
    if (bearer && *bearer) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", bearer);
        hdrs = curl_slist_append(hdrs, auth);
    }
    if (body)
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    if (header)
        hdrs = curl_slist_append(hdrs, header);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    } else if (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    }
    if (hdrs)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 10000L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (cancel != NULL) {
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)cancel);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    }
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    else if (rc == CURLE_ABORTED_BY_CALLBACK)
        snprintf(err, errlen, "%s %s: interrupted", method, url);
    else
        snprintf(err, errlen, "%s %s: %s", method, url, curl_easy_strerror(rc));
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    *status = code;
    if (rc != CURLE_OK) {
        free(b.p);
        if (resp)
            *resp = NULL;
        return -1;
    }
    if (!b.p) {
        b.p = malloc(1);
        if (b.p)
            b.p[0] = 0;
    }
    if (resp)
        *resp = b.p;
    else
        free(b.p);
    return 0;
}

int lg_http_call_hdr(const char *method, const char *url, const char *bearer, const char *header,
                     const char *body, long timeout_ms, long *status, char **resp, char *err,
                     size_t errlen)
{
    return http_call(method, url, bearer, header, body, timeout_ms, NULL, status, resp, err,
                     errlen);
}

int lg_admin_reset(const char *base, const char *sku, int64_t stock, const char *token, char *err,
                   size_t errlen)
{
    return lg_admin_reset_buckets(base, sku, stock, 0, token, err, errlen);
}

int lg_admin_reset_buckets(const char *base, const char *sku, int64_t stock, int buckets,
                           const char *token, char *err, size_t errlen)
{
    char url[600], body[64];
    snprintf(url, sizeof url, "%s/stock/%s", base, sku);
    if (buckets > 0)
        snprintf(body, sizeof body, "{\"stock\":%lld,\"buckets\":%d}", (long long)stock, buckets);
    else
        snprintf(body, sizeof body, "{\"stock\":%lld}", (long long)stock);
    long st = 0;
    char *resp = NULL;
    if (http_call("PUT", url, token, NULL, body, 10000, g_cancel, &st, &resp, err, errlen) < 0)
        return -1;
    int ok = st >= 200 && st < 300;
    if (!ok)
        snprintf(err, errlen, "PUT %s answered %ld: %.200s%s", url, st, resp ? resp : "",
                 st == 401 || st == 403 ? " (pass --admin-token)" : "");
    free(resp);
    return ok ? 0 : -1;
}

/* A read-only GET, retried on a transport failure or a 5xx: the audit comes
 * right after a burst, which may have ended inside a fault (a Redis stall,
 * an instance restarting behind nginx); a GET changes nothing, so asking
 * again is safe where a PUT's retry would not be. 5 attempts, 100/200/400/800
 * ms apart, all within timeout_ms of the first: each attempt gets what is
 * left of it (a server that accepts and stays silent costs one timeout, not
 * five, and a late failure leaves the next attempt little). Same contract
 * as lg_http_call, the last attempt's outcome. */
static int get_retry(const char *url, long timeout_ms, long *st, char **resp, char *err,
                     size_t errlen)
{
    int64_t end = lc_now_ms() + timeout_ms;
    for (int attempt = 0;; attempt++) {
        *st = 0;
        *resp = NULL;
        int64_t left_ms = end - lc_now_ms();
        int rc = lg_http_call("GET", url, NULL, NULL, left_ms > 1 ? (long)left_ms : 1, st, resp,
                              err, errlen);
        if ((rc == 0 && *st < 500) || attempt == 4 || lc_now_ms() >= end)
            return rc;
        free(*resp);
        *resp = NULL;
        struct timespec ts = {0, (100L << attempt) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int get_i64(const cJSON *o, const char *k, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    /* A count the service can hold (stock is at most 1e9): anything else is
     * not an audit, and the sums below could overflow on it. */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= -1e15 && v->valuedouble <= 1e15))
        return -1;
    *out = (int64_t)v->valuedouble;
    return 0;
}

int lg_admin_audit(const char *base, const char *sku, lg_audit *a, char *err, size_t errlen)
{
    char url[600];
    snprintf(url, sizeof url, "%s/stock/%s", base, sku);
    long st = 0;
    char *resp = NULL;
    memset(a, 0, sizeof *a);
    if (get_retry(url, 10000, &st, &resp, err, errlen) < 0)
        return -1;
    int rc = -1;
    cJSON *j = NULL;
    if (st != 200) {
        snprintf(err, errlen, "GET %s answered %ld: %.200s", url, st, resp);
        goto out;
    }
    j = lg_json_parse(resp, resp ? strlen(resp) : 0);
    if (!cJSON_IsObject(j) || get_i64(j, "stock", &a->stock) ||
        get_i64(j, "initial", &a->initial) || get_i64(j, "sold", &a->sold)) {
        snprintf(err, errlen, "GET %s: not an audit: %.200s", url, resp);
        goto out;
    }
    if (get_i64(j, "orders", &a->orders))
        a->orders = -1;
    /* recompute rather than trust the server's figures: oversold = sales
     * beyond what left the stock, undersold = stock taken but not sold */
    int64_t taken = a->initial - a->stock;
    a->oversold = a->sold - taken > 0 ? a->sold - taken : 0;
    a->undersold = taken - a->sold > 0 ? taken - a->sold : 0;
    int64_t srv;
    if (get_i64(j, "oversold", &srv) == 0 && srv > a->oversold)
        a->oversold = srv;
    if (get_i64(j, "undersold", &srv) == 0 && srv > a->undersold)
        a->undersold = srv;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "buckets"), *e;
    if (!cJSON_IsArray(arr))
        arr = NULL; /* one stock */
    cJSON_ArrayForEach(e, arr)
    {
        if (a->nbuckets == LG_BUCKETS_MAX ||
            get_i64(e, "initial", &a->bucket[a->nbuckets].initial) ||
            get_i64(e, "stock", &a->bucket[a->nbuckets].stock)) {
            snprintf(err, errlen, "GET %s: a bucket of the audit is not {initial, stock}", url);
            goto out;
        }
        a->nbuckets++;
    }
    rc = 0;
out:
    cJSON_Delete(j);
    free(resp);
    return rc;
}

/* Adds the order id of one record (object, or a JSON string holding one). */
static int add_record(lg_idset *ids, const cJSON *rec)
{
    cJSON *parsed = NULL;
    if (cJSON_IsString(rec)) {
        parsed = lg_json_parse(rec->valuestring, strlen(rec->valuestring));
        rec = parsed;
    }
    int rc = -1;
    if (cJSON_IsObject(rec)) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(rec, "order_id");
        if (!cJSON_IsString(id))
            id = cJSON_GetObjectItemCaseSensitive(rec, "id");
        if (cJSON_IsString(id))
            rc = lg_idset_add(ids, id->valuestring, strlen(id->valuestring));
    }
    cJSON_Delete(parsed);
    return rc;
}

int lg_admin_orders(const char *base, const char *sku, long total_ms, lg_idset *ids, char *err,
                    size_t errlen)
{
    const int limit = 1000;
    int64_t end = lc_now_ms() + total_ms;
    for (long offset = 0; offset < 100000000L;) {
        long left_ms = (long)(end - lc_now_ms());
        if (left_ms <= 0) {
            snprintf(err, errlen, "orders: listing not done after %ld ms (%ld read)", total_ms,
                     offset);
            return -1;
        }
        char url[700];
        snprintf(url, sizeof url, "%s/orders/%s?offset=%ld&limit=%d", base, sku, offset, limit);
        long st = 0;
        char *resp = NULL;
        if (get_retry(url, left_ms < 20000 ? left_ms : 20000, &st, &resp, err, errlen) < 0)
            return -1;
        if (st != 200) {
            snprintf(err, errlen, "GET %s answered %ld: %.200s", url, st, resp);
            free(resp);
            return -1;
        }
        cJSON *j = lg_json_parse(resp, resp ? strlen(resp) : 0);
        const cJSON *arr = j;
        if (cJSON_IsObject(j)) {
            arr = cJSON_GetObjectItemCaseSensitive(j, "orders");
            if (!cJSON_IsArray(arr))
                arr = cJSON_GetObjectItemCaseSensitive(j, "items");
        }
        if (!cJSON_IsArray(arr)) {
            snprintf(err, errlen, "GET %s: no order list in %.200s", url, resp);
            cJSON_Delete(j);
            free(resp);
            return -1;
        }
        int n = 0, bad = 0;
        const cJSON *rec;
        cJSON_ArrayForEach(rec, arr)
        {
            n++;
            if (add_record(ids, rec) < 0)
                bad++;
        }
        cJSON_Delete(j);
        free(resp);
        if (bad) {
            snprintf(err, errlen, "GET %s: %d records without an order_id", url, bad);
            return -1;
        }
        if (n < limit)
            return 0;
        offset += n;
    }
    snprintf(err, errlen, "orders: too many");
    return -1;
}

int lg_purchase_local(const char *body, size_t len)
{
    cJSON *j = lg_json_parse(body, len);
    int local = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "local"));
    cJSON_Delete(j);
    return local;
}

int lg_parse_purchase(const char *body, size_t len, char order_id[64], char error[32],
                      int *lock_lost, int *deleted_other_lock)
{
    order_id[0] = 0;
    error[0] = 0;
    *lock_lost = 0;
    *deleted_other_lock = 0;
    cJSON *j = lg_json_parse(body, len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return -1;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "order_id");
    if (cJSON_IsString(v))
        snprintf(order_id, 64, "%s", v->valuestring);
    v = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsString(v))
        snprintf(error, 32, "%s", v->valuestring);
    *lock_lost = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "lock_lost"));
    *deleted_other_lock = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "deleted_other_lock"));
    cJSON_Delete(j);
    return 0;
}

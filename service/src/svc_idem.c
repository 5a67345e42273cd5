/* svc_idem.c — the Idempotency-Key marker and stored outcome (svc_idem.h). */
#include "svc_idem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uuid/uuid.h>

#include "svc_clock.h"
#include "svc_keys.h"
#include "svc_replicas.h"

int svc_idem_valid(const char *v)
{
    size_t n = 0;
    if (v == NULL)
        return 0;
    for (; v[n] != '\0'; n++) {
        char c = v[n];
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || c == ':' || c == '.';
        if (!ok || n >= SVC_IDEM_KEY_MAX)
            return 0;
    }
    return n > 0;
}

/* "<fingerprint>|" must come right after the value's "P|" or "D|". */
static int same_fp(const svc_idem *id, const char *value, size_t vlen)
{
    size_t n = strlen(id->fp);
    return vlen > n + 2 && memcmp(value + 2, id->fp, n) == 0 && value[2 + n] == '|';
}

int svc_idem_found(const svc_idem *id, svc_req *r, const char *value, size_t vlen,
                   purchase_result *res, char *detail, size_t len)
{
    if (vlen < 2 || (memcmp(value, "P|", 2) != 0 && memcmp(value, "D|", 2) != 0)) {
        snprintf(detail, len, "Idempotency-Key: the key's record in Redis is not one of ours");
        *res = PR_KEY_REUSED;
        return -1;
    }
    if (!same_fp(id, value, vlen)) {
        snprintf(detail, len,
                 "Idempotency-Key: already used for another purchase (another mode or user) "
                 "of this sku");
        *res = PR_KEY_REUSED;
        return -1;
    }
    if (value[0] == 'P') {
        snprintf(detail, len,
                 "Idempotency-Key: the first request with this key is still running; retry "
                 "later for its outcome");
        *res = PR_IN_PROGRESS;
        return -1;
    }
    /* "D|<fp>|<status>|<body>" */
    const char *p = value + 2 + strlen(id->fp) + 1, *end = value + vlen;
    unsigned status = 0;
    while (p < end && *p >= '0' && *p <= '9' && status < 1000)
        status = status * 10 + (unsigned)(*p++ - '0');
    if (p >= end || *p != '|' || status < 200 || status > 599) {
        snprintf(detail, len, "Idempotency-Key: the key's stored outcome is unreadable");
        *res = PR_KEY_REUSED;
        return -1;
    }
    p++;
    size_t blen = (size_t)(end - p);
    char *body = malloc(blen + 1);
    if (body != NULL) {
        memcpy(body, p, blen);
        body[blen] = '\0';
    }
    svc_reply_text(r, status, body, blen, NULL); /* NULL: 503 out_of_memory */
    r->replayed = body != NULL;
    return 1;
}

/* SET key value NX PX px_ms GET, one round trip: the reply (nil when value
 * was set, else the value found), or NULL with *res and detail set — Redis
 * unavailable or an error reply; nothing was bought. */
static redisReply *set_nx_get(lc_conn *conn, const char *key, const char *value, int64_t px_ms,
                              purchase_result *res, char *detail, size_t len)
{
    lc_pipe p;
    lc_pipe_init(&p);
    lc_status st = lc_pipe_append(&p, "SET %s %s NX PX %lld GET", key, value,
                                  (long long)(px_ms > 0 ? px_ms : 1));
    if (st == LC_OK)
        (void)lc_conn_pipe(conn, &p); /* a missing reply is seen below */
    redisReply *rep = st == LC_OK ? lc_pipe_take(&p, 0) : NULL;
    lc_pipe_clear(&p);
    if (rep == NULL) {
        snprintf(detail, len, "Idempotency-Key: %.200s; nothing was bought",
                 st != LC_OK               ? "out of memory"
                 : lc_conn_errstr(conn)[0] ? lc_conn_errstr(conn)
                                           : "no reply");
        *res = PR_REDIS_UNAVAILABLE;
        return NULL;
    }
    if (rep->type != REDIS_REPLY_NIL && rep->type != REDIS_REPLY_STRING) {
        snprintf(detail, len, "Idempotency-Key: %.200s; nothing was bought",
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
        *res = PR_REDIS_ERROR;
        freeReplyObject(rep);
        return NULL;
    }
    return rep;
}

void svc_idem_key(char *buf, const char *tag, const char *key)
{
    snprintf(buf, SVC_IDEM_RKEY_MAX, "miaosha:{%s}:idem:%s", tag, key);
}

/* The key-wide claim (svc_idem.h): 0 when the key is new, 1 when it was
 * claimed before for the same SKU, mode and user; -1 with *res and detail
 * set otherwise.
 * It lives marker_ms longer than the outcome's TTL: the outcome is stored
 * up to marker_ms after the claim, and must never outlive it (the key
 * would then be free on another SKU while its outcome still answers). */
static int claim(const svc_idem *id, svc_req *r, lc_conn *conn, int64_t marker_ms,
                 purchase_result *res, char *detail, size_t len)
{
    char key[SVC_IDEM_KEY_MAX + 16], what[SVC_SKU_MAX + SVC_IDEM_FP_MAX + 2];
    snprintf(key, sizeof key, "miaosha:idem:%s", r->idem);
    snprintf(what, sizeof what, "%s|%s", r->sku, id->fp);
    redisReply *rep = set_nx_get(conn, key, what, svc_idem_ttl_ms(r->s) + marker_ms, res, detail,
                                 len);
    if (rep == NULL)
        return -1;
    int rc = 0;
    if (rep->type == REDIS_REPLY_STRING && strcmp(rep->str, what) != 0) {
        const char *bar = strchr(rep->str, '|');
        snprintf(detail, len,
                 "Idempotency-Key: already used for another purchase (sku %.*s, mode/user %s); "
                 "send a new key for a new purchase",
                 bar ? (int)(bar - rep->str) : 0, rep->str, bar ? bar + 1 : "?");
        *res = PR_KEY_REUSED;
        rc = -1;
    } else if (rep->type == REDIS_REPLY_STRING) {
        rc = 1;
    }
    freeReplyObject(rep);
    return rc;
}

/* A SKU in buckets, a key claimed before and its marker ours: an earlier
 * request with the key may have sold in a bucket and ended before it
 * stored the outcome under the SKU's key (a crash). Every bucket's copy in
 * one pipelined round trip (LC_PIPE_MAX buckets a trip; on a Redis Cluster
 * a trip per bucket, each a slot of its own): 1 when one holds an outcome —
 * stored under the SKU's key in place of this marker (a failure there is
 * left to the marker's expiry: the bucket still holds it) and answered in
 * r; 0 when none does; -1 with *res and detail set. */
static int look_in_buckets(const svc_idem *id, svc_req *r, lc_conn *conn, const svc_layout *lay,
                           purchase_result *res, char *detail, size_t len)
{
    int per = r->s->redis.cluster_nodes[0] != '\0' ? 1 : LC_PIPE_MAX;
    redisReply *found = NULL;
    int rc = 0;
    lc_pipe p;
    for (int b0 = 0; b0 < lay->n && rc == 0 && found == NULL; b0 += per) {
        int m = lay->n - b0 < per ? lay->n - b0 : per;
        lc_pipe_init(&p);
        lc_status st = LC_OK;
        for (int b = b0; b < b0 + m && st == LC_OK; b++) {
            char tag[SVC_TAG_MAX], key[SVC_IDEM_RKEY_MAX];
            svc_layout_tag(lay, r->sku, b, tag);
            svc_idem_key(key, tag, r->idem);
            st = lc_pipe_append(&p, "GET %s", key);
        }
        if (st == LC_OK)
            (void)lc_conn_pipe(conn, &p); /* a missing reply is seen below */
        for (int i = 0; i < m && rc == 0 && found == NULL; i++) {
            redisReply *rep = st == LC_OK ? lc_pipe_take(&p, i) : NULL;
            if (rep == NULL) {
                snprintf(detail, len, "Idempotency-Key: %.200s; nothing was bought",
                         st != LC_OK               ? "out of memory"
                         : lc_conn_errstr(conn)[0] ? lc_conn_errstr(conn)
                                                   : "no reply");
                *res = PR_REDIS_UNAVAILABLE;
                rc = -1;
            } else if (rep->type == REDIS_REPLY_STRING && rep->len > 2 &&
                       memcmp(rep->str, "D|", 2) == 0) {
                found = rep;
                rep = NULL;
            }
            freeReplyObject(rep);
        }
        lc_pipe_clear(&p);
    }
    if (found == NULL)
        return rc;
    lc_pipe_init(&p);
    if (lc_pipe_append(&p, "SET %s %b PX %lld XX", id->rkey, found->str, found->len,
                       (long long)svc_idem_ttl_ms(r->s)) == LC_OK) {
        (void)lc_conn_pipe(conn, &p);
        freeReplyObject(lc_pipe_take(&p, 0));
    }
    lc_pipe_clear(&p);
    rc = svc_idem_found(id, r, found->str, found->len, res, detail, len);
    freeReplyObject(found);
    return rc;
}

int svc_idem_begin(svc_idem *id, svc_req *r, lc_conn *conn, int64_t marker_ms,
                   const svc_layout *lay, purchase_result *res, char *detail, size_t len)
{
    uuid_t u;
    char token[SVC_UUID_LEN];
    memset(id, 0, sizeof *id);
    svc_idem_key(id->rkey, r->sku, r->idem);
    snprintf(id->fp, sizeof id->fp, "%s/%s", svc_mode_name(r->mode),
             (r->p.seen & SVC_P_USER) ? r->p.user : "");
    uuid_generate_random(u);
    uuid_unparse_lower(u, token);
    snprintf(id->marker, sizeof id->marker, "P|%s|%s", id->fp, token);
    int seen = claim(id, r, conn, marker_ms, res, detail, len);
    if (seen < 0)
        return -1;
    redisReply *rep = set_nx_get(conn, id->rkey, id->marker, marker_ms, res, detail, len);
    if (rep == NULL)
        return -1;
    int rc = 0;
    if (rep->type == REDIS_REPLY_NIL)
        id->on = 1; /* set: ours */
    else
        rc = svc_idem_found(id, r, rep->str, rep->len, res, detail, len);
    freeReplyObject(rep);
    if (rc == 0 && seen == 1 && lay != NULL && lay->n > 1) {
        rc = look_in_buckets(id, r, conn, lay, res, detail, len);
        if (rc == 1)
            id->on = 0; /* the key holds the outcome now: not ours to end */
    }
    return rc;
}

int svc_idem_replay_replicated(const svc_idem *id, svc_req *r, lc_conn *conn)
{
    const cfg_config *s = r->s;
    if (!r->replayed || r->status != 200 || s->redis.wait_replicas <= 0 || r->resp == NULL)
        return 0;
    char prefix[SVC_IDEM_FP_MAX + 16], detail[256];
    svc_idem_done_prefix(id, 200, prefix, sizeof prefix);
    size_t plen = strlen(prefix);
    char *v = malloc(plen + r->resp_len);
    lc_pipe p;
    lc_pipe_init(&p);
    int ok = v != NULL;
    if (ok) {
        memcpy(v, prefix, plen);
        memcpy(v + plen, r->resp, r->resp_len);
        ok = lc_pipe_append(&p, "SET %s %b XX KEEPTTL", id->rkey, v, plen + r->resp_len) == LC_OK;
    }
    free(v);
    if (ok)
        (void)lc_conn_pipe(conn, &p);
    uint64_t via = lc_conn_via(conn);
    redisReply *rep = ok ? lc_pipe_take(&p, 0) : NULL;
    lc_pipe_clear(&p);
    ok = rep != NULL && rep->type != REDIS_REPLY_ERROR;
    freeReplyObject(rep);
    if (!ok)
        snprintf(detail, sizeof detail, "the stored sale could not be written again: %.200s",
                 lc_conn_errstr(conn)[0] ? lc_conn_errstr(conn) : "no reply");
    if (ok && svc_wait_replicas(s, conn, via, detail, sizeof detail) == 0)
        return 0;
    /* The order id of the stored reply: a UUID, so it needs no JSON parse. */
    char oid[SVC_UUID_LEN] = "";
    const char *o = memmem(r->resp, r->resp_len, "\"order_id\":\"", 12);
    if (o != NULL) {
        o += 12;
        size_t n = 0;
        while (n + 1 < sizeof oid && o + n < r->resp + r->resp_len && o[n] != '"')
            n++;
        memcpy(oid, o, n);
        oid[n] = '\0';
    }
    /* The shape of every purchase's reply (svc_order.h), as the sale's
     * own reply had it; the instance is the one answering now. */
    cJSON *extra = cJSON_CreateObject();
    if (extra != NULL) {
        cJSON_AddStringToObject(extra, "mode", svc_mode_name(r->mode));
        cJSON_AddBoolToObject(extra, "pipeline",
                              memmem(r->resp, r->resp_len, "\"pipeline\":true", 15) != NULL);
        cJSON_AddStringToObject(extra, "sku", r->sku);
        if (oid[0])
            cJSON_AddStringToObject(extra, "order_id", oid);
        cJSON_AddStringToObject(extra, "instance", s->instance_id);
    }
    char why[400];
    snprintf(why, sizeof why, "Idempotency-Key replay of a sale: %.300s", detail);
    svc_reply_error(r, 503, "not_replicated", why, extra);
    r->replayed = 0;
    return -1;
}

void svc_idem_done_prefix(const svc_idem *id, unsigned status, char *buf, size_t len)
{
    snprintf(buf, len, "D|%s|%u|", id->fp, status);
}

int svc_idem_stored_outcome(purchase_result res)
{
    return res == PR_SOLD || res == PR_SOLD_OUT || res == PR_LIMIT_REACHED;
}

/* Deletes the key when it still holds this request's marker. */
static const char del_if_ours[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
    "return 0";

void svc_idem_end(svc_idem *id, const svc_req *r, lc_conn *conn, int store, unsigned status,
                  const char *body, size_t blen)
{
    if (!id->on)
        return;
    id->on = 0;
    lc_pipe p;
    lc_pipe_init(&p);
    lc_status st;
    if (store && body != NULL) {
        char prefix[SVC_IDEM_FP_MAX + 16];
        svc_idem_done_prefix(id, status, prefix, sizeof prefix);
        size_t plen = strlen(prefix);
        char *v = malloc(plen + blen);
        if (v == NULL) {
            st = LC_NOMEM;
        } else {
            memcpy(v, prefix, plen);
            memcpy(v + plen, body, blen);
            st = lc_pipe_append(&p, "SET %s %b PX %lld XX", id->rkey, v, plen + blen,
                                (long long)svc_idem_ttl_ms(r->s));
            free(v);
        }
    } else {
        st = lc_pipe_append(&p, "EVAL %s 1 %s %s", del_if_ours, id->rkey, id->marker);
    }
    if (st == LC_OK)
        st = lc_conn_pipe(conn, &p);
    redisReply *rep = st == LC_OK ? lc_pipe_take(&p, 0) : NULL;
    if (rep == NULL || rep->type == REDIS_REPLY_ERROR)
        svc_log(SVC_WARN,
                "sku %s Idempotency-Key %s: could not %s its record (%s); it expires "
                "by itself",
                r->sku, r->idem,
                store ? "store the outcome in" : "remove the in-progress marker from",
                rep ? rep->str : lc_conn_errstr(conn));
    freeReplyObject(rep);
    lc_pipe_clear(&p);
}

void svc_idem_replayed(const svc_idem *id, svc_req *r, lc_conn *conn, svc_trace *tr, int slot)
{
    int kept = svc_idem_replay_replicated(id, r, conn) == 0;
    if (!kept)
        svc_stats_redis_error();
    svc_trace_end(tr, NULL, r->status, kept ? "replayed" : "not_replicated", 0, 0);
    svc_stats_purchase(r->mode, slot, kept ? SVC_OUT_REPLAYED : SVC_OUT_ERROR, 0, 0,
                       lc_now_us() - r->t0_us, -1);
}

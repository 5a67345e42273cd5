/* lg_timeline.c — see lg_timeline.h. The renderer is web/timeline.js,
 * compiled in as LG_TIMELINE_JS (miaosha_embed_text). Every trace line is
 * parsed and printed again by cJSON, so what lands in the page is JSON and
 * nothing else, then < > & are written as \u escapes. */
#include "lg_timeline.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "lg_json.h"
#include "lg_timeline_js.h"

#define SINCE_MAX "999999999999" /* the service's bound: the header alone */

void lg_html_text(FILE *f, const char *text)
{
    for (const char *p = text; p && *p; p++) {
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*p, f);
        }
    }
}

static int u64_of(const cJSON *o, const char *k, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0)
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

void lg_trace_mark_get(const char *base, const char *sku, lg_trace_mark *m)
{
    memset(m, 0, sizeof *m);
    char url[600], err[256];
    snprintf(url, sizeof url, "%s/trace/%s?since=" SINCE_MAX, base, sku);
    long st = 0;
    char *resp = NULL;
    if (lg_http_call("GET", url, NULL, NULL, 5000, &st, &resp, err, sizeof err) < 0) {
        free(resp);
        return;
    }
    if (st == 404) {
        m->known = 1; /* never traced: everything later is the burst's */
    } else if (st == 200 && resp) {
        cJSON *j = lg_json_parse(resp, strlen(resp));
        const cJSON *inst = cJSON_GetObjectItemCaseSensitive(j, "instance");
        if (cJSON_IsObject(j) && u64_of(j, "last_seq", &m->last_seq) == 0) {
            m->known = 1;
            if (cJSON_IsString(inst))
                snprintf(m->instance, sizeof m->instance, "%s", inst->valuestring);
        }
        cJSON_Delete(j);
    }
    free(resp);
}

void lg_trace_set_init(lg_trace_set *s)
{
    memset(s, 0, sizeof *s);
}

void lg_trace_set_free(lg_trace_set *s)
{
    free(s->json);
    memset(s, 0, sizeof *s);
}

static int grow(lg_trace_set *s, size_t more)
{
    if (s->len + more + 1 <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < s->len + more + 1)
        cap *= 2;
    char *p = realloc(s->json, cap);
    if (!p)
        return -1;
    s->json = p;
    s->cap = cap;
    return 0;
}

/* Appends one JSON object, printed by cJSON, with < > & escaped. */
static int append_obj(lg_trace_set *s, const cJSON *o)
{
    char *txt = cJSON_PrintUnformatted(o);
    if (!txt)
        return -1;
    size_t n = strlen(txt);
    int rc = grow(s, n * 6 + 1);
    if (rc == 0) {
        if (s->len)
            s->json[s->len++] = ',';
        for (size_t i = 0; i < n; i++) {
            const char *esc = txt[i] == '<'   ? "\\u003c"
                              : txt[i] == '>' ? "\\u003e"
                              : txt[i] == '&' ? "\\u0026"
                                              : NULL;
            if (esc) {
                memcpy(s->json + s->len, esc, 6);
                s->len += 6;
            } else {
                s->json[s->len++] = txt[i];
            }
        }
        s->json[s->len] = '\0';
    }
    free(txt);
    return rc;
}

/* One line: a header (counted; flagged "truncated" when its ring no longer
 * holds every record after since) or a record. */
static int add_line(lg_trace_set *s, const char *line, size_t n, uint64_t since, char *err,
                    size_t errlen, int lineno)
{
    cJSON *j = lg_json_parse(line, n);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        snprintf(err, errlen, "trace line %d is not a JSON object", lineno);
        return -1;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "header"))) {
        uint64_t oldest = 0, last = 0;
        if (u64_of(j, "oldest_seq", &oldest) == 0 && u64_of(j, "last_seq", &last) == 0 &&
            last > since && oldest > since + 1) {
            s->truncated = 1;
            cJSON_AddTrueToObject(j, "truncated");
        }
        s->instances++;
    } else {
        s->records++;
    }
    int rc = append_obj(s, j);
    cJSON_Delete(j);
    if (rc < 0)
        snprintf(err, errlen, "out of memory");
    return rc;
}

static int add_lines(lg_trace_set *s, const char *text, size_t len, uint64_t since, char *err,
                     size_t errlen)
{
    int lineno = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        lineno++;
        size_t b = i, e = end;
        while (b < e && (text[b] == ' ' || text[b] == '\r' || text[b] == '\t'))
            b++;
        while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\r' || text[e - 1] == '\t'))
            e--;
        if (e > b && add_line(s, text + b, e - b, since, err, errlen, lineno) < 0)
            return -1;
        i = end + 1;
    }
    return 0;
}

int lg_trace_add_text(lg_trace_set *s, const char *text, size_t len, char *err, size_t errlen)
{
    return add_lines(s, text, len, 0, err, errlen);
}

/* The instance id of a /trace reply's header line, into id ("" when none). */
static void header_instance(const char *resp, char *id, size_t len)
{
    id[0] = '\0';
    const char *nl = strchr(resp, '\n');
    cJSON *j = lg_json_parse(resp, nl ? (size_t)(nl - resp) : strlen(resp));
    const cJSON *inst = cJSON_GetObjectItemCaseSensitive(j, "instance");
    if (cJSON_IsString(inst))
        snprintf(id, len, "%s", inst->valuestring);
    cJSON_Delete(j);
}

static int get_trace(const char *base, const char *sku, uint64_t since, long *st, char **resp,
                     char *err, size_t errlen)
{
    char url[600];
    snprintf(url, sizeof url, "%s/trace/%s?since=%" PRIu64, base, sku, since);
    *resp = NULL;
    return lg_http_call("GET", url, NULL, NULL, 10000, st, resp, err, errlen);
}

int lg_trace_fetch(lg_trace_set *s, const char *base, const char *sku, const lg_trace_mark *mark,
                   char *err, size_t errlen)
{
    uint64_t since = mark && mark->known ? mark->last_seq : 0;
    long st = 0;
    char *resp = NULL, id[128];
    if (get_trace(base, sku, since, &st, &resp, err, errlen) < 0)
        return -1;
    if (st == 200 && resp) {
        header_instance(resp, id, sizeof id);
        if (since > 0 && mark->instance[0] && strcmp(id, mark->instance) != 0) {
            /* another process answers now (a restart): its ring is new */
            free(resp);
            since = 0;
            if (get_trace(base, sku, since, &st, &resp, err, errlen) < 0)
                return -1;
            if (resp)
                header_instance(resp, id, sizeof id);
        }
    }
    int rc = 0;
    if (st == 404) {
        rc = 0; /* nothing of this SKU was traced there */
        cJSON *j = resp ? lg_json_parse(resp, strlen(resp)) : NULL;
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "detail");
        if (s->untraced[0] == '\0' && cJSON_IsString(d) &&
            strstr(d->valuestring, "trace.max_skus") != NULL)
            snprintf(s->untraced, sizeof s->untraced, "%s: %.250s", base, d->valuestring);
        cJSON_Delete(j);
    } else if (st != 200 || !resp) {
        snprintf(err, errlen, "GET %s/trace/%s answered %ld", base, sku, st);
        rc = -1;
    } else {
        int dup = 0;
        int known = s->instances < 16 ? s->instances : 16;
        for (int i = 0; i < known && id[0]; i++)
            dup |= strcmp(s->instance_ids[i], id) == 0;
        if (!dup) {
            if (s->instances < 16)
                snprintf(s->instance_ids[s->instances], sizeof s->instance_ids[0], "%s", id);
            rc = add_lines(s, resp, strlen(resp), since, err, errlen);
        }
    }
    free(resp);
    return rc;
}

typedef struct page_words {
    const char *html_lang, *title, *audit, *initial, *sold, *left, *oversold, *undersold, *no_audit,
        *trace, *records, *instances, *truncated, *noscript, *sent, *not_drawn, *local, *other;
} page_words;

static const page_words words_en = {
    "en",
    "Purchase timeline",
    "Audit (GET /stock)",
    "initial stock",
    "sold",
    "stock left",
    "oversold",
    "undersold",
    "no audit was read",
    "Trace (GET /trace)",
    "purchase records",
    "instance(s)",
    "some of the burst's records were already overwritten in a ring (trace.ring_size): the "
    "timeline is incomplete",
    "The timeline needs JavaScript.",
    "the burst sent",
    "not in the trace, so not drawn",
    "answered by an instance's local sold-out flag (409 sold_out on the HTTP thread, before any "
    "worker: never traced)",
    "not traced for another reason: answered before a worker ran them (the local sold-out flag, "
    "an overload 503, a refused parameter), never sent, overwritten in the ring "
    "(trace.ring_size), or of a SKU the instance had no ring left for (trace.max_skus)"};

static const page_words words_zh = {"zh-CN",
                                    "购买时间线",
                                    "对账（GET /stock）",
                                    "初始库存",
                                    "售出",
                                    "剩余库存",
                                    "超卖",
                                    "少卖",
                                    "未能读取审计",
                                    "追踪（GET /trace）",
                                    "条购买记录",
                                    "个实例",
                                    "本次请求的部分记录已在环形缓冲区中被覆盖（trace.ring_size）："
                                    "时间线不完整",
                                    "时间线需要 JavaScript。",
                                    "本轮压测发出",
                                    "不在追踪中，所以没有画出",
                                    "由实例本地的售罄标记直接回答（HTTP 线程上的 409 sold_out，"
                                    "没有经过任何工作线程：从不追踪）",
                                    "因其他原因没有追踪：在工作线程处理之前就被回答（本地售罄标记、"
                                    "过载 503、参数被拒），没有发出，已在环形缓冲区中被覆盖"
                                    "（trace.ring_size），或实例已没有空闲的追踪环留给这个 SKU"
                                    "（trace.max_skus）"};

int lg_timeline_write(const char *path, const lg_timeline_page *page, const lg_trace_set *s,
                      char *err, size_t errlen)
{
    int zh = page->lang && strcmp(page->lang, "zh") == 0;
    const page_words *w = zh ? &words_zh : &words_en;
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"%s\">\n<head>\n<meta charset=\"utf-8\">\n<title>",
            w->html_lang);
    fputs(w->title, f);
    if (page->sku) {
        fputs(" · ", f);
        lg_html_text(f, page->sku);
    }
    if (page->mode) {
        fputs(" · ", f);
        lg_html_text(f, page->mode);
    }
    fputs("</title>\n<style>\nbody{font:14px/1.4 system-ui,\"Noto Sans CJK SC\",sans-serif;"
          "margin:16px;color:#222}\nh1{font-size:20px;margin:0 0 6px}\n.caption{color:#555}\n"
          ".audit b{font-weight:600}\n.warn{color:#a33}\n</style>\n</head>\n<body>\n<h1>",
          f);
    fputs(w->title, f);
    if (page->sku) {
        fputs(" · <span class=\"sku\">", f);
        lg_html_text(f, page->sku);
        fputs("</span>", f);
    }
    if (page->mode) {
        fputs(" · <span class=\"mode\">", f);
        lg_html_text(f, page->mode);
        fputs("</span>", f);
    }
    fputs("</h1>\n", f);
    if (page->caption) {
        fputs("<p class=\"caption\">", f);
        lg_html_text(f, page->caption);
        fputs("</p>\n", f);
    }
    fputs("<p class=\"audit\">", f);
    fputs(w->audit, f);
    fputs(": ", f);
    const lg_audit *a = page->audit;
    if (a)
        fprintf(f,
                "%s <b>%" PRId64 "</b>, %s <b>%" PRId64 "</b>, %s <b>%" PRId64 "</b>, %s "
                "<b id=\"audit-oversold\">%" PRId64 "</b>, %s <b>%" PRId64 "</b></p>\n",
                w->initial, a->initial, w->sold, a->sold, w->left, a->stock, w->oversold,
                a->oversold, w->undersold, a->undersold);
    else
        fprintf(f, "%s</p>\n", w->no_audit);
    fprintf(f, "<p class=\"trace\">%s: %" PRIu64 " %s, %d %s</p>\n", w->trace, s->records,
            w->records, s->instances, w->instances);
    if (s->truncated)
        fprintf(f, "<p class=\"warn\">%s</p>\n", w->truncated);
    /* What the trace leaves out: a burst's purchases that never reached a
     * worker are not in it, and a reader counting lanes should know why. */
    if (page->sent > s->records) {
        uint64_t out = page->sent - s->records;
        uint64_t local = page->sold_out_local < out ? page->sold_out_local : out;
        fprintf(f,
                "<p class=\"left-out\" data-sent=\"%" PRIu64 "\" data-left-out=\"%" PRIu64
                "\" data-local=\"%" PRIu64 "\">%s %" PRIu64 ": <b>%" PRIu64 "</b> %s",
                page->sent, out, local, w->sent, page->sent, out, w->not_drawn);
        if (local > 0)
            fprintf(f, " — %" PRIu64 " %s", local, w->local);
        if (out > local)
            fprintf(f, "%s%" PRIu64 " %s", local > 0 ? "; " : " — ", out - local, w->other);
        fputs("</p>\n", f);
    }
    fprintf(f, "<div id=\"timeline\"><noscript>%s</noscript></div>\n<script>\n", w->noscript);
    fwrite(LG_TIMELINE_JS, 1, sizeof LG_TIMELINE_JS - 1, f);
    fputs("</script>\n<script type=\"application/json\" id=\"trace-data\">[", f);
    if (s->len)
        fwrite(s->json, 1, s->len, f);
    fputs("]</script>\n<script>\n(function () {\n"
          "    var data = JSON.parse(document.getElementById('trace-data').textContent);\n",
          f);
    fprintf(f, "    var opts = {lang: '%s'", zh ? "zh" : "en");
    if (a)
        fprintf(f, ", stock: %" PRId64 ", stockLeft: %" PRId64, a->initial, a->stock);
    /* Each bucket's ends from the audit: the renderer's fallback, the last
     * sale's write by commit time, is not always Redis's last write. */
    for (int b = 0; a && b < a->nbuckets; b++)
        fprintf(f, "%s{initial: %" PRId64 ", stock: %" PRId64 "}%s", b ? ", " : ", buckets: [",
                a->bucket[b].initial, a->bucket[b].stock, b + 1 == a->nbuckets ? "]" : "");
    fputs("};\n    var s = window.miaoshaTimeline.render(document.getElementById('timeline'), "
          "data, opts);\n    document.body.setAttribute('data-trace-oversold', String(s.oversold));"
          "\n})();\n</script>\n</body>\n</html>\n",
          f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        snprintf(err, errlen, "%s: write failed", path);
        return -1;
    }
    return 0;
}

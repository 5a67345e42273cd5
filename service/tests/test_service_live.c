/* test_service_live.c — the live page (GET /) in a real browser.
 *
 * A burst runs on two SKUs: `none` buyers with work_ms=200 (they oversell)
 * and `token` buyers with work_ms=400, whose lock makes them sell one after
 * the other for seconds. Once `none` is done and while `token` still sells,
 * headless Chromium loads the page (its script polls the server in the
 * browser's virtual time) and dumps the DOM: the audit is the SKU's, shown
 * once on the SKU's row with the modes that bought it under it: live_none
 * shows the oversold count GET /stock reports, live_token oversold 0; one
 * token purchase on live_none makes it a SKU of two modes, and the token
 * row under it shows no audit (no mode is painted with another's
 * oversell). After the burst the page is dumped again (every audit field
 * equals GET /stock) and
 * photographed (live_page.png in the build directory). Then a link that
 * buys once with user=<script>alert(1)</script> and sku=<img ...> in the
 * Chinese page: both values appear as text, no element was made of them,
 * the headers are Chinese and the mode names stay as in the URLs. Last, on
 * a server with an admin token, the controls are clicked through the
 * DevTools protocol: the reset asks for the token (401 shows its field), a
 * wrong one is 403, the right one resets; "buy once" buys; the language
 * switch works, and its Chinese draws as characters, two different ones
 * never the same image (without a CJK font every one is the same empty
 * box, and the DOM's text would not show it).
 *
 * A missing chromium fails the test: it never skips. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pk_proc.h"
#include "svc_cdp.h"
#include "svc_test.h"

#define NONE_BUYERS 40
#define TOKEN_BUYERS 20
#define STOCK 10

static svc_server srv;
static char browser[512];

typedef struct burst {
    const char *mode, *sku;
    int n, work_ms;
    _Atomic int done;
} burst;

static void *run_burst(void *arg)
{
    burst *b = arg;
    char **paths = calloc((size_t)b->n, sizeof *paths);
    svc_resp *out = calloc((size_t)b->n, sizeof *out);
    for (int i = 0; i < b->n; i++) {
        paths[i] = malloc(200);
        snprintf(paths[i], 200, "/miaosha/%s?sku=%s&user=live%d&work_ms=%d&wait_ms=30000", b->mode,
                 b->sku, i, b->work_ms);
    }
    svc_burst(&srv, "GET", paths, b->n, out);
    for (int i = 0; i < b->n; i++) {
        TU_CHECK(out[i].status == 200 || out[i].status == 409, "%s buyer %d: %ld %s", b->mode, i,
                 out[i].status, B(&out[i]));
        svc_resp_free(&out[i]);
        free(paths[i]);
    }
    free(paths);
    free(out);
    atomic_store(&b->done, 1);
    return NULL;
}

/* Loads url in headless Chromium: with dom != NULL dumps the DOM into a
 * malloc'd *dom, else photographs the page into shot. Returns 0, or -1
 * (the browser's log is printed). */
static int browse(const char *url, char **dom, const char *shot)
{
    char udd[400], out[400], err[400], opt[500], e[200];
    snprintf(udd, sizeof udd, "%s/chromium", srv.dir);
    snprintf(out, sizeof out, "%s/dom.html", srv.dir);
    snprintf(err, sizeof err, "%s/chromium.log", srv.dir);
    snprintf(opt, sizeof opt, "--user-data-dir=%s", udd);
    char shot_opt[600];
    snprintf(shot_opt, sizeof shot_opt, "--screenshot=%s", shot ? shot : "");
    /* sh keeps the DOM (stdout) apart from the browser's chatter (stderr,
     * into the log); exec leaves the browser with the shell's pid. */
    const char *argv[] = {"/bin/sh",
                          "-c",
                          "o=$1; shift; exec \"$@\" >\"$o\"",
                          "sh",
                          out,
                          browser,
                          "--headless",
                          "--no-sandbox",
                          "--disable-gpu",
                          "--no-first-run",
                          "--hide-scrollbars",
                          "--window-size=1280,1400",
                          "--virtual-time-budget=4000",
                          opt,
                          dom ? "--dump-dom" : shot_opt,
                          url,
                          NULL};
    unlink(out);
    pid_t pid = pk_spawn(argv, err, PK_SPAWN_DIE_WITH_PARENT, e, sizeof e);
    if (pid < 0) {
        fprintf(stderr, "chromium: %s\n", e);
        return -1;
    }
    int status = 0;
    if (!pk_wait_status(pid, (int)tu_slack(60000), &status)) {
        pk_stop(pid, 2000);
        fprintf(stderr, "chromium did not finish within 60 s\n");
        return -1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char cmd[500];
        fprintf(stderr, "chromium failed (status %d); its log:\n", status);
        snprintf(cmd, sizeof cmd, "tail -n 30 '%s' >&2", err);
        if (system(cmd) != 0)
            fprintf(stderr, "(no log)\n");
        return -1;
    }
    if (dom == NULL)
        return 0;
    FILE *f = fopen(out, "rb");
    if (f == NULL)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *dom = malloc((size_t)n + 1);
    size_t got = fread(*dom, 1, (size_t)n, f);
    (*dom)[got] = '\0';
    fclose(f);
    return 0;
}

/* The SKU's row (<tr data-sku="sku" class="sku" ...>) and the end of its
 * group (the next SKU's row, or the end of the table): NULL when the page
 * has no such row. */
static const char *sku_row(const char *dom, const char *sku, const char **group_end)
{
    char tr[200];
    snprintf(tr, sizeof tr, "<tr data-sku=\"%s\" class=\"sku\"", sku);
    const char *row = strstr(dom, tr);
    if (row == NULL)
        return NULL;
    const char *after = strstr(row, "</tr>");
    const char *next = after ? strstr(after, "class=\"sku\"") : NULL;
    const char *end = strstr(row, "</tbody>");
    *group_end = next != NULL && (end == NULL || next < end) ? next : end;
    return row;
}

/* The number in <td data-field="field"> of the row that starts at row:
 * 0, or -1 when the row has no such cell. */
static int row_field(const char *row, const char *field, long long *v)
{
    char td[80];
    snprintf(td, sizeof td, "data-field=\"%s\"", field);
    const char *end = row ? strstr(row, "</tr>") : NULL;
    const char *c = row ? strstr(row, td) : NULL;
    if (c == NULL || end == NULL || c > end || (c = strchr(c, '>')) == NULL)
        return -1;
    char *stop;
    *v = strtoll(c + 1, &stop, 10);
    return stop == c + 1 || *stop != '<' ? -1 : 0;
}

/* The audit field of the SKU's row: 0, or -1. */
static int dom_field(const char *dom, const char *sku, const char *field, long long *v)
{
    const char *end;
    return row_field(sku_row(dom, sku, &end), field, v);
}

/* The row of mode under the SKU's row, before the next SKU's: NULL when
 * there is none there. */
static const char *mode_row(const char *dom, const char *mode, const char *sku)
{
    char tr[200];
    const char *end;
    const char *row = sku_row(dom, sku, &end);
    snprintf(tr, sizeof tr, "<tr data-mode=\"%s\" data-sku=\"%s\">", mode, sku);
    const char *m = row ? strstr(row, tr) : NULL;
    return m != NULL && (end == NULL || m < end) ? m : NULL;
}

/* The SKU's audit in the page equals GET /stock's (all of it, or oversold
 * only), shown once: on the SKU's row, and under it a row for mode that
 * carries no audit field of its own. */
static void check_row(const char *dom, const char *mode, const char *sku, const svc_audit *a,
                      int all)
{
    long long v = -1;
    TU_CHECK(dom_field(dom, sku, "oversold", &v) == 0 && v == a->oversold,
             "%s row: oversold %lld in the page, %lld in GET /stock", sku, v, a->oversold);
    const char *m = mode_row(dom, mode, sku);
    TU_CHECK(m != NULL, "a %s row under the %s row", mode, sku);
    TU_CHECK(m == NULL || row_field(m, "oversold", &v) == -1, "the %s row shows no audit", mode);
    TU_CHECK(m == NULL || row_field(m, "requests", &v) == 0, "the %s row shows its requests", mode);
    if (!all)
        return;
    TU_CHECK(dom_field(dom, sku, "sold", &v) == 0 && v == a->sold,
             "%s row: sold %lld in the page, %lld in GET /stock", sku, v, a->sold);
    TU_CHECK(dom_field(dom, sku, "stock", &v) == 0 && v == a->stock,
             "%s row: stock %lld in the page, %lld in GET /stock", sku, v, a->stock);
    TU_CHECK(dom_field(dom, sku, "undersold", &v) == 0 && v == a->undersold,
             "%s row: undersold %lld in the page, %lld in GET /stock", sku, v, a->undersold);
}

static void check_route(void)
{
    svc_resp r;
    svc_req(&srv, "GET", "/", NULL, NULL, &r);
    TU_CHECK(r.status == 200, "GET /: %ld", r.status);
    TU_CHECK(strstr(r.ctype, "text/html") != NULL, "GET /: content type %s", r.ctype);
    TU_CHECK(strstr(B(&r), "window.miaoshaTimeline") != NULL, "the renderer is inlined");
    TU_CHECK(strstr(B(&r), "<!--miaosha:") == NULL, "no marker left in the page");
    TU_CHECK(strstr(B(&r), " src=\"http") == NULL, "no external script");
    svc_resp_free(&r);
    svc_req(&srv, "HEAD", "/", NULL, NULL, &r);
    TU_CHECK(r.status == 200, "HEAD /: %ld", r.status);
    svc_resp_free(&r);
    svc_req(&srv, "POST", "/", NULL, NULL, &r);
    TU_CHECK(r.status == 405 && strcmp(r.allow, "GET, HEAD") == 0, "POST /: %ld allow '%s'",
             r.status, r.allow);
    svc_resp_free(&r);
    svc_req(&srv, "GET", "/?lang=zh", NULL, NULL, &r);
    TU_CHECK(r.status == 400 && svc_jdetail_has(&r, "unknown parameter 'lang'"),
             "GET /?lang: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
}

/* ---- the controls, clicked through the DevTools protocol ----
 *
 * --dump-dom cannot press a button, so the reset and buy controls are
 * driven over Chromium's --remote-debugging-pipe (svc_cdp.h). */

/* The page's Chinese drawn as characters, not as the empty boxes of a
 * machine without a CJK font: scripts/lib/cjk-glyphs.js draws each
 * distinct character of the elements in their own font and compares the
 * images. Reading the text cannot tell: the DOM holds 超卖 either way. */
static void check_glyphs(svc_cdp *c)
{
    const char *src = getenv("MIAOSHA_SOURCE_DIR");
    char path[600], out[600];
    snprintf(path, sizeof path, "%s/scripts/lib/cjk-glyphs.js", src ? src : ".");
    FILE *f = fopen(path, "rb");
    TU_REQUIRE(f != NULL, "read %s", path);
    static char js[8192];
    size_t n = fread(js, 1, sizeof js - 400, f);
    fclose(f);
    TU_REQUIRE(n > 0 && n < sizeof js - 400, "%s: %zu bytes", path, n);
    snprintf(js + n, sizeof js - n,
             ";return ['h1','#lang','#cells thead','#controls'].map(function(s){"
             "return s+': '+window.miaoshaCjkGlyphs(s);}).join(' | ');");
    svc_cdp_eval(c, js, out, sizeof out);
    printf("glyphs: %s\n", out);
    int bad = strstr(out, "distinct") == NULL;
    for (const char *p = out; (p = strstr(p, ": ")) != NULL; p += 2)
        bad |= strncmp(p + 2, "distinct ", 9) != 0;
    TU_CHECK(!bad, "the Chinese page draws its characters as distinct glyphs: %s", out);
}

#define LOG_TOP "var l=document.getElementById('log').firstChild;return l?l.textContent:'';"

/* With an admin token configured the reset asks for it: 401 shows the
 * token field, a wrong token is 403, the right one resets; then a "buy
 * once" button buys and the language switch turns the headers Chinese. */
static void check_controls(void)
{
    svc_server adm;
    char url[200], out[2000];
    const char *extra[] = {"--set", "admin_token=s3cret", NULL};
    svc_cdp c;
    svc_audit a;

    TU_REQUIRE(svc_start(&adm, tu_redis_port(), extra) == 0, "server with an admin token starts");
    TU_REQUIRE(svc_set_stock(&adm, "live_admin", 3, "Bearer s3cret") == 200, "stock live_admin");
    snprintf(url, sizeof url, "http://127.0.0.1:%d/#sku=live_admin&lang=en", adm.port);
    TU_REQUIRE(svc_cdp_open(&c, browser, url, adm.dir, 1280, 1000) == 0,
               "chromium opens the page over its DevTools pipe");
    TU_CHECK(svc_cdp_until(&c, "return document.getElementById('status').textContent;", "·", 10000,
                           out, sizeof out),
             "the page polled the server: '%s'", out);

    svc_cdp_eval(&c,
                 "document.getElementById('stock').value='7';"
                 "document.getElementById('reset').click();return 1;",
                 out, sizeof out);
    TU_CHECK(svc_cdp_until(&c, LOG_TOP, "→ 401", 10000, out, sizeof out),
             "reset without a token: '%s'", out);
    svc_cdp_eval(&c, "return document.getElementById('tokenbox').hidden;", out, sizeof out);
    TU_CHECK(strcmp(out, "false") == 0, "the admin token field is shown: hidden=%s", out);
    TU_CHECK(svc_get_audit(&adm, "live_admin", &a) == 200 && a.stock == 3, "nothing reset: %lld",
             a.stock);

    svc_cdp_eval(&c,
                 "document.getElementById('token').value='wrong';"
                 "document.getElementById('reset').click();return 1;",
                 out, sizeof out);
    TU_CHECK(svc_cdp_until(&c, LOG_TOP, "→ 403", 10000, out, sizeof out), "a wrong token: '%s'",
             out);
    svc_cdp_eval(&c,
                 "document.getElementById('token').value='s3cret';"
                 "document.getElementById('reset').click();return 1;",
                 out, sizeof out);
    TU_CHECK(svc_cdp_until(&c, LOG_TOP, "→ 200", 10000, out, sizeof out), "the right token: '%s'",
             out);
    TU_CHECK(svc_get_audit(&adm, "live_admin", &a) == 200 && a.stock == 7 && a.initial == 7,
             "reset to 7: stock %lld initial %lld", a.stock, a.initial);

    svc_cdp_eval(&c, "document.querySelector('button[data-buy=\"token\"]').click();return 1;", out,
                 sizeof out);
    TU_CHECK(svc_cdp_until(&c, LOG_TOP, "stock_left 6", 10000, out, sizeof out), "buy once: '%s'",
             out);
    TU_CHECK(svc_get_audit(&adm, "live_admin", &a) == 200 && a.sold == 1 && a.stock == 6,
             "one unit sold: sold %lld stock %lld", a.sold, a.stock);
    TU_CHECK(svc_cdp_until(&c,
                           "var t=document.querySelector('tr.sku[data-sku=\"live_admin\"] "
                           "td[data-field=\"sold\"]');return t?t.textContent:'';",
                           "1", 10000, out, sizeof out),
             "the live_admin row shows the sale: '%s'", out);

    svc_cdp_eval(&c,
                 "document.querySelector('#lang button[data-lang=\"zh\"]').click();"
                 "return document.querySelector('th[data-i18n=\"oversold\"]').textContent+' '+"
                 "document.querySelector('button[data-buy=\"token\"]').textContent;",
                 out, sizeof out);
    TU_CHECK(strcmp(out, "超卖 token") == 0, "the switch turns the page Chinese, modes stay: '%s'",
             out);
    check_glyphs(&c);
    svc_cdp_close(&c);
    TU_CHECK(svc_stop(&adm, 5000) == 0, "clean stop (admin server)");
}

int main(void)
{
    char url[400], shot[600];
    char *dom = NULL;
    const char *extra[] = {"--set", "server.workers=64", NULL};

    TU_REQUIRE(svc_cdp_browser(browser, sizeof browser) == 0,
               "headless Chromium is needed (Debian: apt-get install chromium, scripts/deps.sh)");
    TU_REQUIRE(svc_start(&srv, tu_redis_port(), extra) == 0, "server starts");
    check_route();

    TU_REQUIRE(svc_set_stock(&srv, "live_none", STOCK, NULL) == 200, "stock live_none");
    TU_REQUIRE(svc_set_stock(&srv, "live_token", STOCK, NULL) == 200, "stock live_token");
    burst none = {"none", "live_none", NONE_BUYERS, 200, 0};
    burst token = {"token", "live_token", TOKEN_BUYERS, 400, 0};
    pthread_t tn, tt;
    pthread_create(&tt, NULL, run_burst, &token);
    pthread_create(&tn, NULL, run_burst, &none);
    pthread_join(tn, NULL);

    /* One token purchase on none's SKU: a SKU shared by two modes. */
    svc_resp mix;
    svc_req(&srv, "POST", "/miaosha/token?sku=live_none&user=mix", NULL, NULL, &mix);
    TU_CHECK(mix.status == 200 || mix.status == 409, "token on live_none: %ld", mix.status);
    svc_resp_free(&mix);
    svc_audit an, at0, at1;
    TU_CHECK(svc_get_audit(&srv, "live_none", &an) == 200, "audit none");
    TU_CHECK(an.oversold > 0, "none oversold: %lld", an.oversold);
    TU_CHECK(svc_get_audit(&srv, "live_token", &at0) == 200, "audit token");
    TU_CHECK(!atomic_load(&token.done) && at0.sold < STOCK,
             "the token burst still runs when the browser starts (sold %lld)", at0.sold);

    snprintf(url, sizeof url, "http://127.0.0.1:%d/", srv.port);
    TU_REQUIRE(browse(url, &dom, NULL) == 0, "chromium dumps the page during the burst");
    TU_CHECK(svc_get_audit(&srv, "live_token", &at1) == 200, "audit token");
    printf("during the burst: token sold %lld before the browser, %lld after; running: %s\n",
           at0.sold, at1.sold, atomic_load(&token.done) ? "no" : "yes");
    check_row(dom, "none", "live_none", &an, 1);
    check_row(dom, "token", "live_token", &at1, 0);
    /* live_none was bought through two modes: its audit once, both
     * modes under it, and the token row not painted with none's oversell */
    TU_CHECK(strstr(dom, "<tr data-sku=\"live_none\" class=\"sku\" data-modes=\"2\">") != NULL,
             "the live_none row names its two modes");
    check_row(dom, "token", "live_none", &an, 0);
    long long v = -1;
    TU_CHECK(dom_field(dom, "live_token", "sold", &v) == 0 && v >= at0.sold && v <= at1.sold,
             "token sold in the page %lld, between %lld and %lld", v, at0.sold, at1.sold);
    TU_CHECK(strstr(dom, "<div class=\"mtl\"") != NULL, "the latest trace is drawn");
    free(dom);
    dom = NULL;

    pthread_join(tt, NULL);
    TU_CHECK(svc_get_audit(&srv, "live_token", &at1) == 200, "audit token");
    TU_CHECK(at1.sold == STOCK && at1.oversold == 0 && at1.undersold == 0,
             "token sold exactly the stock: %lld, oversold %lld", at1.sold, at1.oversold);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/#trace=live_none", srv.port);
    TU_REQUIRE(browse(url, &dom, NULL) == 0, "chromium dumps the page after the burst");
    check_row(dom, "none", "live_none", &an, 1);
    check_row(dom, "token", "live_token", &at1, 1);
    char want[80];
    snprintf(want, sizeof want, "<div class=\"mtl\" data-oversold=\"%lld\"", an.oversold);
    TU_CHECK(strstr(dom, want) != NULL, "the none trace marks %lld oversold units", an.oversold);
    TU_CHECK(strstr(dom, "<p class=\"note\" id=\"traceleft\" data-drawn=") != NULL &&
                 strstr(dom, "are never traced") != NULL,
             "the trace says how many it draws of how many, and what is never traced");
    int waits = 0;
    for (const char *p = dom; (p = strstr(p, "class=\"wait\"")) != NULL; p++)
        waits++;
    /* none takes no lock: the one lock-wait bar is the token purchase's */
    TU_CHECK(waits <= 1, "lock-wait bars on the live_none trace: %d (at most token's one)", waits);
    free(dom);
    dom = NULL;

    const char *bdir = getenv("MIAOSHA_BUILD_DIR");
    snprintf(shot, sizeof shot, "%s/live_page.png", bdir ? bdir : ".");
    unlink(shot);
    TU_CHECK(browse(url, NULL, shot) == 0, "chromium photographs the page");
    struct stat st;
    TU_CHECK(stat(shot, &st) == 0 && st.st_size > 1000, "screenshot %s", shot);
    printf("screenshot: %s\n", shot);

    /* A link that buys once, with hostile values in the Chinese page. */
    snprintf(url, sizeof url,
             "http://127.0.0.1:%d/#lang=zh&buy=none&user=%%3Cscript%%3Ealert(1)%%3C%%2Fscript%%3E"
             "&sku=%%3Cimg%%20src%%3Dx%%20onerror%%3Dalert(2)%%3E",
             srv.port);
    TU_REQUIRE(browse(url, &dom, NULL) == 0, "chromium dumps the page with hostile values");
    TU_CHECK(strstr(dom, "user=&lt;script&gt;alert(1)&lt;/script&gt;") != NULL,
             "the user shows as text");
    TU_CHECK(strstr(dom, "sku=&lt;img src=x onerror=alert(2)&gt;") != NULL,
             "the sku shows as text");
    TU_CHECK(strstr(dom, "<script>alert(1)") == NULL, "no script element made of the user");
    TU_CHECK(strstr(dom, "<img") == NULL, "no img element made of the sku");
    TU_CHECK(strstr(dom, "→ 400 bad_request") != NULL, "the purchase's 400 is shown");
    TU_CHECK(strstr(dom, "<th data-i18n=\"oversold\">超卖</th>") != NULL, "Chinese headers");
    TU_CHECK(strstr(dom, "<td data-field=\"mode\">none</td>") != NULL,
             "mode names stay as in the URLs");
    TU_CHECK(strstr(dom, "data-lang=\"zh\" class=\"on\"") != NULL, "the zh switch is on");
    free(dom);

    TU_CHECK(svc_stop(&srv, 5000) == 0, "clean stop");
    check_controls();
    return tu_done();
}

/* test_service_steps_page.c — the live page's "step through" panel in a
 * real browser (headless Chromium over its DevTools pipe, svc_cdp.h).
 *
 * English: the lost-update preset is pressed and stepped through with
 * each buyer's own "next" button in the lesson's order; after every step
 * the buyer's stage, the sentence and the Redis keys in the page are
 * checked, and at the end the page's oversold figure is 1, as GET /stock
 * says, and the buyers' lanes mark one oversold unit. The panel is
 * photographed (step_panel.png in the build directory: the README's
 * picture). Then the lock that waits (token), played with "next move of
 * the lesson": B shows waiting while A holds, the page ends at oversold 0;
 * the lease that runs out (token: A's release finds B's lock, oversold 1)
 * and the fence that refuses (fenced: A's reply 409 fenced_out, exact),
 * played the same way — their "wait for A's lease" move included.
 * 中文: the page switched to Chinese, the lost update played again with
 * the lesson's button: Chinese headers and sentences, oversold 1, and a
 * second photograph (step_panel_zh.png).
 *
 * A missing chromium fails the test: it never skips. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc_cdp.h"
#include "svc_test.h"

static svc_server srv;
static svc_cdp cdp;

#define VAL(sel) "var e=document.querySelector('" sel "');return e?e.textContent:'(none)';"

/* The text of buyer name's cell field. */
static void buyer_cell(const char *name, const char *field, char *out, size_t len)
{
    char js[300];
    snprintf(js, sizeof js,
             "var e=document.querySelector('tr[data-buyer=\"%s\"] td[data-field=\"%s\"]');"
             "return e?e.textContent:'(none)';",
             name, field);
    svc_cdp_eval(&cdp, js, out, len);
}

/* Waits until buyer name's stage cell reads stage. */
static int stage_is(const char *name, const char *stage)
{
    char js[300], out[200];
    snprintf(js, sizeof js,
             "var e=document.querySelector('tr[data-buyer=\"%s\"] td[data-field=\"stage\"]');"
             "return e?'<'+e.textContent+'>':'';",
             name);
    char want[64];
    snprintf(want, sizeof want, "<%s>", stage);
    int ok = svc_cdp_until(&cdp, js, want, 10000, out, sizeof out);
    TU_CHECK(ok, "buyer %s shows stage %s: %s", name, stage, out);
    return ok;
}

static void click(const char *selector)
{
    char js[300], out[64];
    snprintf(js, sizeof js,
             "var e=document.querySelector('%s');if(!e)return 'missing';e.click();return 'ok';",
             selector);
    svc_cdp_eval(&cdp, js, out, sizeof out);
    TU_CHECK(strcmp(out, "ok") == 0, "click %s: %s", selector, out);
}

/* Sets the panel's SKU and presses preset; waits for buyers A and B at
 * start. */
static void press_preset(const char *sku, const char *preset)
{
    char js[300], sel[80];
    snprintf(js, sizeof js,
             "document.getElementById('stepsku').value='%s';"
             "document.getElementById('stepstock').value='10';return 'ok';",
             sku);
    char out[64];
    svc_cdp_eval(&cdp, js, out, sizeof out);
    snprintf(sel, sizeof sel, "button[data-preset=\"%s\"]", preset);
    click(sel);
    stage_is("A", "start");
    stage_is("B", "start");
}

static void next_of(const char *name, const char *stage)
{
    char sel[80];
    snprintf(sel, sizeof sel, "button[data-next=\"%s\"]", name);
    click(sel);
    stage_is(name, stage);
}

/* The lesson's button, once: waits until its plan has moved on. */
static void follow(int move)
{
    char js[200], out[64], want[32];
    click("#stepfollow");
    snprintf(js, sizeof js, "return '<'+document.querySelectorAll('#stepplan li.did').length+'>';");
    snprintf(want, sizeof want, "<%d>", move + 1);
    TU_CHECK(svc_cdp_until(&cdp, js, want, 10000, out, sizeof out), "move %d played: %s", move + 1,
             out);
}

static void key_is(const char *field, const char *want)
{
    char js[200], out[200];
    snprintf(js, sizeof js,
             "var e=document.querySelector('#stepkeys td[data-field=\"%s\"]');"
             "return e?'<'+e.textContent+'>':'';",
             field);
    char w[64];
    snprintf(w, sizeof w, "<%s>", want);
    TU_CHECK(svc_cdp_until(&cdp, js, w, 5000, out, sizeof out), "the page shows %s = %s: %s", field,
             want, out);
}

static void say_has(const char *part)
{
    char out[600];
    TU_CHECK(svc_cdp_until(&cdp, VAL("#stepsay"), part, 5000, out, sizeof out),
             "the page says '%s': %s", part, out);
}

static void shot(const char *name)
{
    char path[600];
    const char *bdir = getenv("MIAOSHA_BUILD_DIR");
    snprintf(path, sizeof path, "%s/%s", bdir ? bdir : ".", name);
    unlink(path);
    TU_CHECK(svc_cdp_shot(&cdp, "#stepper", path) == 0, "photograph the panel into %s", path);
    struct stat st;
    TU_CHECK(stat(path, &st) == 0 && st.st_size > 5000, "screenshot %s (%lld bytes)", path,
             (long long)st.st_size);
    printf("screenshot: %s\n", path);
}

static void lost_update_by_hand(void)
{
    char out[300];
    svc_audit a;
    press_preset("page_lost", "lost_update");
    say_has("A reads, B reads");
    next_of("A", "locked");
    say_has("holds nothing");
    next_of("A", "read");
    buyer_cell("A", "read", out, sizeof out);
    TU_CHECK(strcmp(out, "10") == 0, "A's read in the page: %s", out);
    next_of("B", "locked");
    next_of("B", "read");
    say_has("the same value A read");
    next_of("A", "written");
    key_is("k-stock", "9");
    key_is("k-sold", "1");
    next_of("B", "written");
    say_has("One unit is oversold");
    key_is("k-stock", "9");
    key_is("k-sold", "2");
    key_is("k-oversold", "1");
    TU_CHECK(svc_cdp_until(&cdp, "return document.querySelectorAll('#stepplan li.did').length;",
                           "6", 5000, out, sizeof out),
             "the buttons pressed by hand played the lesson's first six moves: %s", out);
    shot("step_panel.png"); /* the moment of the lesson */
    next_of("A", "released");
    next_of("B", "released");
    next_of("A", "done");
    next_of("B", "done");
    buyer_cell("B", "reply", out, sizeof out);
    TU_CHECK(strncmp(out, "200", 3) == 0, "B's reply in the page: %s", out);
    key_is("k-oversold", "1");
    TU_CHECK(svc_get_audit(&srv, "page_lost", &a) == 200 && a.oversold == 1,
             "GET /stock agrees: oversold %lld", a.oversold);
    TU_CHECK(svc_cdp_until(&cdp,
                           "var e=document.querySelector('#steplanes .mtl');"
                           "return e?e.getAttribute('data-oversold'):'';",
                           "1", 5000, out, sizeof out),
             "the lanes mark one oversold unit: %s", out);
}

static void lock_waits_by_the_lesson(void)
{
    char out[300];
    press_preset("page_token", "lock_waits");
    follow(0); /* A → locked */
    TU_CHECK(svc_cdp_until(&cdp, VAL("#stepkeys td[data-field=\"k-lock\"]"), "(A)", 5000, out,
                           sizeof out),
             "the lock key holds A's token: %s", out);
    follow(1); /* B waits */
    say_has("B waits: the lock is held by A");
    TU_CHECK(svc_cdp_until(&cdp,
                           "var e=document.querySelector('tr[data-buyer=\"B\"]');"
                           "return e?e.className:'';",
                           "waiting", 5000, out, sizeof out),
             "B's row shows it waiting: %s", out);
    for (int m = 2; m < 11; m++)
        follow(m);
    stage_is("A", "done");
    stage_is("B", "done");
    key_is("k-stock", "8");
    key_is("k-oversold", "0");
}

/* The lease and fence lessons, played with the lesson's button: the
 * "wait until A's lease runs out" move waits for the lock key to go. */
static void lease_lessons(void)
{
    press_preset("page_lease", "lease");
    for (int m = 0; m < 5; m++)
        follow(m); /* A to read, its lease out, B in and to read */
    say_has("the same value A read");
    follow(5); /* A: written */
    follow(6); /* A: released */
    say_has("no longer A's (lock_lost)");
    for (int m = 7; m < 11; m++)
        follow(m);
    stage_is("B", "done");
    key_is("k-oversold", "1");

    press_preset("page_fence", "fence");
    for (int m = 0; m < 5; m++)
        follow(m);
    follow(5); /* A: written, refused */
    say_has("refused (fenced_out)");
    for (int m = 6; m < 11; m++)
        follow(m);
    stage_is("A", "done");
    stage_is("B", "done");
    char out[200];
    buyer_cell("A", "reply", out, sizeof out);
    TU_CHECK(strcmp(out, "409 fenced_out") == 0, "A's reply in the page: %s", out);
    key_is("k-stock", "9");
    key_is("k-oversold", "0");
}

static void lost_update_in_chinese(void)
{
    char out[300];
    click("#lang button[data-lang=\"zh\"]");
    TU_CHECK(svc_cdp_until(&cdp, VAL("th[data-step-i18n=\"koversold\"]"), "超卖（对账）", 5000, out,
                           sizeof out),
             "the panel's headers turn Chinese: %s", out);
    press_preset("page_lost_zh", "lost_update");
    say_has("A 读、B 读、A 写、B 写");
    for (int m = 0; m < 6; m++)
        follow(m);
    say_has("超卖了一件");
    shot("step_panel_zh.png");
    for (int m = 6; m < 10; m++)
        follow(m);
    stage_is("B", "done");
    key_is("k-oversold", "1");
    svc_cdp_eval(&cdp, VAL("button[data-preset=\"lost_update\"]"), out, sizeof out);
    TU_CHECK(strcmp(out, "丢失的更新（none）") == 0, "the presets are Chinese, modes stay: %s",
             out);
}

int main(void)
{
    char browser[512], url[200];
    const char *extra[] = {"--set", "faults.enabled=true", NULL};
    TU_REQUIRE(svc_cdp_browser(browser, sizeof browser) == 0,
               "headless Chromium is needed (Debian: apt-get install chromium, scripts/deps.sh)");
    TU_REQUIRE(svc_start(&srv, tu_redis_port(), extra) == 0, "server starts");
    snprintf(url, sizeof url, "http://127.0.0.1:%d/#lang=en", srv.port);
    TU_REQUIRE(svc_cdp_open(&cdp, browser, url, srv.dir, 1280, 1000) == 0,
               "chromium opens the page over its DevTools pipe");
    char out[200];
    TU_REQUIRE(
        svc_cdp_until(&cdp, "return typeof window.miaoshaSteps;", "object", 10000, out, sizeof out),
        "the panel's script runs: %s", out);
    lost_update_by_hand();
    lock_waits_by_the_lesson();
    lease_lessons();
    lost_update_in_chinese();
    svc_cdp_close(&cdp);
    TU_CHECK(svc_stop(&srv, 5000) == 0, "clean stop");
    return tu_done();
}

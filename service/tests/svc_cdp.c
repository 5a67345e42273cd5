/* svc_cdp.c — see svc_cdp.h. */
#include "svc_cdp.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "pk_proc.h"
#include "svc_test.h"

int svc_cdp_browser(char *out, size_t len)
{
    const char *env = getenv("MIAOSHA_CHROMIUM");
    if (env != NULL && env[0] != '\0') {
        snprintf(out, len, "%s", env);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/chromium", d);
        if (access(out, X_OK) == 0)
            return 0;
    }
    return -1;
}

/* The reply to command id, or NULL after timeout_ms. Events and other
 * replies are dropped. */
static cJSON *reply_to(svc_cdp *c, int id, int timeout_ms)
{
    int64_t deadline = lc_now_ms() + timeout_ms;
    for (;;) {
        char *end = c->len ? memchr(c->buf, '\0', c->len) : NULL;
        if (end != NULL) {
            cJSON *m = cJSON_Parse(c->buf);
            size_t used = (size_t)(end - c->buf) + 1;
            memmove(c->buf, c->buf + used, c->len - used);
            c->len -= used;
            cJSON *mid = cJSON_GetObjectItemCaseSensitive(m, "id");
            if (cJSON_IsNumber(mid) && (int)mid->valuedouble == id)
                return m;
            cJSON_Delete(m);
            continue;
        }
        if (c->cap - c->len < 65536) {
            size_t cap = c->cap ? 2 * c->cap : 1 << 20;
            char *b = realloc(c->buf, cap);
            if (b == NULL)
                return NULL;
            c->buf = b;
            c->cap = cap;
        }
        int64_t left = deadline - lc_now_ms();
        struct pollfd pf = {c->from, POLLIN, 0};
        if (left <= 0 || poll(&pf, 1, (int)left) <= 0)
            return NULL;
        ssize_t n = read(c->from, c->buf + c->len, c->cap - c->len);
        if (n <= 0)
            return NULL;
        c->len += (size_t)n;
    }
}

cJSON *svc_cdp_call(svc_cdp *c, const char *method, const char *params, int in_session)
{
    size_t cap = strlen(params) + 512;
    char *msg = malloc(cap);
    if (msg == NULL)
        return NULL;
    int n = snprintf(msg, cap, "{\"id\":%d,\"method\":\"%s\",\"params\":%s%s%s%s}", ++c->id, method,
                     params, in_session ? ",\"sessionId\":\"" : "", in_session ? c->session : "",
                     in_session ? "\"" : "");
    int ok = n > 0 && (size_t)n < cap && write(c->to, msg, (size_t)n + 1) == n + 1;
    free(msg);
    if (!ok)
        return NULL;
    cJSON *m = reply_to(c, c->id, (int)tu_slack(15000));
    cJSON *res = cJSON_DetachItemFromObjectCaseSensitive(m, "result");
    cJSON_Delete(m);
    return res;
}

void svc_cdp_eval(svc_cdp *c, const char *js, char *out, size_t len)
{
    size_t n = strlen(js) + 64;
    char *expr = malloc(n);
    if (expr == NULL) {
        snprintf(out, len, "%s", "");
        return;
    }
    snprintf(expr, n, "String((function(){%s})())", js);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "expression", expr);
    cJSON_AddBoolToObject(p, "returnByValue", 1);
    cJSON_AddBoolToObject(p, "awaitPromise", 1);
    char *params = cJSON_PrintUnformatted(p);
    cJSON_Delete(p);
    free(expr);
    cJSON *res = params ? svc_cdp_call(c, "Runtime.evaluate", params, 1) : NULL;
    free(params);
    const char *v = svc_jstr(cJSON_GetObjectItemCaseSensitive(res, "result"), "value");
    snprintf(out, len, "%s", v ? v : "");
    cJSON_Delete(res);
}

int svc_cdp_until(svc_cdp *c, const char *js, const char *want, int timeout_ms, char *out,
                  size_t len)
{
    int64_t deadline = lc_now_ms() + tu_slack(timeout_ms);
    do {
        svc_cdp_eval(c, js, out, len);
        if (strstr(out, want) != NULL)
            return 1;
        tu_sleep_ms(30);
    } while (lc_now_ms() < deadline);
    return 0;
}

int svc_cdp_open(svc_cdp *c, const char *browser, const char *url, const char *dir, int width,
                 int height)
{
    int a[2], b[2];
    char udd[400], log[400], size[64], params[600];
    memset(c, 0, sizeof *c);
    c->to = c->from = -1;
    snprintf(udd, sizeof udd, "--user-data-dir=%s/chromium-cdp", dir);
    snprintf(log, sizeof log, "%s/chromium-cdp.log", dir);
    snprintf(size, sizeof size, "--window-size=%d,%d", width, height);
    if (pipe(a) != 0)
        return -1;
    if (pipe(b) != 0) {
        close(a[0]);
        close(a[1]);
        return -1;
    }
    c->pid = fork();
    if (c->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        /* b was made after a, so b[1] is never 3: the first dup2 cannot
         * overwrite it, and the second at most overwrites a[0]'s old fd,
         * already copied. */
        if (dup2(a[0], 3) < 0 || dup2(b[1], 4) < 0)
            _exit(127);
        execl(browser, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--hide-scrollbars", size, udd, "--remote-debugging-pipe", "about:blank",
              (char *)NULL);
        _exit(127);
    }
    close(a[0]);
    close(b[1]);
    c->to = a[1];
    c->from = b[0];
    if (c->pid < 0)
        return -1;
    snprintf(params, sizeof params, "{\"url\":\"%s\"}", url);
    cJSON *t = svc_cdp_call(c, "Target.createTarget", params, 0);
    const char *tid = svc_jstr(t, "targetId");
    snprintf(params, sizeof params, "{\"targetId\":\"%s\",\"flatten\":true}", tid ? tid : "");
    cJSON_Delete(t);
    cJSON *s = svc_cdp_call(c, "Target.attachToTarget", params, 0);
    const char *sid = svc_jstr(s, "sessionId");
    snprintf(c->session, sizeof c->session, "%s", sid ? sid : "");
    cJSON_Delete(s);
    if (!c->session[0])
        return -1;
    snprintf(params, sizeof params,
             "{\"width\":%d,\"height\":%d,\"deviceScaleFactor\":1,\"mobile\":false}", width,
             height);
    cJSON_Delete(svc_cdp_call(c, "Emulation.setDeviceMetricsOverride", params, 1));
    return 0;
}

/* Standard base64 (what captureScreenshot sends) into out: its length, or
 * -1 on a byte outside the alphabet. */
static long unbase64(const char *in, unsigned char *out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned v = 0;
    int bits = 0;
    long n = 0;
    for (; *in && *in != '='; in++) {
        const char *at = strchr(abc, *in);
        if (at == NULL || *in == '\0')
            return -1;
        v = (v << 6) | (unsigned)(at - abc);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(v >> bits);
        }
    }
    return n;
}

int svc_cdp_shot(svc_cdp *c, const char *selector, const char *path)
{
    char js[600], rect[200], params[400];
    snprintf(js, sizeof js,
             "var e=document.querySelector('%s');if(!e)return '';e.scrollIntoView();"
             "var r=e.getBoundingClientRect();return JSON.stringify({x:r.left+scrollX,"
             "y:r.top+scrollY,w:r.width,h:r.height});",
             selector);
    svc_cdp_eval(c, js, rect, sizeof rect);
    cJSON *r = cJSON_Parse(rect);
    if (r == NULL)
        return -1;
    snprintf(params, sizeof params,
             "{\"format\":\"png\",\"captureBeyondViewport\":true,\"clip\":{\"x\":%.0f,"
             "\"y\":%.0f,\"width\":%.0f,\"height\":%.0f,\"scale\":1}}",
             svc_jnum(r, "x"), svc_jnum(r, "y"), svc_jnum(r, "w"), svc_jnum(r, "h"));
    cJSON_Delete(r);
    cJSON *res = svc_cdp_call(c, "Page.captureScreenshot", params, 1);
    const char *data = svc_jstr(res, "data");
    unsigned char *png = data ? malloc(strlen(data)) : NULL;
    long n = png ? unbase64(data, png) : -1;
    cJSON_Delete(res);
    FILE *f = n > 0 ? fopen(path, "wb") : NULL;
    int ok = f != NULL && fwrite(png, 1, (size_t)n, f) == (size_t)n;
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    free(png);
    return ok ? 0 : -1;
}

void svc_cdp_close(svc_cdp *c)
{
    if (c->to >= 0)
        cJSON_Delete(svc_cdp_call(c, "Browser.close", "{}", 0));
    if (c->to >= 0)
        close(c->to);
    if (c->from >= 0)
        close(c->from);
    if (c->pid > 0 && !pk_wait_exit(c->pid, (int)tu_slack(10000)))
        pk_kill(c->pid);
    free(c->buf);
    memset(c, 0, sizeof *c);
    c->to = c->from = -1;
}

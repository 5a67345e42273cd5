/* svc_cdp.h — headless Chromium driven over its DevTools protocol, for the
 * tests that press buttons on the live page: no npm, no puppeteer, only
 * Debian's chromium and --remote-debugging-pipe. Commands are JSON texts
 * ended by a NUL byte, written to the browser's fd 3; replies and events
 * come back the same way on its fd 4.
 *
 * A missing browser is the caller's failure, never a skip. One cdp per
 * thread; every call blocks at most its timeout (scaled by tu_slack). */
#ifndef MIAOSHA_SVC_CDP_H
#define MIAOSHA_SVC_CDP_H

#include <stddef.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

/* The Chromium binary: $MIAOSHA_CHROMIUM when set, else chromium on PATH,
 * into out (len bytes). 0, or -1 when there is none. */
int svc_cdp_browser(char *out, size_t len);

typedef struct svc_cdp {
    pid_t pid;
    int to, from;
    char *buf; /* messages read and not taken yet (grows: a screenshot is
                  megabytes of base64) */
    size_t len, cap;
    int id;
    char session[128];
} svc_cdp;

/* Starts browser headless with a profile under dir (its log in
 * dir/chromium-cdp.log), a window of width x height CSS pixels, opens url
 * in a new tab and attaches to it. 0, or -1 (c is then still closed with
 * svc_cdp_close). */
int svc_cdp_open(svc_cdp *c, const char *browser, const char *url, const char *dir, int width,
                 int height);
/* Sends method with params (a JSON object's text) to the browser
 * (in_session 0) or the tab (1): its "result" detached (the caller deletes
 * it), or NULL on error or after 15 s. */
cJSON *svc_cdp_call(svc_cdp *c, const char *method, const char *params, int in_session);
/* Evaluates js (a function body: "return ...;") in the tab; its value as
 * String(...) into out (len bytes; "" on error). */
void svc_cdp_eval(svc_cdp *c, const char *js, char *out, size_t len);
/* Evaluates js until its value contains want, up to timeout_ms (scaled);
 * 1 when it did. The last value is in out. */
int svc_cdp_until(svc_cdp *c, const char *js, const char *want, int timeout_ms, char *out,
                  size_t len);
/* Photographs the element selector finds (scrolled into view, whole) as
 * a PNG file at path. 0, or -1. */
int svc_cdp_shot(svc_cdp *c, const char *selector, const char *path);
/* Closes the browser and reaps it (SIGKILL when it does not go). */
void svc_cdp_close(svc_cdp *c);

#endif

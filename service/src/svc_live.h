/* svc_live.h — the live page that GET / serves: service/web/live.html with
 * web/timeline.js (the purchase timeline renderer), service/web/live.js
 * and service/web/step.js (the "step through" panel) inlined, all compiled
 * into the binary (service/CMakeLists.txt), so the page needs no file at
 * run time and no CDN. It reads /stats, /metrics, /stock/{sku} and
 * /trace/{sku} itself, and drives /steps (service/README.md, "GET /"). */
#ifndef MIAOSHA_SVC_LIVE_H
#define MIAOSHA_SVC_LIVE_H

#include <stddef.h>

/* Builds the page: the HTML with each "<!--miaosha:NAME-->" marker replaced
 * by <script>NAME's text</script>. Returns a malloc'd NUL-terminated string
 * the caller frees (svc_http.c keeps it for the process), its length in
 * *len; NULL when memory runs out or a marker is missing (the build is
 * broken). Any thread; nothing is logged. */
char *svc_live_page(size_t *len);

#endif

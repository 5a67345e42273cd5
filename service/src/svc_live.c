/* svc_live.c — assembles the live page (see svc_live.h). */
#include "svc_live.h"

#include <stdlib.h>
#include <string.h>

#include "svc_live_html.h"
#include "svc_live_js.h"
#include "svc_step_js.h"
#include "svc_timeline_js.h"

static const struct {
    const char *marker, *text;
    size_t len;
} inlined[] = {
    {"<!--miaosha:timeline.js-->", SVC_TIMELINE_JS, sizeof SVC_TIMELINE_JS - 1},
    {"<!--miaosha:live.js-->", SVC_LIVE_JS, sizeof SVC_LIVE_JS - 1},
    {"<!--miaosha:step.js-->", SVC_STEP_JS, sizeof SVC_STEP_JS - 1},
};

#define OPEN "<script>\n"
#define CLOSE "</script>\n"

char *svc_live_page(size_t *len)
{
    const char *html = SVC_LIVE_HTML;
    size_t total = sizeof SVC_LIVE_HTML - 1;
    const char *at[sizeof inlined / sizeof inlined[0]];
    size_t n = sizeof inlined / sizeof inlined[0];

    for (size_t i = 0; i < n; i++) {
        at[i] = strstr(html, inlined[i].marker);
        if (at[i] == NULL || (i > 0 && at[i] < at[i - 1]))
            return NULL;
        total += sizeof OPEN - 1 + inlined[i].len + sizeof CLOSE - 1 - strlen(inlined[i].marker);
    }
    char *page = malloc(total + 1), *p = page;
    if (page == NULL)
        return NULL;
    const char *from = html;
    for (size_t i = 0; i < n; i++) {
        memcpy(p, from, (size_t)(at[i] - from));
        p += at[i] - from;
        memcpy(p, OPEN, sizeof OPEN - 1);
        p += sizeof OPEN - 1;
        memcpy(p, inlined[i].text, inlined[i].len);
        p += inlined[i].len;
        memcpy(p, CLOSE, sizeof CLOSE - 1);
        p += sizeof CLOSE - 1;
        from = at[i] + strlen(inlined[i].marker);
    }
    size_t rest = strlen(from);
    memcpy(p, from, rest + 1);
    *len = (size_t)(p - page) + rest;
    return page;
}

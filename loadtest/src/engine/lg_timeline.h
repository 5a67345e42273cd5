/* lg_timeline.h — the timeline page of a burst: the purchases' traces
 * (GET /trace/{sku} of every instance a burst used, service/README.md
 * "/trace") drawn by web/timeline.js, written as one self-contained HTML
 * file (the renderer and the data inlined; no external asset, opens from
 * file://). Used by `run --timeline`, by the matrix for every cell and by
 * `timeline` (a saved trace).
 *
 * Escaping: every value that comes from outside (SKU, mode, users and
 * everything else in a trace, a caption) reaches the page either as HTML
 * text with & < > " ' escaped, or inside the JSON data block, where < > &
 * are written as \u003c \u003e \u0026, so no `</script>` can end it; the
 * renderer puts record values in the page with textContent only. A trace
 * line that is not a JSON object is refused (an error naming the line),
 * never copied.
 *
 * Errors: functions return 0 or -1 with a reason in err (errlen bytes);
 * nothing prints or exits. Threads: an lg_trace_set belongs to one thread;
 * the HTTP calls block it (lg_http_call's bounds). curl_global_init must
 * have been called (lg_admin.h).
 */
#ifndef MIAOSHA_LG_TIMELINE_H
#define MIAOSHA_LG_TIMELINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lg_admin.h"

/* Where an instance's trace stood before a burst: the burst's records are
 * those after last_seq, unless the instance behind the URL changed (a
 * restart: its ring starts again, so all of it is the burst's). */
typedef struct lg_trace_mark {
    int known;          /* 1: read (a 404 "never traced" counts: last_seq 0) */
    uint64_t last_seq;  /* the header's last_seq */
    char instance[128]; /* the header's instance id; "" after a 404 */
} lg_trace_mark;

/* GET {base}/trace/{sku}?since=999999999999 (the header alone) into *m.
 * Never fails: anything but a 200 header or a 404 leaves m->known 0 (then
 * the whole ring is taken later). Blocks up to 5 s. */
void lg_trace_mark_get(const char *base, const char *sku, lg_trace_mark *m);

/* The records collected for one page, as JSON array elements. */
typedef struct lg_trace_set {
    char *json; /* "obj,obj,..." (malloc'd), escaped for a script block */
    size_t len, cap;
    uint64_t records;           /* purchase records (not headers) */
    int instances;              /* header lines seen */
    int truncated;              /* a ring had overwritten records the burst made */
    char instance_ids[16][128]; /* the first 16 instance ids, for de-duplication */
    /* "BASE: DETAIL" of the first instance whose 404 said it traced
     * nothing because every trace ring was taken (trace.max_skus); "" when
     * none did */
    char untraced[320];
} lg_trace_set;

/* An empty set (zeroed). */
void lg_trace_set_init(lg_trace_set *s);
void lg_trace_set_free(lg_trace_set *s);

/* Adds the records of {base}/trace/{sku} made after mark (mark NULL or not
 * known: all the ring holds). An instance already in the set (the same
 * instance behind a second URL) adds nothing. -1 when the instance could
 * not be asked or answered neither 200 nor 404 (404: nothing traced, 0;
 * s->untraced names it when its rings were all taken),
 * when a line of the reply is not a JSON object, or out of memory; the
 * set then keeps the records added before the failure. */
int lg_trace_fetch(lg_trace_set *s, const char *base, const char *sku, const lg_trace_mark *mark,
                   char *err, size_t errlen);

/* Adds JSON Lines text (a saved /trace reply, or several one after the
 * other), len bytes. Lines that are empty are skipped; a line that is not
 * a JSON object is an error (-1, with its line number). */
int lg_trace_add_text(lg_trace_set *s, const char *text, size_t len, char *err, size_t errlen);

typedef struct lg_timeline_page {
    const char *sku;       /* shown in the title; may be NULL */
    const char *mode;      /* may be NULL */
    const char *caption;   /* one line of context (a matrix cell's name), or NULL */
    const char *lang;      /* "en" (also NULL) or "zh": the page's and the renderer's words */
    const lg_audit *audit; /* the burst's audit, or NULL (none read) */
    /* The purchases the burst sent, 0 when not known (a saved trace): the
     * page says how many of them the trace does not hold, and why. */
    uint64_t sent;
    /* Of those, the 409 sold_out answered from an instance's local
     * sold-out flag (on its HTTP thread, before any worker: never
     * traced); 0 also when not counted. */
    uint64_t sold_out_local;
} lg_timeline_page;

/* Writes the page for s to path (created or truncated). 0, or -1 when the
 * file cannot be written. */
int lg_timeline_write(const char *path, const lg_timeline_page *page, const lg_trace_set *s,
                      char *err, size_t errlen);

/* Writes text onto f with & < > " ' as entities (the page's and the
 * matrix's HTML). NULL writes nothing. */
void lg_html_text(FILE *f, const char *text);

#endif

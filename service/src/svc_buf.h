/* svc_buf.h — a small growable string for the /stats and /metrics
 * renderings, and the indented form of a rendering (/stats?pretty=1). */
#ifndef MIAOSHA_SVC_BUF_H
#define MIAOSHA_SVC_BUF_H

#include <stddef.h>

/* Start zeroed ({0}); p is malloc'd, NUL-terminated once anything was
 * printed, and owned by the caller (free(p)). After an allocation failure
 * oom is 1, further prints do nothing and p holds what came before. One
 * thread per buffer. */
typedef struct svc_buf {
    char *p;
    size_t len, cap;
    int oom;
} svc_buf;

/* Appends the formatted text, growing p (4 KiB, then doubling). */
void svc_buf_printf(svc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* compact (len bytes: JSON without whitespace outside strings, as the
 * renderings and cJSON_PrintUnformatted write it) indented by two spaces
 * per level, one member or element per line, ": " after each name, a
 * newline at the end; "{}" and "[]" stay on one line. Strings are copied
 * byte for byte. Returns a malloc'd NUL-terminated string the caller frees,
 * its length in *out_len; NULL when out of memory. Any thread. */
char *svc_buf_json_indent(const char *compact, size_t len, size_t *out_len);

#endif

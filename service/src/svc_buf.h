/* svc_buf.h — a small growable string for the /stats and /metrics
 * renderings. */
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

#endif

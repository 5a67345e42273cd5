/* svc_log.h — one line per event on stderr, and the escaping that keeps
 * untrusted text (URLs, methods) from ending or forging a line. */
#ifndef MIAOSHA_SVC_LOG_H
#define MIAOSHA_SVC_LOG_H

#include <stddef.h>

typedef enum { SVC_DEBUG, SVC_INFO, SVC_WARN, SVC_ERROR } svc_level;

/* Lines below lvl are dropped from now on. Any thread. */
void svc_log_set_level(svc_level lvl);
/* Writes "<UTC time> <LEVEL> <message>\n" to stderr in one write(2), so
 * lines from different threads never interleave; a message over about 1000
 * bytes is cut. Any thread. */
void svc_log(svc_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copies untrusted text (a URL, a method) into dst for a log line: control
 * bytes, DEL, non-ASCII and '\' become \xNN, so it cannot end the line or
 * forge another. len is dst's size in bytes, NUL included. The escaped text
 * is kept whole when it is at most len - 4 bytes long; otherwise dst holds
 * as many whole characters (an \xNN is never split) as leave room for
 * "..." and the NUL, then "..." (len < 4: just the NUL). dst is always
 * terminated when len > 0, untouched when len == 0. src NULL is the empty
 * string. Any thread. */
void svc_log_escape(char *dst, size_t len, const char *src);

#endif

/* svc_log.h — one line per event on stderr, the escaping that keeps
 * untrusted text (URLs, methods) from ending or forging a line, and the
 * summary of a warning that repeats (an outage must not write a line per
 * retry: the first one says what happened, the rest are counted). */
#ifndef MIAOSHA_SVC_LOG_H
#define MIAOSHA_SVC_LOG_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

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

/* One repeating warning (a call site, usually static): when its line was
 * last written and how many were held back since. */
typedef struct svc_log_repeat {
    pthread_mutex_t mu;
    int64_t last_ms; /* lc_now_ms() of the line last written; 0: none yet */
    uint64_t held;   /* occurrences since then that wrote nothing */
} svc_log_repeat;
#define SVC_LOG_REPEAT_INIT                                                                        \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, 0, 0                                                            \
    }
#define SVC_LOG_EVERY_MS 10000 /* at most one line per this, per svc_log_every */

/* svc_log, at most once per SVC_LOG_EVERY_MS for e: the first occurrence is
 * written as it is; later ones within SVC_LOG_EVERY_MS of the last line are
 * only counted; the next one after that is written with "(N more in the
 * last S s)" appended when N were held back. Any thread. */
void svc_log_every(svc_log_repeat *e, svc_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The condition behind e is over (Redis answers again): when occurrences
 * were held back since e's last line, writes "<what> (N more in the last S
 * s)"; then the next occurrence is written at once again. Any thread. */
void svc_log_every_end(svc_log_repeat *e, svc_level lvl, const char *what);

#endif

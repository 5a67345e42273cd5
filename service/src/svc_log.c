/* svc_log.c — logging (see svc_log.h). */
#include "svc_log.h"

#include "lockcore.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <stdatomic.h>
#include <unistd.h>

static _Atomic int min_level = SVC_INFO;

void svc_log_set_level(svc_level lvl)
{
    min_level = (int)lvl;
}

static void vlog(svc_level lvl, const char *suffix, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

void svc_log(svc_level lvl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(lvl, "", fmt, ap);
    va_end(ap);
}

/* One line: the time, the level, the message, then suffix. */
static void vlog(svc_level lvl, const char *suffix, const char *fmt, va_list ap)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    char line[1024];
    struct timespec ts;
    struct tm tm;
    size_t n;

    if ((int)lvl < min_level)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %-5s ", ts.tv_nsec / 1000000L,
                          names[lvl]);
    int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
    if (m < 0)
        m = 0;
    n += (size_t)m;
    if (n > sizeof line - 2)
        n = sizeof line - 2;
    m = snprintf(line + n, sizeof line - n, "%s", suffix);
    n += m > 0 ? (size_t)m : 0;
    if (n > sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    /* One write per line, so lines from different threads never interleave. */
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

void svc_log_escape(char *dst, size_t len, const char *src)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    if (len == 0)
        return;
    for (; src != NULL && *src != '\0'; src++) {
        unsigned char ch = (unsigned char)*src;
        int plain = ch >= 0x20 && ch < 0x7f && ch != '\\';
        size_t need = plain ? 1 : 4;
        if (n + need + 4 > len) { /* room for "..." and the NUL */
            if (n + 3 < len)
                memcpy(dst + n, "...", 3), n += 3;
            break;
        }
        if (plain) {
            dst[n++] = (char)ch;
        } else {
            dst[n++] = '\\';
            dst[n++] = 'x';
            dst[n++] = hex[ch >> 4];
            dst[n++] = hex[ch & 15];
        }
    }
    dst[n] = '\0';
}

/* " (N more in the last S s)" for what e held back, into buf; "" when
 * nothing was. S is rounded to the nearest second (at least 1): a window
 * of SVC_LOG_EVERY_MS and a few ms reads as that window, not one second
 * more. Under e->mu. */
static void held_text(const svc_log_repeat *e, int64_t now, char *buf, size_t len)
{
    buf[0] = '\0';
    int64_t s = (now - e->last_ms + 500) / 1000;
    if (e->held > 0)
        snprintf(buf, len, " (%llu more in the last %lld s)", (unsigned long long)e->held,
                 (long long)(s > 0 ? s : 1));
}

void svc_log_every(svc_log_repeat *e, svc_level lvl, const char *fmt, ...)
{
    if ((int)lvl < min_level)
        return;
    int64_t now = lc_now_ms();
    char suffix[64];
    pthread_mutex_lock(&e->mu);
    if (e->last_ms != 0 && now - e->last_ms < SVC_LOG_EVERY_MS) {
        e->held++;
        pthread_mutex_unlock(&e->mu);
        return;
    }
    held_text(e, now, suffix, sizeof suffix);
    e->last_ms = now;
    e->held = 0;
    pthread_mutex_unlock(&e->mu);
    va_list ap;
    va_start(ap, fmt);
    vlog(lvl, suffix, fmt, ap);
    va_end(ap);
}

void svc_log_every_end(svc_log_repeat *e, svc_level lvl, const char *what)
{
    int64_t now = lc_now_ms();
    char suffix[64];
    pthread_mutex_lock(&e->mu);
    held_text(e, now, suffix, sizeof suffix);
    e->last_ms = 0;
    e->held = 0;
    pthread_mutex_unlock(&e->mu);
    if (suffix[0])
        svc_log(lvl, "%s%s", what, suffix);
}

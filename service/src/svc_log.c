/* svc_log.c — logging (see svc_log.h). */
#include "svc_log.h"

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

void svc_log(svc_level lvl, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    char line[1024];
    struct timespec ts;
    struct tm tm;
    size_t n;
    va_list ap;

    if ((int)lvl < min_level)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %-5s ", ts.tv_nsec / 1000000L,
                          names[lvl]);
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += (size_t)m;
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

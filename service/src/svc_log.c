/* svc_log.c — logging, clocks, key names and a growable string buffer. */
#include "svc.h"

#include <stdio.h>
#include <stdlib.h>
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

int64_t svc_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t svc_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void svc_key(char *buf, const char *sku, const char *suffix)
{
    snprintf(buf, SVC_KEY_MAX, "miaosha:{%s}:%s", sku, suffix);
}

void svc_buf_printf(svc_buf *b, const char *fmt, ...)
{
    va_list ap;
    if (b->oom)
        return;
    for (;;) {
        size_t room = b->cap - b->len;
        int n;
        va_start(ap, fmt);
        n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p != NULL && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

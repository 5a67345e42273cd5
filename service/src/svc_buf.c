/* svc_buf.c — see svc_buf.h. */
#include "svc_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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

static void indent_line(svc_buf *b, int depth)
{
    svc_buf_printf(b, "\n%*s", 2 * depth, "");
}

char *svc_buf_json_indent(const char *compact, size_t len, size_t *out_len)
{
    svc_buf b = {0};
    int depth = 0, in_string = 0, escaped = 0;
    for (size_t i = 0; i < len && !b.oom; i++) {
        char ch = compact[i];
        if (in_string) {
            svc_buf_printf(&b, "%c", ch);
            if (escaped)
                escaped = 0;
            else if (ch == '\\')
                escaped = 1;
            else if (ch == '"')
                in_string = 0;
            continue;
        }
        switch (ch) {
        case '"':
            in_string = 1;
            svc_buf_printf(&b, "%c", ch);
            break;
        case '{':
        case '[':
            if (i + 1 < len && (compact[i + 1] == '}' || compact[i + 1] == ']')) {
                svc_buf_printf(&b, "%c%c", ch, compact[i + 1]);
                i++;
                break;
            }
            svc_buf_printf(&b, "%c", ch);
            indent_line(&b, ++depth);
            break;
        case '}':
        case ']':
            indent_line(&b, depth > 0 ? --depth : 0);
            svc_buf_printf(&b, "%c", ch);
            break;
        case ',':
            svc_buf_printf(&b, ",");
            indent_line(&b, depth);
            break;
        case ':': svc_buf_printf(&b, ": "); break;
        default: svc_buf_printf(&b, "%c", ch); break;
        }
    }
    svc_buf_printf(&b, "\n");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *out_len = b.len;
    return b.p;
}

/* svc_check.c — see svc_check.h. */
#include "svc_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void svc_check_fail(const char *what, int err, const char *file, int line)
{
    fprintf(stderr, "miaosha-server: %s:%d: %s failed%s%s\n", file, line, what, err ? ": " : "",
            err ? strerror(err) : "");
    abort();
}

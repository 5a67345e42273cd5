/* lg_thread.c — see lg_thread.h. */
#include "lg_thread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lg_pt_must(int rc, const char *what)
{
    if (rc == 0)
        return;
    char buf[128];
    /* the GNU strerror_r: returns the text, maybe not in buf */
    fprintf(stderr, "miaosha-load: %s: %s\n", what, strerror_r(rc, buf, sizeof buf));
    abort();
}

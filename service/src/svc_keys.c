/* svc_keys.c — see svc_keys.h. */
#include "svc_keys.h"

#include <stdio.h>

void svc_key(char *buf, const char *sku, const char *suffix)
{
    snprintf(buf, SVC_KEY_MAX, "miaosha:{%s}:%s", sku, suffix);
}

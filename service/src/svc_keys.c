/* svc_keys.c — see svc_keys.h. */
#include "svc_keys.h"

#include <stdio.h>

void svc_key(char *buf, const char *sku, const char *suffix)
{
    snprintf(buf, SVC_KEY_MAX, "miaosha:{%s}:%s", sku, suffix);
}

void svc_lock_key(char *buf, const char *sku, lc_mode mode)
{
    snprintf(buf, SVC_KEY_MAX, "miaosha:{%s}:lock:%s", sku, lc_mode_name(mode));
}

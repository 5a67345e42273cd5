/* svc_keys.c — see svc_keys.h. */
#include "svc_keys.h"

#include <stdio.h>

void svc_key(char *buf, const char *tag, const char *suffix)
{
    snprintf(buf, SVC_KEY_MAX, "miaosha:{%s}:%s", tag, suffix);
}

void svc_lock_key(char *buf, const char *tag, lc_mode mode)
{
    snprintf(buf, SVC_KEY_MAX, "miaosha:{%s}:lock:%s", tag, lc_mode_name(mode));
}

void svc_bucket_tag(char *tag, const char *sku, int b, int salt)
{
    if (salt > 0)
        snprintf(tag, SVC_TAG_MAX, "%s~%d.%d", sku, b, salt);
    else
        snprintf(tag, SVC_TAG_MAX, "%s~%d", sku, b);
}

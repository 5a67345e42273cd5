/* svc_mode.c — the purchase modes' names (svc_mode.h). */
#include "svc_mode.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Set once at start, before any thread reads it. */
static int redlock_offered;

void svc_mode_offer_redlock(int on)
{
    redlock_offered = on != 0;
}

int svc_mode_offered(svc_mode mode)
{
    const lc_mode_info *lock = svc_mode_lock(mode);
    return mode >= 0 && mode < SVC_MODE_COUNT &&
           (lock == NULL || !lock->needs_redlock_nodes || redlock_offered);
}

const char *svc_mode_name(svc_mode mode)
{
    if (svc_mode_is_lock(mode))
        return lc_mode_name((lc_mode)mode);
    if (mode == SVC_MODE_LUA)
        return "lua";
    return "?";
}

int svc_mode_parse(const char *name, svc_mode *out)
{
    lc_mode m;
    if (name == NULL)
        return -1;
    if (lc_mode_parse(name, &m) == 0) {
        if (!svc_mode_offered((svc_mode)m))
            return -1;
        *out = (svc_mode)m;
        return 0;
    }
    if (strcmp(name, "lua") == 0) {
        *out = SVC_MODE_LUA;
        return 0;
    }
    return -1;
}

static char list[128];
static pthread_once_t list_once = PTHREAD_ONCE_INIT;

static void list_init(void)
{
    size_t used = 0;
    for (svc_mode m = 0; m < SVC_MODE_COUNT && used < sizeof list; m++) {
        if (!svc_mode_offered(m))
            continue;
        int n = snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "",
                         svc_mode_name(m));
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

const char *svc_mode_list(void)
{
    (void)pthread_once(&list_once, list_init);
    return list;
}

/* svc_mode.h — the purchase modes of the service: the URL segment of
 * /miaosha/{mode}. The lock core's modes (lc_mode, same values and names)
 * plus the paths that take no lock at all, which the lock core knows
 * nothing about: SVC_MODE_LUA, one Lua script that checks and decrements
 * the stock atomically (svc_lua.c).
 *
 * svc_mode is a plain int, so an lc_mode converts to it and back without a
 * cast: a value below LC_MODE_COUNT IS that lc_mode, and only the purchase
 * route looks further. /stats and /metrics index their rows by svc_mode
 * (SVC_MODE_COUNT of them).
 */
#ifndef MIAOSHA_SVC_MODE_H
#define MIAOSHA_SVC_MODE_H

#include <lockcore.h>

typedef int svc_mode;

enum {
    SVC_MODE_LUA = LC_MODE_COUNT, /* atomic Lua script, no lock */
    SVC_MODE_COUNT
};

/* 1 when mode is one of the lock core's (a purchase through lc_acquire).
 * Any thread. */
static inline int svc_mode_is_lock(svc_mode mode)
{
    return mode >= 0 && mode < LC_MODE_COUNT;
}

/* What the lock core says of a lock mode (lc_mode_info): whether its
 * acquire is sent ahead, carries commands, holds a fixed lease, and the
 * like. NULL for a mode that takes no lock (lua). The service asks this
 * instead of comparing modes. Any thread. */
static inline const lc_mode_info *svc_mode_lock(svc_mode mode)
{
    return svc_mode_is_lock(mode) ? lc_mode_info_of((lc_mode)mode) : NULL;
}

/* 1 when the service offers the mode on /miaosha/{mode}: every lock mode
 * and lua, except redlock unless svc_mode_offer_redlock(1) was called
 * (redlock.nodes configured: its N lock masters). Any thread. */
int svc_mode_offered(svc_mode mode);

/* Offers redlock (1) or not (0, the default). Call once at start, before
 * any thread calls svc_mode_offered, svc_mode_parse or svc_mode_list. */
void svc_mode_offer_redlock(int on);

/* The mode's public name and URL segment: lc_mode_name for a lock mode,
 * "lua", "?" out of range. Static storage. Any thread. */
const char *svc_mode_name(svc_mode mode);

/* Parses a URL segment (exact, lower case). 0 with *out set, or -1 for an
 * unknown name. Any thread. */
int svc_mode_parse(const char *name, svc_mode *out);

/* The accepted names separated by ", " ("none, mutex, ..., lua"), for error
 * messages. Static storage. Any thread. */
const char *svc_mode_list(void);

#endif

/* svc_skuset.h — a fixed-size set of SKU names, each with an index that
 * never changes, for the per-SKU state a module keeps in an array of its
 * own (the local sold-out flags, the stock-bucket layouts).
 *
 * Why a set of its own: those tables are read on every purchase by every
 * worker thread, so a lookup takes no lock; a name is added once, under the
 * set's mutex, and published (with whatever the caller initialised for that
 * index) by one release store. Names are never removed: the set is as big
 * as the process's SKUs need, and a full set answers "no index", which the
 * callers treat as "not cached" (they read Redis instead).
 *
 * Threads: every function may be called from any thread.
 */
#ifndef MIAOSHA_SVC_SKUSET_H
#define MIAOSHA_SVC_SKUSET_H

#include <pthread.h>
#include <stdatomic.h>

#include "svc.h"

/* One place of a set; the set's owner provides the array (static storage,
 * zeroed). */
typedef struct svc_skuset_slot {
    _Atomic int ready; /* 1 once sku is written and published */
    char sku[SVC_SKU_MAX + 1];
} svc_skuset_slot;

typedef struct svc_skuset {
    svc_skuset_slot *slot; /* cap places */
    int cap;
    pthread_mutex_t mu; /* serialises adds */
} svc_skuset;

/* A set over an array of n places: static svc_skuset s = SVC_SKUSET_INIT(places, n). */
#define SVC_SKUSET_INIT(places, n)                                                                 \
    {                                                                                              \
        (places), (n), PTHREAD_MUTEX_INITIALIZER                                                   \
    }

/* The index (0..cap-1) of sku in s, or -1 when it was never added. Takes
 * no lock. */
int svc_skuset_find(svc_skuset *s, const char *sku);

/* The index of sku, adding it when it is not there yet: init(index, arg),
 * when not NULL, runs once for a new index, under the set's mutex and
 * before the index is published (so a reader that finds the name sees what
 * init wrote). -1 when the set is full or sku is longer than SVC_SKU_MAX. */
int svc_skuset_add(svc_skuset *s, const char *sku, void (*init)(int index, void *arg), void *arg);

/* The name at index, or NULL while that place holds none. Takes no lock. */
const char *svc_skuset_name(svc_skuset *s, int index);

#endif

/* svc_skuset.c — a fixed-size set of SKU names with lock-free lookups
 * (svc_skuset.h): open addressing, linear probing, FNV-1a. */
#include "svc_skuset.h"

#include <string.h>

#include "svc_check.h"

static unsigned fnv(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

int svc_skuset_find(svc_skuset *s, const char *sku)
{
    unsigned i = fnv(sku) % (unsigned)s->cap;
    for (int n = 0; n < s->cap; n++, i = (i + 1) % (unsigned)s->cap) {
        /* places fill in probe order and never empty again: the first
         * unpublished one ends the probe */
        if (!atomic_load_explicit(&s->slot[i].ready, memory_order_acquire))
            return -1;
        if (strcmp(s->slot[i].sku, sku) == 0)
            return (int)i;
    }
    return -1;
}

int svc_skuset_add(svc_skuset *s, const char *sku, void (*init)(int index, void *arg), void *arg)
{
    int found = svc_skuset_find(s, sku);
    if (found >= 0 || strlen(sku) > SVC_SKU_MAX)
        return found;
    SVC_PT(pthread_mutex_lock(&s->mu));
    unsigned i = fnv(sku) % (unsigned)s->cap;
    for (int n = 0; n < s->cap; n++, i = (i + 1) % (unsigned)s->cap) {
        svc_skuset_slot *p = &s->slot[i];
        if (!atomic_load_explicit(&p->ready, memory_order_relaxed)) {
            strcpy(p->sku, sku);
            if (init != NULL)
                init((int)i, arg);
            atomic_store_explicit(&p->ready, 1, memory_order_release);
            found = (int)i;
            break;
        }
        if (strcmp(p->sku, sku) == 0) {
            found = (int)i; /* added by another thread meanwhile */
            break;
        }
    }
    SVC_PT(pthread_mutex_unlock(&s->mu));
    return found;
}

const char *svc_skuset_name(svc_skuset *s, int index)
{
    if (index < 0 || index >= s->cap ||
        !atomic_load_explicit(&s->slot[index].ready, memory_order_acquire))
        return NULL;
    return s->slot[index].sku;
}

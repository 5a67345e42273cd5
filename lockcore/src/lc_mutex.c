/* lc_mutex.c — the `mutex` mode: an in-process lock per key name.
 *
 * The seckill walkthrough's `synchronized` step (docs/locks.md, section 1): correct inside one
 * process, invisible to every other process, which is the flaw the multi-instance scenario shows. A
 * held flag under the table's mutex plus a condition variable per entry
 * gives a timed wait (wait_ms) and lets any thread release, which a pthread
 * mutex would not. Not reentrant: an owner that asks again waits for itself.
 * Entries are refcounted by holder and waiters and freed when unused, so the
 * table does not grow with the number of SKUs ever seen.
 */
#include "lc_internal.h"
#include "lc_util.h"

#include <stdlib.h>
#include <string.h>

struct lc_mutex_entry {
    char *key;
    bool held;
    int refs; /* holder + waiters */
    pthread_cond_t cv;
    struct lc_mutex_entry *next;
};

static unsigned bucket_of(const char *key)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % 64;
}

void lc__mutex_table_init(lc_mutex_table *t)
{
    LC_PTHREAD(pthread_mutex_init(&t->mu, NULL));
    memset(t->buckets, 0, sizeof t->buckets);
}

void lc__mutex_table_destroy(lc_mutex_table *t)
{
    for (int i = 0; i < 64; i++) {
        lc_mutex_entry *e = t->buckets[i];
        while (e) {
            lc_mutex_entry *n = e->next;
            LC_PTHREAD(pthread_cond_destroy(&e->cv));
            free(e->key);
            free(e);
            e = n;
        }
    }
    LC_PTHREAD(pthread_mutex_destroy(&t->mu));
}

static void unref(lc_mutex_table *t, lc_mutex_entry *e)
{
    LC_ASSERT(e->refs > 0);
    if (--e->refs > 0)
        return;
    lc_mutex_entry **pp = &t->buckets[bucket_of(e->key)];
    while (*pp && *pp != e)
        pp = &(*pp)->next;
    LC_ASSERT(*pp == e);
    *pp = e->next;
    LC_PTHREAD(pthread_cond_destroy(&e->cv));
    free(e->key);
    free(e);
}

lc_status lc__mutex_acquire(lc_mutex_table *t, const char *key, int64_t wait_ms,
                            const atomic_int *cancel, lc_mutex_entry **out)
{
    int64_t deadline = lc_now_ms() + wait_ms;
    LC_PTHREAD(pthread_mutex_lock(&t->mu));
    unsigned b = bucket_of(key);
    lc_mutex_entry *e = t->buckets[b];
    while (e && strcmp(e->key, key) != 0)
        e = e->next;
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e || !(e->key = strdup(key))) {
            free(e);
            LC_PTHREAD(pthread_mutex_unlock(&t->mu));
            return LC_NOMEM;
        }
        lc__cond_init(&e->cv);
        e->next = t->buckets[b];
        t->buckets[b] = e;
    }
    e->refs++;
    while (e->held) {
        int64_t now = lc_now_ms();
        if (now >= deadline || lc__canceled(cancel)) {
            unref(t, e);
            LC_PTHREAD(pthread_mutex_unlock(&t->mu));
            return now >= deadline ? LC_BUSY : LC_CANCELED;
        }
        lc__cond_wait_until(&e->cv, &t->mu, lc__cancel_wake(cancel, now, deadline));
    }
    e->held = true;
    LC_PTHREAD(pthread_mutex_unlock(&t->mu));
    *out = e;
    return LC_OK;
}

void lc__mutex_release(lc_mutex_table *t, lc_mutex_entry *e)
{
    LC_PTHREAD(pthread_mutex_lock(&t->mu));
    LC_ASSERT(e->held); /* only its holder releases it */
    e->held = false;
    LC_PTHREAD(pthread_cond_signal(&e->cv));
    unref(t, e);
    LC_PTHREAD(pthread_mutex_unlock(&t->mu));
}

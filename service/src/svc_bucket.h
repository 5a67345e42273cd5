/* svc_bucket.h — stock buckets: a hot SKU's stock split into independent
 * sub-stocks, each with its own lock (lock striping, as the segments of
 * Java's ConcurrentHashMap) and, on a Redis Cluster, its own slot.
 *
 * PUT /stock/{sku}?buckets=K (svc_stock.c) splits the stock into K buckets
 * (the remainder spread one by one: svc_layout_share) and writes the SKU's
 * layout record, miaosha:{sku}:layout, "<K> <reset id> <salt>,<salt>,...".
 * Bucket b is a complete sub-stock under the tag svc_bucket_tag(sku, b,
 * salt[b]) — stock, initial, sold, orders, buyers, epoch, lock keys, fence
 * — so the one critical section (svc_section.c) and the lua script run on
 * a bucket exactly as on a SKU. Without the record (K = 1) the SKU keeps
 * its own keys, as it always had.
 *
 * A purchase starts in a random bucket among those not known to be empty
 * (hopping past one whose lock is held, and polling them all when every
 * one is; first among those this instance's own purchases do not hold:
 * svc_tries.c) and, when that one is sold out, tries the next
 * one not known empty (svc_bucket_next). Each instance remembers the buckets it
 * found empty: between two resets a bucket's stock only goes down (in every
 * mode that does not oversell), so the memory is safe until the reset,
 * which every instance learns from the reset notice (svc_soldout.h: the
 * message names the new layout). The SKU is sold out only when every bucket
 * is, and only after the layout record was read again (svc_bucket_recheck:
 * a reset whose notice has not arrived yet cannot make an instance give up
 * on stock it does not know of). Hashing a buyer to one bucket instead
 * would strand stock: the buyers hashed to an empty bucket are refused
 * while another still holds units.
 *
 * One buy per user (purchase.limit_per_user): a user's orders may lie in
 * any bucket, so the count is a reservation in the user's home bucket
 * (svc_bucket_reserve: check and increment in one script) taken before the
 * purchase and given back when nothing was sold. A reset clears the
 * reservations, so the two are tied to one reset: a bucket's epoch is the
 * id of the reset that wrote it (svc_stock.c), the reservation is taken
 * only where it is the layout's id, and the sale only where its bucket's
 * epoch is the reservation's (the section's read, the lua script).
 *
 * Threads: every function may be called from any thread. The layout cache
 * is a bounded table (SVC_BUCKET_SKUS SKUs; later ones are read from Redis
 * every time) with a mutex per SKU; what a purchase learns is kept only for
 * the generation it read under (svc_bucket_layout's *gen), which every
 * reset seen bumps. Nothing here exits; failures are returned.
 */
#ifndef MIAOSHA_SVC_BUCKET_H
#define MIAOSHA_SVC_BUCKET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "svc.h"
#include "svc_buf.h"

#define SVC_BUCKET_SKUS 1024 /* SKUs whose layout an instance keeps */
/* A layout record: "64 <uuid> " and 64 salts of up to 3 digits with commas. */
#define SVC_LAYOUT_MAX (4 + SVC_UUID_LEN + SVC_BUCKETS_MAX * 4 + 8)

/* A SKU's layout. */
typedef struct svc_layout {
    int n;                         /* buckets, 1..SVC_BUCKETS_MAX; 1: the SKU's own keys */
    uint8_t salt[SVC_BUCKETS_MAX]; /* bucket b's tag suffix (svc_bucket_tag) */
    char id[SVC_UUID_LEN];         /* the reset that wrote the record; "" when n is 1 */
} svc_layout;

/* ---- the layout itself (pure) ---- */

/* Which master serves a hash slot, for the placement: a small number
 * naming it (0..SVC_BUCKETS_MAX-1, the same number for the same master
 * within one placement), or -1 when none is known. arg is the
 * placement's. */
typedef int (*svc_slot_owner_fn)(void *arg, int slot);

/* The placement: picks each bucket's salt so that the K buckets' tags hash
 * to K distinct slots (lc_key_slot) and, given owner (a Redis Cluster's
 * slot map), land as evenly as the map allows over its masters: bucket b
 * takes the smallest salt whose slot is new and whose master holds the
 * fewest of buckets 0..b-1 (a slot with no known master only when no
 * other is left). Without owner (NULL: one Redis, where distinct slots are
 * all there is to choose) the smallest salt whose slot is new. Bucket b's
 * salt depends only on buckets 0..b-1 and the map, so two layouts placed
 * on one map share their first buckets' tags. n 1..SVC_BUCKETS_MAX;
 * out->id is left "". Pure but for owner's calls. */
void svc_layout_place(const char *sku, int n, svc_slot_owner_fn owner, void *arg, svc_layout *out);
/* Bucket b's share of stock split over n buckets: stock / n, plus one for
 * the first stock % n buckets. */
long long svc_layout_share(long long stock, int n, int b);
/* The record of l (n > 1) into buf (len bytes, SVC_LAYOUT_MAX suffice):
 * 0, or -1 when it does not fit. */
int svc_layout_format(const svc_layout *l, char *buf, size_t len);
/* Parses a record (NUL-terminated): 0 with *out set, or -1 when v is not
 * exactly "<n> <id> <salt>,..." with n in 2..SVC_BUCKETS_MAX, an id of
 * 1..36 characters [0-9a-f-] and n salts in 0..255 (out untouched). */
int svc_layout_parse(const char *v, svc_layout *out);
/* The tag of bucket b of sku under l into tag (SVC_TAG_MAX bytes): the SKU
 * itself when l->n is 1. */
void svc_layout_tag(const svc_layout *l, const char *sku, int b, char *tag);
/* The bucket to try: with after < 0 the start, a bucket drawn uniformly
 * with r among those of 0..n-1 not in skip (a bit per bucket); else the
 * first after `after`, cyclically, not in skip. -1 when every bucket is in
 * skip. */
int svc_bucket_next(int n, uint64_t skip, int after, uint64_t r);
/* A random number for svc_bucket_next's start: the calling thread's own
 * xorshift generator, seeded from the clock and the thread. Any thread. */
uint64_t svc_bucket_rand(void);
/* A user's home bucket of n: where their reservation lives. */
int svc_bucket_home(const char *user, int n);

/* The details of a purchase's 409 stock_reset that buckets add: a reset
 * this instance had not learnt when the purchase began (its layout was
 * stale), and one that came between the reservation and the sale. */
#define SVC_BUCKET_RESET_UNLEARNT                                                                  \
    "the SKU's stock was reset (PUT /stock) since this instance learnt its buckets; nothing was "  \
    "written"
/* Every bucket was tried, some had no stock key, and the layout record
 * still names them: a reset is deleting them right now (on a Redis Cluster
 * a reset is one transaction per bucket and writes the record last), or
 * one was cut short. Not sold out: the stock is being replaced. */
#define SVC_BUCKET_RESET_UNDER_WAY                                                                 \
    "a reset of the SKU's stock (PUT /stock) is under way: a bucket of its layout is gone; "       \
    "nothing was written"
#define SVC_BUCKET_RESET_RESERVED                                                                  \
    "the SKU's stock was reset (PUT /stock) since this purchase's reservation; nothing was "       \
    "written"

/* ---- what an instance knows ---- */

/* sku's layout: the cached one, or the record read from Redis on conn
 * (GET miaosha:{sku}:layout: one round trip, the first purchase of a SKU
 * after the start or after a notice that did not name the layout) and
 * kept. *gen: the generation it holds for, for svc_bucket_empty and
 * svc_bucket_mark_empty. 0; else the reason in err (len bytes) and -1 when
 * Redis could not be reached (no reply), -2 when it answered an error or
 * the record is not one PUT /stock wrote. */
int svc_bucket_layout(lc_conn *conn, const char *sku, svc_layout *out, uint64_t *gen, char *err,
                      size_t len);
/* Memory only: 1 with *out set when sku's layout is cached, else 0. */
int svc_bucket_known(const char *sku, svc_layout *out);
/* A reset of sku was seen (its notice, or this instance's own PUT): its
 * new layout is l, or unknown (NULL: read again when next needed). Bumps
 * the generation: the empty buckets are forgotten, and marks and reads of
 * earlier generations are ignored from now on. */
void svc_bucket_learn(const char *sku, const svc_layout *l);
/* Every SKU's layout and empty buckets forgotten (the reset notices may
 * have been lost: the subscription was down). */
void svc_bucket_forget_all(void);
/* The buckets of sku known to be empty under gen (a bit per bucket); 0
 * when gen is not the current generation. */
uint64_t svc_bucket_empty(const char *sku, uint64_t gen);
/* A purchase that took gen before its read found bucket b of sku sold
 * out: remembered, unless a reset came since. */
void svc_bucket_mark_empty(const char *sku, uint64_t gen, int b);
/* Every bucket of sku's layout *l is known empty: reads the layout record
 * again (one round trip). 0 when it is still *l (the SKU is sold out); 1
 * when a reset changed it (*l and *gen are the new ones, the cache too);
 * -1 or -2 with the reason in err when it could not be read (as
 * svc_bucket_layout). */
int svc_bucket_recheck(lc_conn *conn, const char *sku, svc_layout *l, uint64_t *gen, char *err,
                       size_t len);

/* A purchase tried every bucket of sku's layout *l and none sold (gone:
 * some had no stock key): how it ends, after the layout record is read
 * again (svc_bucket_recheck: one round trip). 0: sold out (detail ""); 1:
 * 409 stock_reset with its detail in detail (len bytes) — a reset this
 * instance had not learnt (*l, *gen and the cache are then the new layout:
 * SVC_BUCKET_RESET_UNLEARNT), or, with gone and the record unchanged, a
 * reset under way (SVC_BUCKET_RESET_UNDER_WAY); -1 (no reply) or -2 (an
 * error reply, a record PUT /stock did not write) with the reason in
 * detail. Any thread, on the caller's conn. */
int svc_bucket_search_end(lc_conn *conn, const char *sku, svc_layout *l, uint64_t *gen, bool gone,
                          char *detail, size_t len);
/* svc_bucket_search_end for a purchase of sku under its own keys (l->n is
 * 1) that found its stock sold out: a reset into buckets keeps the SKU's
 * own stock at 0 (svc_stock.c), which reads the same. true when such a
 * reset came that this instance had not learnt (*l, *gen and the cache are
 * the new layout; the purchase answers 409 stock_reset with
 * SVC_BUCKET_RESET_UNLEARNT); false when the SKU is still unsplit, or the
 * record could not be read (the sold-out answer stands: it is what the
 * read found). */
bool svc_bucket_unsplit_reset(lc_conn *conn, const char *sku, svc_layout *l, uint64_t *gen);

/* ---- this instance's own holds (a hint, never a lock) ----
 *
 * Several workers of one instance buying the same SKU would otherwise hop
 * onto buckets whose lock another of them holds: a try that certainly
 * fails, a round trip each. So a purchase publishes its try of a bucket's
 * lock (a claim, until the try's reply) and then its hold while it has
 * it, and a polling buyer (setnx, token, fenced: a mode
 * with a fixed lease, svc_bucket_hint_mode) tries the buckets held here
 * last, and when every bucket with stock is held here waits for one of
 * those holds to end instead of polling them. A hold is published with
 * its lease's certain end and counts only until then: a lease that ran
 * out is tried at once, as another instance's buyer would (the lesson of
 * an expired lease is unchanged). Other instances' holds are found by
 * trying, as before. Memory only; any thread. */

/* Whether mode's holds are published and used (fixed lease and polling:
 * setnx, token, fenced). */
bool svc_bucket_hint_mode(lc_mode mode);
/* A purchase took (held true) or released (held false) the lock of bucket
 * b of sku in mode; until_us: when that lease certainly ends (lc_now_us
 * µs, > 0), the same value for both calls. A release clears its own mark
 * and wakes one purchase waiting in svc_bucket_wait_here; a later
 * holder's mark is left alone, unless this release came after its own
 * lease's end (setnx's DEL may then have deleted that holder's lock). A
 * reset seen (svc_bucket_learn) clears every mark of the SKU. A mode that
 * is not hinted, a SKU not in the table or b out of range: nothing. */
void svc_bucket_hold(const char *sku, lc_mode mode, int b, bool held, int64_t until_us);
/* A purchase is about to try bucket b of sku's mode lock: marked as held
 * here until until_us (its acquisition's replies' latest arrival), unless
 * another claim or hold of this instance is marked there. true when
 * marked: a taken lock's svc_bucket_hold replaces it, else end it with
 * svc_bucket_unclaim. */
bool svc_bucket_claim(const char *sku, lc_mode mode, int b, int64_t until_us);
/* The claim of svc_bucket_claim(sku, mode, b, until_us) ended without the
 * lock: cleared while still there, and one waiter woken. */
void svc_bucket_unclaim(const char *sku, lc_mode mode, int b, int64_t until_us);
/* The buckets of 0..n-1 of sku whose mode lock a purchase of this
 * instance holds or tries (claims) at now_us (a bit each). since (NULL:
 * not wanted): the count of marks ended so far, read before the marks, for
 * svc_bucket_wait_here; first_end_us (NULL: not wanted): the earliest end
 * among the marks found, 0 when none. */
uint64_t svc_bucket_held_here(const char *sku, lc_mode mode, int n, int64_t now_us, unsigned *since,
                              int64_t *first_end_us);
/* Waits until a mark of sku ends here after `since` was read (a release,
 * svc_bucket_unclaim, a reset seen), or until_us (lc_now_us µs) passes, or
 * cancel (NULL: none) is raised; in slices of LC_CANCEL_LATENCY_MS ms.
 * Returns 0, or -1 when canceled. */
int svc_bucket_wait_here(const char *sku, unsigned since, int64_t until_us,
                         const atomic_int *cancel);

/* ---- one buy per user ---- */

/* A reservation of one purchase in the user's home bucket. */
typedef struct svc_reservation {
    bool held;                /* taken and not given back */
    int home;                 /* the home bucket */
    char epoch[SVC_UUID_LEN]; /* the home bucket's epoch when taken: the id
                                 of the reset whose layout it follows */
} svc_reservation;

/* Reserves one purchase of sku (layout l, n > 1) for user in its home
 * bucket, atomically: only while the user's reservations are below limit
 * (purchase.limit_per_user) and the home bucket was written by l's own
 * reset (its epoch is l->id). One round trip (scripts/reserve.lua).
 * Returns 1 (reserved: rv->held, rv->epoch = l->id: the sale must find
 * the same epoch in its bucket), 0 when the user is at the limit (*held
 * the reservations counted; nothing written; the refusal's detail, for
 * the 409 limit_reached, in err), 2 when the home bucket belongs to
 * another reset (nothing written; the 409 stock_reset's detail in err):
 * l is stale — the layout record, read again (one more round trip),
 * replaces the cached layout — or a reset is rewriting the buckets, or an
 * earlier miaosha wrote them (the record unchanged, the cache kept), -1 with the reason in err (len
 * bytes): Redis unreachable or an error (nothing reserved, or the outcome unknown: the reservation
 * then stays until the next reset). */
int svc_bucket_reserve(lc_conn *conn, const char *sku, const svc_layout *l, const char *user,
                       long long limit, svc_reservation *rv, long long *held, char *err,
                       size_t len);
/* Gives rv back (a purchase that sold nothing): one round trip, and only
 * while the home bucket's epoch is rv's (a reset cleared the reservations
 * since: nothing to give back). A failure is logged: the reservation stays
 * until the next reset, and the user is refused until then. rv->held is
 * false afterwards. */
void svc_bucket_unreserve(lc_conn *conn, const char *sku, const svc_layout *l, const char *user,
                          svc_reservation *rv);

/* ---- counters ---- */

/* One purchase of sku, split into n buckets, ended: its bucket (-1: none
 * was tried), whether it sold, how many empty buckets it probed and how
 * many locked ones it hopped past (each hop is also one of lockcore's
 * lc_client_stats busy acquisitions: a try with a wait of 0). Any thread;
 * atomic counters, but a SKU seen for the first time (or past the first 64)
 * takes a mutex. */
void svc_bucket_count(const char *sku, int n, int b, bool sold, int probes, int hops);
/* One layout record read again at the end of a sale (svc_bucket_recheck). */
void svc_bucket_count_recheck(void);
/* Appends ,"buckets":{"probes","hops","rechecks","skus":{<sku>:{"sold":
 * [...],"probes","hops"}}} for GET /stats: the counters since the start,
 * for the first 64 SKUs with a bucketed purchase. */
void svc_bucket_stats_json(svc_buf *b);
/* The totals since the start, for GET /metrics: empty buckets probed,
 * locked buckets hopped past, layout records read again. Any thread
 * (relaxed atomic reads: each total exact, the three not one snapshot). */
void svc_bucket_totals(uint64_t *probes, uint64_t *hops, uint64_t *rechecks);

#endif

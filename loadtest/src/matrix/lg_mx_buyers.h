/* lg_mx_buyers.h — the matrix's two buyer scenarios (lg_matrix.c runs
 * them, judges them and prints them as any other cell):
 *
 *   dup-user  one buy per user: B buyers each click 5 times at once on an
 *             instance with purchase.limit_per_user=1 (work_ms 10 widens
 *             the section). "one-each" when every buyer holds exactly one
 *             order (the audit's duplicate_buyers 0), "duplicates" when
 *             some hold more.
 *   retry     the ambiguous timeout: each buyer's first request (work_ms
 *             200) is given up by the client after 50 ms — its connection
 *             stays open, as a proxy's upstream connection would, so the
 *             server cannot tell — and retried. With an Idempotency-Key
 *             (the retry repeats it, polling past 409 in_progress) "once"
 *             when every buyer holds exactly one order, "twice" when some
 *             hold two; the same run without keys is made too and must
 *             show the double orders (cell.doubles).
 *
 * Private to the matrix room. Runs on the matrix's main thread (it starts
 * and joins its own buyer threads).
 */
#ifndef MIAOSHA_LG_MX_BUYERS_H
#define MIAOSHA_LG_MX_BUYERS_H

#include "lg_mx_proc.h"

/* One dup-user cell of mode m on instance in (started with
 * purchase.limit_per_user=1); buyers buyers. Fills c; 0, or -1 with a
 * reason in err (the cell could not run). */
int lg_mx_dup_user(mctx *x, lg_cell *c, lg_mode m, const instance *in, int buyers, char *err,
                   size_t errlen);
/* One retry cell of mode m on instance in; buyers buyers. Fills c
 * (c->doubles: buyers holding two orders in the run without keys); 0, or
 * -1 with a reason in err. */
int lg_mx_retry(mctx *x, lg_cell *c, lg_mode m, const instance *in, int buyers, char *err,
                size_t errlen);

#endif

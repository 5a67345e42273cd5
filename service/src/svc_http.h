/* svc_http.h — the HTTP daemon: start, stop and the two completion
 * callbacks main.c gives the worker pools. Routing, validation and the
 * threading model: the top of svc_http.c. */
#ifndef MIAOSHA_SVC_HTTP_H
#define MIAOSHA_SVC_HTTP_H

#include <stddef.h>

#include "svc.h"
#include "svc_pool.h"
#include "svc_reply.h"

/* Starts the daemon: purchases go to the purchases pool, stock, audit and
 * orders to admin. s must outlive the daemon (every request points to it);
 * client is used for /metrics' lock statistics. Main thread. Returns 0, or
 * -1 with a message in err (errlen bytes). */
int svc_http_start(const cfg_config *s, lc_client *client, svc_pool *purchases, svc_pool *admin,
                   char *err, size_t errlen);
/* The bound port (useful with port 0), or -1. */
int svc_http_port(void);
/* Once svc_shutdown_begin has run, the daemon stops accepting (a new
 * connection is closed as soon as it is accepted; the listen socket stays
 * open until svc_http_stop), answers new Redis-backed requests on open
 * connections 503 shutting_down and asks every reply to close its
 * connection. */

/* Requests handed to workers whose completion MHD has not reported yet.
 * Any thread. */
long svc_http_pending(void);
/* Closes every connection and stops the daemon's threads, once no worker
 * is still inside its completion callback's resume (microseconds). Main
 * thread, after the pending requests are done (or given up on). */
void svc_http_stop(void);

/* The pools' completion callbacks (svc_pool_done_fn): r's reply is ready,
 * resume its connection. The purchase pool's also takes r off the
 * in-flight purchases gauge. Worker threads. */
void svc_http_job_done(svc_req *r);
void svc_http_purchase_done(svc_req *r);

#endif

/* svc_admin.h — who may change state: the admin bearer token (the
 * configuration's admin_token). PUT /stock/{sku} needs it, and so do a
 * purchase with ?fault= (ending the process is as privileged as resetting
 * the stock) and the stepped purchases' routes (/steps, ?step=1: a
 * stepped purchase holds its lock between steps); with no token configured every request is
 * allowed, as on a loopback-only listener (listen.allow_open keeps an open listener from running
 * without one). The scheme is RFC 6750's "Authorization: Bearer <token>". */
#ifndef MIAOSHA_SVC_ADMIN_H
#define MIAOSHA_SVC_ADMIN_H

#include "svc_reply.h"

/* The verdict on an Authorization header value against the configured
 * token. admin_token: NULL or "" = none configured; authorization: the
 * header's value, NULL when the request has none.
 * Returns
 *   0    allowed: no token configured, or "Bearer <token>" — the scheme's
 *        case ignored, any spaces between it and the token skipped, the
 *        rest equal to admin_token byte for byte (compared in time that
 *        depends on admin_token's length only, not on where they differ);
 *   401  no credentials: the header is missing or not of the Bearer scheme,
 *        or "Bearer" with nothing but spaces after it;
 *   403  Bearer with any other token.
 * Reads its arguments only; any thread. */
int svc_admin_verdict(const char *admin_token, const char *authorization);

/* The same for r's request, under r->s->admin_token: 0 when allowed; else
 * stores r's reply — 401 unauthorized ("Authorization: Bearer <admin token>
 * required"; the daemon adds "WWW-Authenticate: Bearer") or 403 forbidden
 * ("wrong admin token") — and returns -1. Reads the header through
 * libmicrohttpd: only on the HTTP thread that owns r's connection. */
int svc_admin_check(svc_req *r);

#endif

/* svc_admin.c — the admin bearer token (svc_admin.h). */
#include "svc_admin.h"

#include <string.h>
#include <strings.h>

int svc_admin_verdict(const char *admin_token, const char *authorization)
{
    if (admin_token == NULL || admin_token[0] == '\0')
        return 0;
    const char *h = authorization;
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
        return 401;
    h += 7;
    while (*h == ' ')
        h++;
    if (*h == '\0') /* the scheme and no token: no credentials either */
        return 401;
    /* Over the configured token's length whatever the guess, so the time
     * taken does not tell how much of a guess was right. */
    size_t n = strlen(admin_token), m = strlen(h);
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(admin_token[i] ^ (i < m ? h[i] : 0));
    return diff ? 403 : 0;
}

int svc_admin_check(svc_req *r)
{
    const char *h = NULL;
    if (r->s->admin_token[0] != '\0')
        h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    int verdict = svc_admin_verdict(r->s->admin_token, h);
    if (verdict == 401)
        svc_reply_error(r, 401, "unauthorized", "Authorization: Bearer <admin token> required",
                        NULL);
    else if (verdict != 0)
        svc_reply_error(r, 403, "forbidden", "wrong admin token", NULL);
    return verdict == 0 ? 0 : -1;
}

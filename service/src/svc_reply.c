/* svc_reply.c — storing a request's reply (see svc_reply.h). */
#include "svc_reply.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

cJSON *svc_json_add_int(cJSON *o, const char *key, long long v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", v);
    return cJSON_AddRawToObject(o, key, buf);
}

int svc_json_add_item(cJSON *o, const char *key, cJSON *item)
{
    if (item == NULL)
        return 0;
    if (o != NULL && (key ? cJSON_AddItemToObject(o, key, item) : cJSON_AddItemToArray(o, item)))
        return 1;
    cJSON_Delete(item);
    return 0;
}

void svc_reply_json(svc_req *r, unsigned status, cJSON *obj)
{
    char *txt = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    free(r->resp);
    r->resp = txt;
    r->resp_len = txt ? strlen(txt) : 0;
    r->status = txt ? status : 503;
}

void svc_reply_text(svc_req *r, unsigned status, char *body, size_t len, const char *ctype)
{
    free(r->resp);
    r->resp = body;
    r->resp_len = len;
    r->status = body ? status : 503;
    r->ctype = body ? ctype : NULL;
}

void svc_reply_error(svc_req *r, unsigned status, const char *error, const char *detail,
                     cJSON *extra)
{
    cJSON *o = cJSON_CreateObject();
    if (o != NULL) {
        cJSON_AddBoolToObject(o, "ok", 0);
        cJSON_AddStringToObject(o, "error", error);
        if (detail != NULL && detail[0] != '\0')
            cJSON_AddStringToObject(o, "detail", detail);
        if (extra != NULL) {
            cJSON *it = extra->child;
            while (it != NULL) {
                cJSON *next = it->next;
                (void)svc_json_add_item(o, it->string, cJSON_DetachItemViaPointer(extra, it));
                it = next;
            }
        }
    }
    cJSON_Delete(extra);
    svc_reply_json(r, status, o);
}

int svc_client_gone(const svc_req *r)
{
    char c;
    if (r->client_fd < 0)
        return 0;
    ssize_t n = recv(r->client_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return 1;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

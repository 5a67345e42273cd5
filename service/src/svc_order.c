/* svc_order.c — a purchase's reply and order record (svc_order.h). */
#include "svc_order.h"

#include <stdlib.h>
#include <string.h>

#include "svc_clock.h"

void svc_order_init(svc_order *o, const svc_req *r)
{
    memset(o, 0, sizeof *o);
    o->r = r;
    o->busy_wait_ms = -1;
    o->bucket = -1;
}

char *svc_order_reply(const svc_order *o, purchase_result res)
{
    const svc_req *r = o->r;
    unsigned status = svc_result[res].status;
    const char *error = svc_result[res].error;
    cJSON *j = cJSON_CreateObject();
    if (j == NULL)
        return NULL;
    cJSON_AddBoolToObject(j, "ok", status == 200);
    if (error != NULL) {
        cJSON_AddStringToObject(j, "error", error);
        if (o->detail[0])
            cJSON_AddStringToObject(j, "detail", o->detail);
    }
    cJSON_AddStringToObject(j, "mode", svc_mode_name(r->mode));
    cJSON_AddBoolToObject(j, "pipeline", o->pipeline);
    cJSON_AddStringToObject(j, "sku", r->sku);
    if (o->order_id[0])
        cJSON_AddStringToObject(j, "order_id", o->order_id);
    if (o->has_stock_left)
        svc_json_add_int(j, "stock_left", o->stock_left);
    if (o->lock_fields) {
        svc_json_add_int(j, "lock_wait_ms", (long long)o->lock_wait_ms);
        cJSON_AddBoolToObject(j, "lock_lost", o->lock_lost);
        cJSON_AddBoolToObject(j, "deleted_other_lock", o->deleted_other_lock);
        if (o->fence > 0)
            svc_json_add_int(j, "fence", (long long)o->fence);
    }
    if (o->busy_wait_ms >= 0)
        svc_json_add_int(j, "wait_ms", (long long)o->busy_wait_ms);
    if (o->bucket >= 0)
        svc_json_add_int(j, "bucket", o->bucket);
    cJSON_AddStringToObject(j, "instance", r->s->instance_id);
    char *txt = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return txt;
}

char *svc_order_record(const svc_order *o, long long stock_before, bool open_end)
{
    const svc_req *r = o->r;
    cJSON *j = cJSON_CreateObject();
    if (j == NULL)
        return NULL;
    cJSON_AddStringToObject(j, "order_id", o->order_id);
    cJSON_AddStringToObject(j, "sku", r->sku);
    if (r->p.seen & SVC_P_USER)
        cJSON_AddStringToObject(j, "user", r->p.user);
    else
        cJSON_AddNullToObject(j, "user");
    cJSON_AddStringToObject(j, "mode", svc_mode_name(r->mode));
    cJSON_AddStringToObject(j, "instance", r->s->instance_id);
    /* Their difference is the purchase's time in the service: queue, lock
     * wait and section. */
    int64_t now_ms = svc_wall_ms();
    svc_json_add_int(j, "received_ms", (long long)(now_ms - (lc_now_us() - r->t0_us) / 1000));
    svc_json_add_int(j, "ts_ms", (long long)now_ms);
    svc_json_add_int(j, "lock_wait_ms", (long long)o->lock_wait_ms);
    if (!open_end) {
        svc_json_add_int(j, "stock_before", stock_before);
        if (o->fence > 0)
            svc_json_add_int(j, "fence", (long long)o->fence);
    }
    char *txt = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (txt == NULL || !open_end)
        return txt;
    static const char tail[] = ",\"stock_before\":";
    size_t n = strlen(txt); /* ends with '}' */
    char *head = realloc(txt, n + sizeof tail);
    if (head == NULL) {
        free(txt);
        return NULL;
    }
    memcpy(head + n - 1, tail, sizeof tail);
    return head;
}

/* svc_params.h — validation of query parameters and path segments. Every
 * route names the parameters it accepts; anything else is a 400 that names
 * the parameter. */
#ifndef MIAOSHA_SVC_PARAMS_H
#define MIAOSHA_SVC_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "svc.h"

enum {
    SVC_P_SKU = 1u << 0,
    SVC_P_USER = 1u << 1,
    SVC_P_WORK_MS = 1u << 2,
    SVC_P_LEASE_MS = 1u << 3,
    SVC_P_WAIT_MS = 1u << 4,
    SVC_P_REENTER = 1u << 5,
    SVC_P_FAULT = 1u << 6,
    SVC_P_STOCK = 1u << 7,
    SVC_P_OFFSET = 1u << 8,
    SVC_P_LIMIT = 1u << 9,
};

#define SVC_P_PURCHASE (SVC_P_SKU | SVC_P_USER | SVC_P_WORK_MS | SVC_P_LEASE_MS | \
                        SVC_P_WAIT_MS | SVC_P_REENTER | SVC_P_FAULT)

/* Bounds (inclusive); work_ms, lease_ms, wait_ms and reenter are capped by
 * the configuration (purchase.max_work_ms, lock.max_lease_ms,
 * lock.max_wait_ms, purchase.max_reenter). */
#define SVC_MAX_ARGS 32  /* query parameters per request */
#define SVC_STOCK_MAX 1000000000LL
#define SVC_OFFSET_MAX 1000000000LL
#define SVC_LIMIT_MAX 1000
#define SVC_LIMIT_DEFAULT 100

typedef enum { SVC_FAULT_NONE = 0, SVC_FAULT_CRASH_BEFORE_EXPIRE, SVC_FAULT_CRASH_IN_SECTION } svc_fault;

typedef struct svc_params {
    unsigned seen;                 /* SVC_P_* bits present in the query */
    char sku[SVC_SKU_MAX + 1];
    char user[SVC_SKU_MAX + 1];
    int64_t work_ms, lease_ms, wait_ms, stock, offset, limit;
    int reenter;
    svc_fault fault;
} svc_params;

/* 1 when s matches [A-Za-z0-9_-]{1,64}. */
int svc_valid_id(const char *s);
/* Strict decimal (digits only, no sign or spaces) in [lo, hi]: 0 or -1. */
int svc_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Reads and validates every query argument of c against the allowed set.
 * Returns 0, or -1 with a human reason ("unknown parameter 'x'") in detail. */
int svc_params_parse(struct MHD_Connection *c, const svc_settings *s, unsigned allowed,
                     svc_params *out, char *detail, size_t dlen);

#endif

/* svc.h — the size limits every module of the service shares.
 * The sources and what each does: service/README.md, "Sources". */
#ifndef MIAOSHA_SVC_H
#define MIAOSHA_SVC_H

#include <stddef.h>
#include <stdint.h>

#include <lockcore.h>
#include <miaosha_config.h>

#include "svc_log.h"

#define SVC_SKU_MAX 64                /* [A-Za-z0-9_-]{1,64} */
#define SVC_TAG_MAX (SVC_SKU_MAX + 8) /* a hash tag: a SKU or "<sku>~<b>[.<salt>]" */
#define SVC_KEY_MAX 112               /* "miaosha:{<sku>~63.255}:lock:reentrant" fits */
#define SVC_UUID_LEN 37               /* 36 characters + NUL */
#define SVC_BUCKETS_MAX 64            /* stock buckets of one SKU (PUT /stock's buckets: 1..64) */

/* The service reads its settings straight from the one validated
 * configuration (miaosha_config.h, cfg_config): read-only after start;
 * every request points to the one it runs under (svc_req.s). */

#endif

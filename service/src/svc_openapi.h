/* svc_openapi.h — the OpenAPI 3.1 description of the service's HTTP API,
 * served by GET /openapi.json: docs/openapi.yaml converted to compact JSON
 * when the build was configured (scripts/openapi-json.py) and compiled in,
 * so the server has nothing to find at run time. */
#ifndef MIAOSHA_SVC_OPENAPI_H
#define MIAOSHA_SVC_OPENAPI_H

#include <stddef.h>

/* The JSON text (static storage, never freed) and its length in *len
 * (bytes, without a NUL). Any thread. */
const char *svc_openapi_json(size_t *len);

#endif

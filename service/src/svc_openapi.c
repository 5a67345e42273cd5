/* svc_openapi.c — the compiled-in OpenAPI description (svc_openapi.h). */
#include "svc_openapi.h"

#include "svc_openapi_json.h" /* generated: SVC_OPENAPI_JSON */

const char *svc_openapi_json(size_t *len)
{
    *len = sizeof SVC_OPENAPI_JSON - 1;
    return SVC_OPENAPI_JSON;
}

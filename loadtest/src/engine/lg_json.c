/* lg_json.c — see lg_json.h. */
#define LG_JSON_IMPL
#include "lg_json.h"

#include <pthread.h>

#include "lg_thread.h"

static pthread_mutex_t parse_mu = PTHREAD_MUTEX_INITIALIZER;

cJSON *lg_json_parse(const char *text, size_t len)
{
    if (!text)
        return NULL;
    lg_pt_must(pthread_mutex_lock(&parse_mu), "lg_json_parse: lock");
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, NULL, 0);
    lg_pt_must(pthread_mutex_unlock(&parse_mu), "lg_json_parse: unlock");
    return j;
}

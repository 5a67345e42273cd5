/* lg_json.h — cJSON for loadtest, parsing behind one mutex.
 *
 * Why: every cJSON parse first resets, and on failure sets, a global error
 * pointer (cJSON_GetErrorPtr), so two threads parsing at once race on it;
 * miaosha-load parses on the engine's threads (every purchase response)
 * and on the matrix's (its fault probes) at the same time. lg_json_parse is
 * the only parse loadtest uses: including this header instead of
 * <cjson/cJSON.h> poisons cJSON's own parse functions, so a direct call
 * does not compile. The rest of cJSON (building, printing, reading a
 * parsed tree) touches no shared state and is used as is.
 */
#ifndef MIAOSHA_LG_JSON_H
#define MIAOSHA_LG_JSON_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Parses text[0..len) (need not be NUL-terminated; a NUL ends it earlier;
 * text after the first value is ignored; NULL text: NULL). Returns the tree (the caller
 * frees it with cJSON_Delete) or NULL when it is not JSON or memory ran
 * out. Any thread: calls are serialised, each takes about a microsecond
 * for the small bodies loadtest reads. */
cJSON *lg_json_parse(const char *text, size_t len);

#ifndef LG_JSON_IMPL
#pragma GCC poison cJSON_Parse cJSON_ParseWithLength cJSON_ParseWithOpts cJSON_ParseWithLengthOpts
#endif

#endif

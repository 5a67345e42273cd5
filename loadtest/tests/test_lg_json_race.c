/* test_lg_json_race.c — every JSON parse in miaosha-load is serialised.
 *
 * cJSON's parse writes a global error pointer, so two threads parsing at
 * once race on it (lg_json.h). The race cannot be seen from outside: the
 * parse result is right either way, and Debian's libcjson is not built
 * with TSan. So the test watches the parse itself: it is linked with
 * -Wl,--wrap=cJSON_ParseWithLengthOpts, and the wrapper below counts the
 * calls that find another parse still running, holding each call open for
 * 2 ms so that unserialised callers are sure to meet. Threads parsing
 * through lg_json_parse must never meet; the same threads calling cJSON
 * directly must (which shows the detector works).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* The direct caller comes before lg_json.h, which poisons cJSON's parse
 * functions for the rest of this file. */
#include <cjson/cJSON.h>

static cJSON *parse_directly(const char *text, size_t len)
{
    return cJSON_ParseWithLengthOpts(text, len, NULL, 0);
}

#include "lg_json.h"
#include "tu.h"

/* The linker's --wrap names (the one place with a leading double underscore). */
cJSON *__real_cJSON_ParseWithLengthOpts(const char *value, size_t len, const char **end,
                                        cJSON_bool require_nul);
cJSON *__wrap_cJSON_ParseWithLengthOpts(const char *value, size_t len, const char **end,
                                        cJSON_bool require_nul);

static atomic_int inside;
static atomic_int met, calls;

cJSON *__wrap_cJSON_ParseWithLengthOpts(const char *value, size_t len, const char **end,
                                        cJSON_bool require_nul)
{
    if (atomic_fetch_add(&inside, 1) > 0)
        atomic_fetch_add(&met, 1);
    atomic_fetch_add(&calls, 1);
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
    cJSON *j = __real_cJSON_ParseWithLengthOpts(value, len, end, require_nul);
    atomic_fetch_sub(&inside, 1);
    return j;
}

#define THREADS 4
#define PARSES 10

static pthread_barrier_t start;
static cJSON *(*parse_fn)(const char *, size_t);
static atomic_int wrong;

static void *parser(void *arg)
{
    (void)arg;
    static const char good[] = "{\"ok\":true,\"order_id\":\"o-1\"}";
    static const char bad[] = "{\"ok\":tru";
    pthread_barrier_wait(&start);
    for (int i = 0; i < PARSES; i++) {
        const char *t = i % 2 ? bad : good;
        cJSON *j = parse_fn(t, strlen(t));
        if ((j != NULL) != (t == good))
            atomic_fetch_add(&wrong, 1);
        cJSON_Delete(j);
    }
    return NULL;
}

/* Runs THREADS threads of PARSES parses each through fn; returns how many
 * calls met another parse in progress. */
static int run_threads(cJSON *(*fn)(const char *, size_t))
{
    parse_fn = fn;
    atomic_store(&met, 0);
    atomic_store(&calls, 0);
    atomic_store(&wrong, 0);
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        TU_REQUIRE(pthread_create(&t[i], NULL, parser, NULL) == 0, "pthread_create");
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
    TU_CHECK(atomic_load(&calls) == THREADS * PARSES, "every parse went through the wrapper: %d",
             atomic_load(&calls));
    TU_CHECK(atomic_load(&wrong) == 0, "parse results right: %d wrong", atomic_load(&wrong));
    return atomic_load(&met);
}

int main(void)
{
    int m = run_threads(lg_json_parse);
    TU_CHECK(m == 0, "lg_json_parse from %d threads: %d parses met another one", THREADS, m);
    m = run_threads(parse_directly);
    TU_CHECK(m > 0, "cJSON called directly from %d threads: parses meet (%d): the detector works",
             THREADS, m);
    return tu_done();
}

/* lg_thread.h — the one way loadtest treats a pthread_* failure that can
 * only mean a programming error (locking a mutex it initialised, joining a
 * thread it created, waiting on a barrier it set up): abort, loudly. A
 * failure the caller can act on (pthread_create: no resources) is returned
 * as a status instead, never passed here.
 */
#ifndef MIAOSHA_LG_THREAD_H
#define MIAOSHA_LG_THREAD_H

/* rc is a pthread_* return value. 0 returns; anything else prints
 * "miaosha-load: <what>: <strerror(rc)>" on stderr and abort()s. Any
 * thread. */
void lg_pt_must(int rc, const char *what);

#endif

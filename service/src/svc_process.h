/* svc_process.h — the series every Prometheus client library exports
 * about its process, and the build's identity, for /metrics:
 *
 *   process_cpu_seconds_total      user + system CPU time (getrusage), s
 *   process_resident_memory_bytes  resident set size (/proc/self/statm)
 *   process_virtual_memory_bytes   virtual memory size (/proc/self/statm)
 *   process_open_fds               open file descriptors (/proc/self/fd)
 *   process_max_fds                the soft RLIMIT_NOFILE
 *   process_start_time_seconds     start of the process, Unix time, s
 *                                  (/proc/self/stat starttime + btime)
 *   miaosha_build_info{version,revision,compiler} 1
 *
 * with the names, types and units the client libraries give them (the Go
 * and Python clients' process collector). Linux only: a series whose
 * /proc source cannot be read is left out. */
#ifndef MIAOSHA_SVC_PROCESS_H
#define MIAOSHA_SVC_PROCESS_H

#include "svc_buf.h"

/* Reads the process's start time once. Main thread, before the first
 * rendering. */
void svc_process_init(void);
/* Appends the series above to b; version is miaosha's (cfg_version). Any
 * thread; reads /proc and the clock, never blocks on the network. */
void svc_process_render(svc_buf *b, const char *version);

#endif

#!/usr/bin/env python3
"""redis_py_lock.py — the peer for lc_bench's token figure: redis-py's Lock.

    redis_py_lock.py PORT [SECONDS [THREADS]]

THREADS threads (default 8) loop acquire + release of redis-py's Lock on one
key, "bench:{peer}:lock" (lc_bench peer uses the same), lease 5 s, polling
every 1 ms while waiting (sleep=0.001), giving up after 1 s. redis-py's Lock
is the same algorithm as lockcore's token mode: SET key <token> NX PX, and a
Lua compare-and-delete release. Prints one line as lc_bench peer does:
"peer redis-py threads=8 cycles_per_s=N fairness=F" (min/max completions per
thread). Needs the python3 redis package (Debian: python3-redis).
"""
import sys
import threading
import time

import redis


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    port = int(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    pool = redis.ConnectionPool(host="127.0.0.1", port=port, max_connections=threads + 2)
    stop = threading.Event()
    done = [0] * threads
    failed = [0] * threads

    def worker(i):
        r = redis.Redis(connection_pool=pool)
        lock = r.lock("bench:{peer}:lock", timeout=5, sleep=0.001, blocking_timeout=1)
        while not stop.is_set():
            if not lock.acquire():
                failed[i] += 1
                continue
            lock.release()
            done[i] += 1

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - t0
    total = sum(done)
    fair = min(done) / max(done) if max(done) else 0.0
    print("peer redis-py threads=%d cycles_per_s=%.0f fairness=%.2f failed=%d"
          % (threads, total / elapsed, fair, sum(failed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""live_poll.py PORT SKU SINCE — what an open live page (GET /) asks
miaosha-server for, until killed: the page once, then every second the
requests of one poll of service/web/live.js (/stats, /metrics, the SKU's
audit, its trace header and its trace from SINCE), on one keep-alive
connection as a browser would. bench/run.sh runs it beside wrk on /healthz
to measure what an open page costs the server. Prints "STATUS PATH" per
request."""
import http.client
import sys
import time

port, sku, since = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conn = None


def get(path):
    global conn
    try:
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        print(resp.status, path, flush=True)
    except (OSError, http.client.HTTPException) as e:
        print("000", path, e, flush=True)
        conn = None


get("/")
while True:
    for p in ("/stats", "/metrics", "/stock/" + sku, "/trace/%s?since=999999999999" % sku,
              "/trace/%s?since=%d" % (sku, since)):
        get(p)
    time.sleep(1)

#!/usr/bin/env python3
"""test_service_openapi.py SERVER OPENAPI_JSON — the ctest service_openapi:
the server's real answers against its OpenAPI description.

Starts a private redis-server ($MIAOSHA_REDIS_SERVER) and three servers on
it: "openapi" (an admin token, faults enabled, one order per user), "steps"
(an admin token, faults enabled, teach.max_steps=2, teach.step_timeout_s=3)
and "plain" (neither; a short lock.max_wait_ms). It walks every route and provokes every status the
description documents for it (all but the purchase's and the reset's 499,
which no client can read): every mode's sale, a replay, a local sold-out answer,
stock_reset, fenced_out, in_progress, limit_reached, lock_busy, 422, 401,
403, 413, 414, 431, unknown paths and methods, a never-stocked SKU, a SKU
in stock buckets (buckets in the query and the body, every mode's reply,
the audit, the orders, the trace and /stats naming buckets), and with
Redis killed the 503s. On "steps": GET|HEAD /steps and POST
/steps/{id}/next|run with each of their statuses, and stepped purchases
(?step=1 and in the body) of every offered mode through to done, a lock wait
(waiting:true), 429 too_many_steps, fenced_out, the local sold-out flag
passed by, two steps abandoned (409 step_abandoned), then SIGTERM with a
step paused (503) and the 503 shutting_down of each route on connections
opened before it; on "plain", 403 faults_disabled and a reset's 429 (its
turn held by hand). Each answer is checked
against docs/openapi.yaml as the server was built with it (OPENAPI_JSON,
also what GET /openapi.json must serve): the path and method exist (else
404 or 405 with Allow), the status is documented for them, the documented
required headers are there, the Content-Type is one of the response's, and
the body validates against its schema (JSON Schema 2020-12, Debian's
python3-jsonschema; the trace's lines against contentSchema). Last, every
documented (route, method, status) must have been seen, but the ones
listed in NOT_PROVOKED, and each of STEP_ANSWERS from a stepped purchase.
Prints "N passed, N failed"; exit 1 on a failure.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import jsonschema

SERVER, SPEC_FILE = sys.argv[1], sys.argv[2]
TOKEN = "s3cret"
passed = failed = 0
seen = set()  # (path template, method, status)
step_seen = set()  # (method, status, error) of the purchases with step=1
# What the step parameter documents a stepped purchase answers, each of
# which the walk must provoke: the purchase's usual answers (by POST and
# GET), and its own refusals and endings.
STEP_ANSWERS = {
    ("post", 200, None), ("get", 200, None), ("post", 400, "bad_request"),
    ("post", 401, "unauthorized"), ("post", 403, "forbidden"),
    ("post", 403, "faults_disabled"), ("get", 403, "faults_disabled"),
    ("post", 409, "step_abandoned"), ("post", 429, "too_many_steps"),
    ("post", 503, "shutting_down"),
}
# Documented, but not provoked here: a 499 is never read by its client; a
# 503 of /stats, /metrics and /trace is an allocation that failed.
NOT_PROVOKED = {
    ("/miaosha/{mode}", "get", 499), ("/miaosha/{mode}", "post", 499),
    ("/stock/{sku}", "put", 499),
    ("/stats", "get", 503), ("/metrics", "get", 503), ("/trace/{sku}", "get", 503),
    ("/miaosha/{mode}", "get", 401), ("/miaosha/{mode}", "get", 403),
    ("/miaosha/{mode}", "get", 413), ("/miaosha/{mode}", "get", 422),
    ("/miaosha/{mode}", "get", 414), ("/miaosha/{mode}", "get", 431),
    ("/miaosha/{mode}", "get", 429),
    ("/miaosha/{mode}", "get", 503),
    ("/stock/{sku}", "head", 400), ("/stock/{sku}", "head", 503), ("/orders/{sku}", "head", 400),
    ("/orders/{sku}", "head", 503), ("/orders/{sku}", "head", 404),
    ("/orders/{sku}", "get", 413), ("/stock/{sku}", "put", 414), ("/stock/{sku}", "put", 431),
    ("/healthz", "head", 400), ("/stats", "head", 400), ("/metrics", "head", 400),
    ("/trace/{sku}", "head", 400), ("/trace/{sku}", "head", 404), ("/", "head", 400),
    ("/openapi.json", "head", 400),
    ("/stats", "get", 414), ("/stats", "get", 431), ("/metrics", "get", 414),
    ("/metrics", "get", 431), ("/trace/{sku}", "get", 414), ("/trace/{sku}", "get", 431),
    ("/", "get", 414), ("/", "get", 431), ("/openapi.json", "get", 414),
    ("/openapi.json", "get", 431), ("/orders/{sku}", "get", 414), ("/orders/{sku}", "get", 431),
    ("/healthz", "get", 414), ("/healthz", "get", 431),
}


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {what}", flush=True)
    return ok


# --- the description ---------------------------------------------------------

with open(SPEC_FILE, encoding="utf-8") as f:
    SPEC = json.load(f)


def pointer(ref):
    node = SPEC
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def deref(node):
    """node with every internal $ref replaced by what it points to."""
    if isinstance(node, dict):
        if "$ref" in node:
            return deref(pointer(node["$ref"]))
        return {k: deref(v) for k, v in node.items()}
    if isinstance(node, list):
        return [deref(v) for v in node]
    return node


def template_of(path):
    for t in SPEC["paths"]:
        if re.fullmatch(re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(t)), path):
            return t
    return None


FORMATS = jsonschema.FormatChecker()


def schema_errors(schema, value):
    v = jsonschema.Draft202012Validator(deref(schema), format_checker=FORMATS)
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in v.iter_errors(value)]


def validate(method, path, status, headers, body, what):
    """One answer against the description; records what it covered."""
    t = template_of(path.split("?")[0])
    if t is None:
        check(status == 404, f"{what}: {path} is on no documented path, but the answer is {status}")
        resp = SPEC["components"]["responses"]["BadRequest"]  # the Error body
    else:
        item = SPEC["paths"][t]
        op = item.get(method.lower())
        if op is None:
            check(status == 405 and "allow" in headers,
                  f"{what}: {method} is not documented on {t}: want 405 with Allow, got {status}")
            resp = SPEC["components"]["responses"]["MethodNotAllowed"]
        else:
            seen.add((t, method.lower(), status))
            resp = op["responses"].get(str(status))
            if not check(resp is not None,
                         f"{what}: status {status} is not documented for {method} {t}"):
                return
    resp = deref(resp)
    for name, h in resp.get("headers", {}).items():
        if h.get("required"):
            check(name.lower() in headers, f"{what}: required header {name} missing")
        if name.lower() in headers and "schema" in h:
            errs = schema_errors(h["schema"], headers[name.lower()])
            check(not errs, f"{what}: header {name}: {errs}")
    for name in ("idempotent-replayed",):
        if name in headers:
            check(any(k.lower() == name for k in resp.get("headers", {})),
                  f"{what}: {name} is not documented for status {status}")
    if method == "HEAD":
        return
    content = resp.get("content", {})
    ctype = headers.get("content-type", "").split(";")[0].strip()
    if not check(ctype in content, f"{what}: Content-Type {ctype!r} not in {list(content)}"):
        return
    schema = content[ctype].get("schema", {})
    text = body.decode("utf-8", "replace")
    if ctype == "application/json":
        try:
            doc = json.loads(text)
        except ValueError as e:
            check(False, f"{what}: not JSON ({e}): {text[:200]}")
            return
        errs = schema_errors(schema, doc)
        check(not errs, f"{what}: body does not match: {errs[:3]}: {text[:300]}")
    elif ctype == "application/x-ndjson":
        lines = [json.loads(line) for line in text.splitlines() if line]
        errs = schema_errors(schema["contentSchema"], lines)
        check(not errs, f"{what}: lines do not match: {errs[:3]}")
    else:
        check(schema.get("type") == "string" and len(text) > 0, f"{what}: a {ctype} body")


# --- HTTP on raw sockets (bodies over the limit, long heads, HEAD) -------------

PORT = None


def http(method, path, body=None, headers=None, what=None, conn=None):
    """One request on a fresh connection (or on conn, one that open_conn
    made, which it closes); validated. Returns (status, headers (lower-case
    names), body bytes, parsed JSON or None)."""
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    for k, v in (headers or {}).items():
        head.append(f"{k}: {v}")
    data = body.encode() if isinstance(body, str) else (body or b"")
    if body is not None:
        head.append(f"Content-Length: {len(data)}")
    raw = ("\r\n".join(head) + "\r\n\r\n").encode() + data
    s = conn or socket.create_connection(("127.0.0.1", PORT), timeout=30)
    try:
        s.sendall(raw)
    except OSError:
        pass  # a 413 may close before the body is all sent
    chunks = []
    while True:
        try:
            c = s.recv(65536)
        except ConnectionResetError:
            break
        if not c:
            break
        chunks.append(c)
    s.close()
    resp = b"".join(chunks)
    head_end = resp.find(b"\r\n\r\n")
    lines = resp[:head_end].decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    payload = resp[head_end + 4:]
    if method != "HEAD" and "content-length" in hdrs:
        payload = payload[:int(hdrs["content-length"])]
    validate(method, path, status, hdrs, payload, what or f"{method} {path[:80]}")
    doc = None
    if hdrs.get("content-type", "").startswith("application/json") and payload:
        try:
            doc = json.loads(payload)
        except ValueError:
            pass
    if path.startswith("/miaosha/") and is_step(path, body):
        step_seen.add((method.lower(), status, doc.get("error") if doc else None))
    return status, hdrs, payload, doc


def is_step(path, body):
    """Whether a purchase asks to be stepped, in its query or its body."""
    if re.search(r"[?&]step=1(&|$)", path):
        return True
    try:
        return json.loads(body).get("step") in (1, True)
    except (TypeError, ValueError, AttributeError):
        return False


def open_conn():
    """A connection the server has accepted (a keep-alive GET /healthz went
    through it), for a request after SIGTERM: the server accepts no new
    connection then, but answers on the ones it has."""
    s = socket.create_connection(("127.0.0.1", PORT), timeout=30)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    resp = b""
    while b"\r\n\r\n" not in resp:
        resp += s.recv(65536)
    head, _, rest = resp.partition(b"\r\n\r\n")
    n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(rest) < n:
        rest += s.recv(65536)
    check(head.startswith(b"HTTP/1.1 200"), f"a keep-alive GET /healthz: {head[:40]!r}")
    return s


def expect(want, method, path, body=None, headers=None, error=None):
    st, h, b, doc = http(method, path, body, headers)
    check(st == want, f"{method} {path[:80]}: status {st}, want {want}: {b[:200]!r}")
    if error is not None:
        check(doc is not None and doc.get("error") == error,
              f"{method} {path[:80]}: error {doc and doc.get('error')}, want {error}")
    return st, h, b, doc


def in_thread(fn, *args):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn(*args)))
    t.start()
    return t, out


# --- stepped purchases ---------------------------------------------------------

class Buyer:
    """A stepped purchase's request, in a thread: it answers once the
    purchase is done."""

    def __init__(self, method, path, headers, body=None):
        self.what = f"{method} {path}"
        self.t, self.out = in_thread(http, method, path, body, headers)

    def answer(self, want=None, error=None):
        """Waits for the answer (validated by http); checks it when want is
        given. Returns the parsed body."""
        self.t.join(60)
        if not check("r" in self.out, f"{self.what}: no answer within 60 s"):
            return None
        st, _, b, doc = self.out["r"]
        if want is not None:
            check(st == want and (error is None or (doc or {}).get("error") == error),
                  f"{self.what}: {st} {b[:300]!r}, want {want} {error or ''}")
        return doc


def step_of(user, headers, pred=lambda e: e["stage"] != "done", timeout=10):
    """The newest step of user that pred accepts, from GET /steps (each
    answer validated), polled until timeout; None if none came."""
    end = time.time() + timeout
    while True:
        _, _, _, doc = http("GET", "/steps", None, headers)
        found = [e for e in (doc or {}).get("steps", []) if e["user"] == user and pred(e)]
        if found or time.time() > end:
            return found[-1] if found else None
        time.sleep(0.05)


def step_id(user, headers):
    e = step_of(user, headers)
    check(e is not None, f"GET /steps lists {user}'s step")
    return e["id"] if e else 0


# --- the walk ------------------------------------------------------------------

def walk():
    auth = {"Authorization": f"Bearer {TOKEN}"}
    put = lambda sku, n: expect(200, "PUT", f"/stock/{sku}", json.dumps({"stock": n}), auth)
    # stock
    put("oa", 100)
    expect(200, "PUT", "/stock/oa2?stock=3", None, auth)
    expect(200, "GET", "/stock/oa")
    expect(200, "HEAD", "/stock/oa")
    expect(400, "GET", "/stock/oa?x=1", error="bad_request")
    expect(400, "GET", "/stock/bad%20sku", error="bad_request")
    expect(404, "GET", "/stock/oa-never", error="unknown_sku")
    expect(404, "HEAD", "/stock/oa-never")
    expect(405, "GET", "/stock/oa?stock=5", error="method_not_allowed")
    expect(405, "HEAD", "/stock/oa?stock=5")
    expect(405, "DELETE", "/stock/oa", error="method_not_allowed")
    expect(400, "PUT", "/stock/oa", '{"stock":-1}', auth, error="bad_request")
    expect(401, "PUT", "/stock/oa", '{"stock":1}', error="unauthorized")
    expect(403, "PUT", "/stock/oa", '{"stock":1}', {"Authorization": "Bearer nope"},
           error="forbidden")
    expect(413, "PUT", "/stock/oa", "x" * 5000, auth, error="body_too_large")
    expect(413, "GET", "/orders/oa", "x" * 5000, error="body_too_large")
    # the body limit is checked before any route: every GET says so
    for p in ("/stock/oa", "/healthz", "/stats", "/metrics", "/trace/oa", "/", "/openapi.json"):
        expect(413, "GET", p, "x" * 5000, error="body_too_large")
    expect(414, "GET", "/stock/oa?" + "a" * 3000, error="uri_too_long")
    expect(431, "GET", "/stock/oa", None, {"X-Big": "h" * 17000}, error="headers_too_large")
    # the limits come before any route, for HEAD as for GET
    for p in ("/stock/oa", "/orders/oa", "/healthz", "/stats", "/metrics", "/trace/oa", "/",
              "/openapi.json", "/steps"):
        expect(413, "HEAD", p, "x" * 5000)
        expect(414, "HEAD", p + ("&" if "?" in p else "?") + "a" * 3000)
        expect(431, "HEAD", p, None, {"X-Big": "h" * 17000})
    # orders
    expect(200, "GET", "/orders/oa?offset=0&limit=10")
    expect(200, "HEAD", "/orders/oa")
    expect(400, "GET", "/orders/oa?limit=1001", error="bad_request")
    expect(404, "GET", "/orders/oa-never", error="unknown_sku")
    expect(405, "POST", "/orders/oa", error="method_not_allowed")
    # purchases: every mode sells (fenced with its fence), in the query and in the body
    for i, m in enumerate(["none", "mutex", "setnx", "token", "reentrant", "fenced", "lua"]):
        expect(200, "POST", f"/miaosha/{m}?sku=oa&user=q{i}")
        expect(200, "POST", f"/miaosha/{m}", json.dumps({"sku": "oa", "user": f"b{i}"}))
        expect(200, "GET", f"/miaosha/{m}?sku=oa&user=g{i}")
    expect(200, "POST", "/miaosha/lua?sku=oa&user=k1", None, {"Idempotency-Key": "oa-k1"})
    st, h, b, _ = expect(200, "POST", "/miaosha/lua?sku=oa&user=k1", None,
                         {"Idempotency-Key": "oa-k1"})
    check(h.get("idempotent-replayed") == "true", "a replay says Idempotent-Replayed: true")
    expect(400, "POST", "/miaosha/token?sku=oa", error="bad_request")  # no user
    expect(400, "POST", "/miaosha/token?sku=oa&user=x&work_ms=-1", error="bad_request")
    expect(400, "POST", "/miaosha/token?user=x", '{"sku":5}', error="bad_request")
    expect(400, "GET", "/miaosha/token?sku=oa&user=x&pipeline=2", error="bad_request")
    expect(401, "POST", "/miaosha/token?sku=oa&user=f&fault=crash_in_section",
           error="unauthorized")
    expect(403, "POST", "/miaosha/token?sku=oa&user=f&fault=crash_in_section", None,
           {"Authorization": "Bearer nope"}, error="forbidden")
    expect(404, "POST", "/miaosha/nosuchmode?sku=oa&user=x", error="not_found")
    expect(404, "GET", "/miaosha/redlock?sku=oa&user=x", error="not_found")
    expect(404, "POST", "/miaosha/token?sku=oa-never&user=x", error="unknown_sku")
    expect(404, "POST", "/miaosha/lua?sku=oa-never&user=x", error="unknown_sku")
    expect(405, "PUT", "/miaosha/token?sku=oa&user=x", error="method_not_allowed")
    expect(413, "POST", "/miaosha/token?sku=oa&user=x", "y" * 5000, error="body_too_large")
    expect(414, "POST", "/miaosha/token?user=" + "u" * 3000, error="uri_too_long")
    expect(431, "POST", "/miaosha/token?sku=oa&user=x", None, {"X-Big": "h" * 17000},
           error="headers_too_large")
    expect(409, "POST", "/miaosha/token?sku=oa&user=q3", error="limit_reached")
    expect(422, "POST", "/miaosha/lua?sku=oa2&user=k1", None, {"Idempotency-Key": "oa-k1"},
           error="idempotency_key_reused")
    # 409 in_progress: a keyed purchase still working
    t, _ = in_thread(http, "POST", "/miaosha/token?sku=oa&user=ip&work_ms=800", None,
                     {"Idempotency-Key": "oa-ip"})
    time.sleep(0.3)
    expect(409, "POST", "/miaosha/token?sku=oa&user=ip", None, {"Idempotency-Key": "oa-ip"},
           error="in_progress")
    t.join()
    # 429 lock_busy: the lock held by a purchase that works
    t, _ = in_thread(http, "POST", "/miaosha/token?sku=oa&user=busy1&work_ms=800")
    time.sleep(0.3)
    expect(429, "POST", "/miaosha/token?sku=oa&user=busy2&wait_ms=0", error="lock_busy")
    t.join()
    # 409 stock_reset: a reset between a purchase's read and its commit
    put("oa3", 10)
    t, out = in_thread(http, "POST", "/miaosha/token?sku=oa3&user=sr&work_ms=800")
    time.sleep(0.3)
    put("oa3", 10)
    t.join()
    check(out["r"][0] == 409 and out["r"][3].get("error") == "stock_reset",
          f"stock_reset: {out['r'][:1]}")
    # 409 fenced_out: a holder past its lease, a later holder has read
    put("oa4", 10)
    t, out = in_thread(http, "POST", "/miaosha/fenced?sku=oa4&user=fa&work_ms=900&lease_ms=100")
    time.sleep(0.4)
    expect(200, "POST", "/miaosha/fenced?sku=oa4&user=fb")
    t.join()
    check(out["r"][0] == 409 and out["r"][3].get("error") == "fenced_out",
          f"fenced_out: {out['r'][:1]} {out['r'][2][:200]!r}")
    # 409 sold_out from Redis, then from the local flag
    put("oa5", 0)
    expect(409, "POST", "/miaosha/token?sku=oa5&user=s1", error="sold_out")
    st, h, b, doc = expect(409, "POST", "/miaosha/lua?sku=oa5&user=s2", error="sold_out")
    check(doc and doc.get("local") is True, f"the local sold-out answer: {b[:200]!r}")
    expect(409, "GET", "/miaosha/token?sku=oa5&user=s3", error="sold_out")
    # stock buckets: buckets in the query or the body (one name in both
    # places is a 400), the audit's "buckets", every mode's reply and order
    # naming its bucket, the last unit found, /trace and /stats (below)
    expect(200, "PUT", "/stock/oab?stock=7&buckets=3", None, auth)
    expect(200, "PUT", "/stock/oab?stock=7", json.dumps({"buckets": 3}), auth)
    expect(400, "PUT", "/stock/oab?buckets=3", json.dumps({"stock": 7, "buckets": 3}), auth,
           error="bad_request")
    expect(400, "PUT", "/stock/oab?stock=7&buckets=65", None, auth, error="bad_request")
    expect(400, "PUT", "/stock/oab", json.dumps({"stock": 7, "buckets": 0}), auth,
           error="bad_request")
    _, _, _, doc = expect(200, "PUT", "/stock/oab", json.dumps({"stock": 7, "buckets": 3}), auth)
    check(doc and [b["stock"] for b in doc.get("buckets", [])] == [3, 2, 2],
          f"7 in 3 buckets: 3, 2, 2: {doc}")
    for i, m in enumerate(["none", "mutex", "setnx", "token", "reentrant", "fenced", "lua"]):
        _, _, b, doc = expect(200, "POST", f"/miaosha/{m}?sku=oab&user=bk{i}")
        check(doc and 0 <= doc.get("bucket", -1) < 3, f"{m}: the reply names its bucket: {b!r}")
    _, _, b, doc = expect(409, "POST", "/miaosha/token?sku=oab&user=bk9", error="sold_out")
    check(doc and 0 <= doc.get("bucket", -1) < 3, f"sold out: the last bucket tried: {b!r}")
    _, _, _, doc = expect(200, "GET", "/stock/oab")
    check(doc and doc["sold"] == 7 and doc["undersold"] == 0 and len(doc.get("buckets", [])) == 3,
          f"the audit of 3 buckets, the last unit sold: {doc}")
    _, _, _, doc = expect(200, "GET", "/orders/oab?limit=5&offset=1")
    check(doc and doc["total"] == 7 and len(doc["orders"]) == 5 and
          all("bucket" in o for o in doc["orders"]), f"orders across buckets: {doc}")
    st, _, b, _ = expect(200, "GET", "/trace/oab")
    check(b'"bucket":' in b and b'"probes":' in b, f"/trace names each purchase's bucket: {b[:300]!r}")
    # observe
    expect(200, "GET", "/healthz")
    expect(200, "HEAD", "/healthz")
    expect(400, "GET", "/healthz?x=1", error="bad_request")
    expect(405, "POST", "/healthz", error="method_not_allowed")
    _, _, _, doc = expect(200, "GET", "/stats")
    check(doc and len(doc["buckets"]["skus"].get("oab", {}).get("sold", [])) == 3 and
          sum(doc["buckets"]["skus"]["oab"]["sold"]) == 7,
          f"/stats: the sales of each of oab's buckets: {doc and doc.get('buckets')}")
    expect(200, "GET", "/stats?pretty=1")
    expect(200, "HEAD", "/stats")
    expect(400, "GET", "/stats?pretty=3", error="bad_request")
    expect(200, "GET", "/metrics")
    expect(200, "HEAD", "/metrics")
    expect(400, "GET", "/metrics?x=1", error="bad_request")
    expect(200, "GET", "/trace/oa")
    expect(200, "GET", "/trace/oa?since=3")
    expect(200, "HEAD", "/trace/oa")
    expect(400, "GET", "/trace/oa?since=-1", error="bad_request")
    expect(404, "GET", "/trace/oa-untraced", error="not_found")
    expect(200, "GET", "/")
    expect(200, "HEAD", "/")
    expect(400, "GET", "/?x=1", error="bad_request")
    st, h, b, doc = expect(200, "GET", "/openapi.json")
    check(doc == SPEC, "GET /openapi.json serves the description the server was built with")
    expect(200, "HEAD", "/openapi.json")
    expect(400, "GET", "/openapi.json?x=1", error="bad_request")
    expect(405, "POST", "/openapi.json", error="method_not_allowed")
    expect(404, "GET", "/nosuch", error="not_found")
    expect(404, "GET", "/stock/", error="not_found")
    expect(400, "GET", "/healthz?a%00=1", error="bad_request")


def walk_redis_down(redis_kill):
    """The 503s with Redis gone; GET /steps stays 200 with its SKU null, and
    a stepped purchase that goes on answers 503."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    buyer = Buyer("POST", "/miaosha/token?sku=oa&user=rd&step=1", auth)
    sid = step_id("rd", auth)
    redis_kill()
    st, _, _, doc = expect(200, "GET", "/steps?sku=oa", None, auth)
    check(doc is not None and doc["redis"].get("oa", 0) is None,
          f"GET /steps with Redis gone: the SKU is null: {doc and doc.get('redis')}")
    st, _, _, doc = expect(200, "POST", f"/steps/{sid}/run", None, auth)
    check(doc is not None and doc["step"]["status"] == 503, f"the step with Redis gone: {doc}")
    buyer.answer(503, "redis_unavailable")
    expect(503, "POST", "/miaosha/token?sku=oa&user=d1", error="redis_unavailable")
    expect(503, "POST", "/miaosha/lua?sku=oa&user=d2", error="redis_unavailable")
    expect(503, "GET", "/stock/oa", error="redis_unavailable")
    expect(503, "HEAD", "/stock/oa")
    expect(503, "PUT", "/stock/oa?stock=1", None, auth, error="redis_unavailable")
    expect(503, "GET", "/orders/oa", error="redis_unavailable")
    end = time.time() + 10
    while time.time() < end:
        st, _, _, _ = http("GET", "/healthz")
        if st == 503:
            break
        time.sleep(0.2)
    check(st == 503, "/healthz turns 503 with Redis gone")
    expect(503, "HEAD", "/healthz")


def walk_steps(server):
    """Stepped purchases on a server with faults.enabled, an admin token and
    teach.max_steps=2, teach.step_timeout_s=3; ends with its SIGTERM."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    bad = {"Authorization": "Bearer nope"}
    big = {"X-Big": "h" * 17000}

    def ex(want, method, path, body=None, headers=None, error=None):
        return expect(want, method, path, body, {**auth, **(headers or {})}, error)

    def drive(op, sid, query="?wait_ms=10000"):
        return ex(200, "POST", f"/steps/{sid}/{op}{query}")[3] or {}

    ex(200, "PUT", "/stock/st1?stock=100")
    # GET|HEAD /steps and everything next and run answer before a step exists
    st, h, b, doc = ex(200, "GET", "/steps")
    check(doc == {"ok": True, "steps": [], "instance": "steps", "now_us": doc and doc["now_us"],
                  "redis": {}}, f"no step yet: {b[:200]!r}")
    st, h, b, doc = ex(200, "GET", "/steps?sku=st1")
    check(doc and doc["redis"].get("st1", {}).get("stock") == 100, f"?sku= reads st1: {b[:300]!r}")
    ex(200, "HEAD", "/steps?sku=st1")
    ex(400, "GET", "/steps?x=1", error="bad_request")
    ex(400, "GET", "/steps?sku=bad%20sku", error="bad_request")
    ex(400, "HEAD", "/steps?x=1")
    expect(401, "GET", "/steps", error="unauthorized")
    expect(401, "HEAD", "/steps")
    expect(403, "GET", "/steps", None, bad, error="forbidden")
    expect(403, "HEAD", "/steps", None, bad)
    st, h, _, _ = ex(405, "POST", "/steps", error="method_not_allowed")
    check(h.get("allow") == "GET, HEAD", f"POST /steps: Allow {h.get('allow')!r}")
    ex(413, "GET", "/steps", "x" * 5000, error="body_too_large")
    ex(414, "GET", "/steps?sku=" + "s" * 3000, error="uri_too_long")
    ex(431, "GET", "/steps", None, big, error="headers_too_large")
    for op in ("next", "run"):
        ex(404, "POST", f"/steps/999999/{op}", error="unknown_step")
        ex(404, "POST", f"/steps/abc/{op}", error="unknown_step")
        ex(400, "POST", f"/steps/1/{op}?wait_ms=-1", error="bad_request")
        ex(400, "POST", f"/steps/1/{op}?sku=st1", error="bad_request")
        expect(401, "POST", f"/steps/1/{op}", error="unauthorized")
        expect(403, "POST", f"/steps/1/{op}", None, bad, error="forbidden")
        st, h, _, _ = ex(405, "GET", f"/steps/1/{op}", error="method_not_allowed")
        check(h.get("allow") == "POST", f"GET /steps/1/{op}: Allow {h.get('allow')!r}")
        ex(413, "POST", f"/steps/1/{op}", "x" * 5000, error="body_too_large")
        ex(414, "POST", f"/steps/1/{op}?wait_ms=" + "1" * 3000, error="uri_too_long")
        ex(431, "POST", f"/steps/1/{op}", None, big, error="headers_too_large")
    # the purchase's own refusals of step=1
    expect(401, "POST", "/miaosha/token?sku=st1&user=x&step=1", error="unauthorized")
    expect(403, "POST", "/miaosha/token?sku=st1&user=x&step=1", None, bad, error="forbidden")
    ex(400, "POST", "/miaosha/token?sku=st1&user=x&step=1", None, {"Idempotency-Key": "st-k"},
       error="bad_request")
    ex(400, "POST", "/miaosha/token?sku=st1&user=x&step=2", error="bad_request")
    ex(400, "POST", "/miaosha/token", '{"sku":"st1","user":"x","step":2}', error="bad_request")
    st, h, b, doc = ex(200, "POST", "/miaosha/token?sku=st1&user=x&step=0")  # not stepped
    # every mode, stepped through to done: the usual 200, a lock mode's not pipelined
    for mode in ("none", "mutex", "setnx", "token", "reentrant", "fenced", "lua"):
        user = f"all-{mode}"
        buyer = Buyer("POST", f"/miaosha/{mode}?sku=st1&user={user}&step=1", auth)
        doc = drive("run", step_id(user, auth))
        check(doc.get("step", {}).get("stage") == "done", f"{mode}: run ends done: {doc}")
        doc = buyer.answer(200)
        check(doc is not None and doc["pipeline"] is (mode == "lua"),
              f"{mode}: a stepped purchase says pipeline {mode == 'lua'}: {doc}")
    # in the body, by GET, and lua's one step
    buyer = Buyer("POST", "/miaosha/setnx", auth, '{"sku":"st1","user":"body1","step":true}')
    drive("run", step_id("body1", auth))
    buyer.answer(200)
    buyer = Buyer("GET", "/miaosha/lua?sku=st1&user=get1&step=1", auth)
    doc = drive("next", step_id("get1", auth))
    check(doc.get("step", {}).get("stages") == ["start", "done"] and "why" in doc.get("step", {}),
          f"lua's step: start, done, and why: {doc.get('step')}")
    buyer.answer(200)
    # token: A holds the lock, B waits for it (waiting:true); a third is 429
    a = Buyer("POST", "/miaosha/token?sku=st1&user=tA&step=1", auth)
    ida = step_id("tA", auth)
    doc = drive("next", ida)
    lock = doc.get("redis", {}).get("st1", {}).get("locks", {}).get("token", {})
    check(doc.get("step", {}).get("holds_lock") is True and
          isinstance(doc["step"].get("lease_left_ms"), int) and isinstance(lock.get("value"), str)
          and lock.get("pttl_ms", 0) > 0, f"A at locked, its lock key in Redis: {doc}")
    b = Buyer("POST", "/miaosha/token?sku=st1&user=tB&step=1&wait_ms=10000", auth)
    idb = step_id("tB", auth)
    doc = drive("next", idb, "?wait_ms=200")
    check(doc.get("step", {}).get("waiting") is True and doc["step"]["stage"] == "start",
          f"B waits for A's lock: {doc.get('step')}")
    ex(429, "POST", "/miaosha/token?sku=st1&user=tC&step=1", error="too_many_steps")
    drive("run", ida)
    a.answer(200)
    drive("run", idb)
    b.answer(200)
    # reentrant's lock key is a hash: field=holds
    r = Buyer("POST", "/miaosha/reentrant?sku=st1&user=rA&step=1", auth)
    doc = drive("next", step_id("rA", auth))
    value = doc.get("redis", {}).get("st1", {}).get("locks", {}).get("reentrant", {}).get("value")
    check(isinstance(value, str) and value.endswith("=1"), f"reentrant's hash: {value!r}")
    drive("run", doc.get("step", {}).get("id", 0))
    r.answer(200)
    # fenced: F's lease runs out at read, G buys, F's write is fenced out
    ex(200, "PUT", "/stock/st2?stock=10")
    f = Buyer("POST", "/miaosha/fenced?sku=st2&user=fF&step=1&lease_ms=300", auth)
    idf = step_id("fF", auth)
    drive("next", idf)
    drive("next", idf)
    check(step_of("fF", auth, lambda e: e["lease_left_ms"] == 0) is not None,
          "F's lease runs out while it is paused at read")
    g = Buyer("POST", "/miaosha/fenced?sku=st2&user=fG&step=1&wait_ms=5000", auth)
    drive("run", step_id("fG", auth))
    g.answer(200)
    doc = drive("run", idf)
    check(doc.get("step", {}).get("error") == "fenced_out", f"F's step: {doc.get('step')}")
    f.answer(409, "fenced_out")
    # a stepped purchase goes to Redis past the local sold-out flag
    ex(200, "PUT", "/stock/st3?stock=0")
    ex(409, "POST", "/miaosha/token?sku=st3&user=so1", error="sold_out")
    st, h, b, doc = ex(409, "POST", "/miaosha/lua?sku=st3&user=so2", error="sold_out")
    check(doc and doc.get("local") is True, f"the flag is up: {b[:200]!r}")
    s3 = Buyer("POST", "/miaosha/token?sku=st3&user=so3&step=1", auth)
    drive("run", step_id("so3", auth))
    doc = s3.answer(409, "sold_out")
    check(doc is not None and "local" not in doc and doc.get("pipeline") is False,
          f"stepped, the sold-out answer comes from Redis: {doc}")
    # abandoned: Z left at start, Y at read (its lock released, nothing written)
    z = Buyer("POST", "/miaosha/token?sku=st1&user=aZ&step=1", auth)
    step_id("aZ", auth)
    y = Buyer("POST", "/miaosha/token?sku=st1&user=aY&step=1", auth)
    idy = step_id("aY", auth)
    drive("next", idy)
    drive("next", idy)
    z.answer(409, "step_abandoned")
    y.answer(409, "step_abandoned")
    doc = ex(200, "GET", "/steps")[3] or {}
    lock = doc.get("redis", {}).get("st1", {}).get("locks", {}).get("token", {})
    check(lock.get("value", "") is None, f"the abandoned step's lock is released: {lock}")
    # SIGTERM: W is in its work_ms, V paused at start
    w = Buyer("POST", "/miaosha/token?sku=st1&user=sW&step=1&work_ms=4000", auth)
    idw = step_id("sW", auth)
    drive("next", idw)
    drive("next", idw)
    wrun = Buyer("POST", f"/steps/{idw}/run?wait_ms=10000", auth)
    check(step_of("sW", auth, lambda e: e["waiting"] and e["stage"] == "read") is not None,
          "W works")
    v = Buyer("POST", "/miaosha/setnx?sku=st1&user=sV&step=1", auth)
    step_id("sV", auth)
    conns = [open_conn() for _ in range(5)]
    server.proc.send_signal(signal.SIGTERM)
    v.answer(503, "shutting_down")  # the server is shutting down now; W keeps it up
    for c, (method, path) in zip(conns, [
            ("GET", "/steps"), ("HEAD", "/steps"), ("POST", f"/steps/{idw}/next"),
            ("POST", f"/steps/{idw}/run"), ("POST", "/miaosha/token?sku=st1&user=sU&step=1")]):
        st, _, b, doc = http(method, path, None, auth, conn=c)
        check(st == 503 and (method == "HEAD" or (doc or {}).get("error") == "shutting_down"),
              f"{method} {path} while shutting down: {st} {b[:200]!r}")
    wrun.answer(200)
    w.answer()
    try:
        check(server.proc.wait(10) == 0, "the steps' server exits 0 on SIGTERM")
    except subprocess.TimeoutExpired:
        check(False, "the steps' server exits on SIGTERM")


def redis_cmd(port, *args):
    """One command to the Redis on port; its reply's first line."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(f"*{len(args)}\r\n".encode() +
              b"".join(f"${len(a.encode())}\r\n{a}\r\n".encode() for a in args))
    reply = s.recv(4096).split(b"\r\n")[0].decode()
    s.close()
    return reply


def walk_no_faults(rport):
    """A server without faults.enabled: 403 faults_disabled for step=1,
    fault= and the /steps routes. Its lock.max_wait_ms is short: a reset
    whose turn is held (by hand, as another reset would) is 429."""
    key = "miaosha:{oa-turn}:lock:reset"
    check(redis_cmd(rport, "HSET", key, "other", "1") == ":1" and
          redis_cmd(rport, "PEXPIRE", key, "20000") == ":1", "the reset's turn held by hand")
    expect(429, "PUT", "/stock/oa-turn?stock=1", error="lock_busy")
    redis_cmd(rport, "DEL", key)
    expect(403, "GET", "/steps", error="faults_disabled")
    expect(403, "HEAD", "/steps")
    expect(403, "POST", "/steps/1/next", error="faults_disabled")
    expect(403, "POST", "/steps/1/run", error="faults_disabled")
    expect(403, "POST", "/miaosha/token?sku=oa&user=nf&step=1", error="faults_disabled")
    expect(403, "GET", "/miaosha/lua?sku=oa&user=nf&step=1", error="faults_disabled")
    expect(403, "POST", "/miaosha/token?sku=oa&user=nf&fault=crash_in_section",
           error="faults_disabled")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """A miaosha-server on a free port, its output in tmp/NAME.log."""

    def __init__(self, tmp, name, rport, settings):
        self.name, self.port = name, None
        self.log = open(os.path.join(tmp, f"{name}.log"), "w+")
        args = [SERVER, "--port", "0", "--redis", f"127.0.0.1:{rport}", "--instance-id", name]
        for kv in settings:
            args += ["--set", kv]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        end = time.time() + 10
        while self.port is None and time.time() < end and self.proc.poll() is None:
            self.log.seek(0)
            m = re.search(r"listening on \S+ port (\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
            else:
                time.sleep(0.05)

    def stop(self):
        """SIGTERM, unless it has ended already; checks it exits 0."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                check(self.proc.wait(10) == 0, f"the server {self.name} exits 0 on SIGTERM")
            except subprocess.TimeoutExpired:
                self.proc.kill()
                check(False, f"the server {self.name} exits on SIGTERM")

    def tail(self):
        self.log.seek(0)
        return f"---- server {self.name} log ----\n" + self.log.read()[-4000:]


def main():
    global PORT
    tmp = tempfile.mkdtemp(prefix="miaosha-openapi-")
    rport = free_port()
    redis = subprocess.Popen(
        [os.environ.get("MIAOSHA_REDIS_SERVER", "redis-server"), "--port", str(rport),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp],
        stdout=open(os.path.join(tmp, "redis.log"), "w"), stderr=subprocess.STDOUT)
    servers = []
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", rport), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        # main: everything but the steps' own statuses; steps: those, with
        # a short abandonment and two places; plain: no faults.enabled
        main_srv, steps_srv, plain = (Server(tmp, name, rport, settings) for name, settings in [
            ("openapi", [f"admin_token={TOKEN}", "faults.enabled=true",
                         "purchase.limit_per_user=1"]),
            ("steps", [f"admin_token={TOKEN}", "faults.enabled=true", "teach.max_steps=2",
                       "teach.step_timeout_s=3"]),
            ("plain", ["lock.max_wait_ms=300"])])
        servers = [main_srv, steps_srv, plain]
        for srv in servers:
            if srv.port is None:
                print(f"FAIL the server {srv.name} did not start")
                print(srv.tail())
                return 1

        def kill_redis():
            redis.kill()
            redis.wait()

        PORT = main_srv.port
        walk()
        PORT = steps_srv.port
        walk_steps(steps_srv)
        PORT = plain.port
        walk_no_faults(rport)
        PORT = main_srv.port
        walk_redis_down(kill_redis)
        documented = {(t, m, int(s)) for t, item in SPEC["paths"].items() for m, op in item.items()
                      if m in ("get", "head", "put", "post") for s in op["responses"]}
        missing = sorted(documented - seen - NOT_PROVOKED)
        check(not missing, f"documented but never answered: {missing}")
        step_missing = sorted(STEP_ANSWERS - step_seen, key=str)
        check(not step_missing, f"a stepped purchase never answered: {step_missing}")
        print(f"openapi: {len(seen)} (route, method, status) answered, "
              f"{len(documented)} documented, {len(NOT_PROVOKED & documented)} not provoked here; "
              f"{len(step_seen)} (method, status, error) of stepped purchases")
    finally:
        for srv in servers:
            srv.stop()
        if redis.poll() is None:
            redis.kill()
            redis.wait()
        if failed:
            for srv in servers:
                print(srv.tail())
        for srv in servers:
            srv.log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_service_openapi.py SERVER OPENAPI_JSON — the ctest service_openapi:
the server's real answers against its OpenAPI description.

Starts a private redis-server ($MIAOSHA_REDIS_SERVER) and the server (an
admin token, faults enabled, one order per user), then walks every route
and provokes every status the description documents for it (all but the
purchase's 499, which no client can read): every mode's sale, a replay, a
local sold-out answer, stock_reset, fenced_out, in_progress, limit_reached,
lock_busy, 422, 401, 403, 413, 414, 431, unknown paths and methods, a
never-stocked SKU, and with Redis killed the 503s. Each answer is checked
against docs/openapi.yaml as the server was built with it (OPENAPI_JSON,
also what GET /openapi.json must serve): the path and method exist (else
404 or 405 with Allow), the status is documented for them, the documented
required headers are there, the Content-Type is one of the response's, and
the body validates against its schema (JSON Schema 2020-12, Debian's
python3-jsonschema; the trace's lines against contentSchema). Last, every
documented (route, method, status) must have been seen, but the ones
listed in NOT_PROVOKED. Prints "N passed, N failed"; exit 1 on a failure.
"""
import json
import os
import re
import shutil
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
# Documented, but not provoked here: a 499 is never read by its client; a
# 503 of /stats, /metrics and /trace is an allocation that failed; 403
# faults_disabled needs a server without faults (service_modes has it).
NOT_PROVOKED = {
    ("/miaosha/{mode}", "get", 499), ("/miaosha/{mode}", "post", 499),
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
    ("/healthz", "get", 414), ("/healthz", "get", 431), ("/stock/{sku}", "get", 413),
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


def http(method, path, body=None, headers=None, what=None):
    """One request on a fresh connection; validated. Returns (status,
    headers (lower-case names), body bytes, parsed JSON or None)."""
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    for k, v in (headers or {}).items():
        head.append(f"{k}: {v}")
    data = body.encode() if isinstance(body, str) else (body or b"")
    if body is not None:
        head.append(f"Content-Length: {len(data)}")
    raw = ("\r\n".join(head) + "\r\n\r\n").encode() + data
    s = socket.create_connection(("127.0.0.1", PORT), timeout=30)
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
    return status, hdrs, payload, doc


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


# --- the walk ------------------------------------------------------------------

def walk(redis_kill):
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
    expect(414, "GET", "/stock/oa?" + "a" * 3000, error="uri_too_long")
    expect(431, "GET", "/stock/oa", None, {"X-Big": "h" * 17000}, error="headers_too_large")
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
    # observe
    expect(200, "GET", "/healthz")
    expect(200, "HEAD", "/healthz")
    expect(400, "GET", "/healthz?x=1", error="bad_request")
    expect(405, "POST", "/healthz", error="method_not_allowed")
    expect(200, "GET", "/stats")
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
    # Redis gone: the 503s
    redis_kill()
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


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    global PORT
    tmp = tempfile.mkdtemp(prefix="miaosha-openapi-")
    rport = free_port()
    redis = subprocess.Popen(
        [os.environ.get("MIAOSHA_REDIS_SERVER", "redis-server"), "--port", str(rport),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp],
        stdout=open(os.path.join(tmp, "redis.log"), "w"), stderr=subprocess.STDOUT)
    log = open(os.path.join(tmp, "server.log"), "w+")
    server = None
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", rport), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        server = subprocess.Popen(
            [SERVER, "--port", "0", "--redis", f"127.0.0.1:{rport}", "--instance-id", "openapi",
             "--set", f"admin_token={TOKEN}", "--set", "faults.enabled=true",
             "--set", "purchase.limit_per_user=1"],
            stdout=log, stderr=subprocess.STDOUT)
        end = time.time() + 10
        while PORT is None and time.time() < end:
            log.seek(0)
            m = re.search(r"listening on \S+ port (\d+)", log.read())
            if m:
                PORT = int(m.group(1))
            else:
                time.sleep(0.05)
        if PORT is None:
            print("FAIL the server did not start")
            log.seek(0)
            print(log.read())
            return 1

        def kill_redis():
            redis.kill()
            redis.wait()

        walk(kill_redis)
        documented = {(t, m, int(s)) for t, item in SPEC["paths"].items() for m, op in item.items()
                      if m in ("get", "head", "put", "post") for s in op["responses"]}
        missing = sorted(documented - seen - NOT_PROVOKED)
        check(not missing, f"documented but never answered: {missing}")
        print(f"openapi: {len(seen)} (route, method, status) answered, "
              f"{len(documented)} documented, {len(NOT_PROVOKED & documented)} not provoked here")
    finally:
        if server is not None:
            server.terminate()
            try:
                check(server.wait(10) == 0, "the server exits 0 on SIGTERM")
            except subprocess.TimeoutExpired:
                server.kill()
                check(False, "the server exits on SIGTERM")
        if redis.poll() is None:
            redis.kill()
            redis.wait()
        if failed:
            log.seek(0)
            print("---- server log ----\n" + log.read()[-4000:])
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

-- purchase.lua — wrk script for miaosha: every request buys as a distinct
-- user, every status is counted, and the audit is printed at the end.
--
--   MODE=token SKU=demo-token STOCK=100 WORK_MS=5 WAIT_MS=30000 \
--     wrk -t2 -c100 -d10s -s loadtest/wrk/purchase.lua http://127.0.0.1:8080
--
-- One SKU per mode (demo-none, demo-token, ...): the audit is the SKU's, so
-- two modes on one SKU would share it.
--
-- Environment (all optional):
--   MODE      none|mutex|setnx|token|reentrant|redlock|fenced|lua (default token;
--             redlock needs a server with redlock.nodes)
--   SKU       product id (default demo: purchase.sku, which the server seeds at start)
--   WORK_MS, LEASE_MS, WAIT_MS, REENTER   sent as query parameters when set
--   METHOD    POST (default) or GET
--   STOCK     when set, PUT /stock/{SKU} {"stock":STOCK} runs once, in setup(),
--             before the load (through curl; ADMIN_TOKEN adds the Bearer header;
--             the reset creates a SKU never stocked)
--   AUDIT     0 = only print the curl line for the audit instead of running it
--
-- What wrk allows, honestly: its Lua API cannot make an HTTP request of its
-- own, neither in setup() nor in done(). The stock reset and the audit are
-- therefore run by curl through os.execute(), a child process of wrk: the
-- reset in setup(), which wrk calls once per thread before any request
-- (the first call resets, the others skip it), the audit in done(), after
-- the load has finished; with AUDIT=0 the script only prints the audit's
-- command.
-- wrk bounds the load by time (-d), not by count: stop conditions in
-- miaosha-load are stricter (see loadtest/README.md). Per-thread counters are
-- collected in done() through thread:get(), which wrk supports.

local mode = os.getenv("MODE") or "token"
local sku = os.getenv("SKU") or "demo"
local method = os.getenv("METHOD") or "POST"

local query = "sku=" .. sku
for _, p in ipairs({"WORK_MS", "LEASE_MS", "WAIT_MS", "REENTER"}) do
  local v = os.getenv(p)
  if v and v ~= "" then
    query = query .. "&" .. string.lower(p) .. "=" .. v
  end
end

-- main state: one call per thread, before the load
local threads = {}
local addr = nil
local reset_done = false

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
  addr = addr or tostring(thread.addr)
  local stock = os.getenv("STOCK")
  if stock and not reset_done then
    reset_done = true
    local auth = ""
    local tok = os.getenv("ADMIN_TOKEN")
    if tok and tok ~= "" then
      auth = " -H 'Authorization: Bearer " .. tok .. "'"
    end
    local cmd = "curl -s -X PUT" .. auth .. " -d '{\"stock\":" .. stock .. "}' http://" ..
                addr .. "/stock/" .. sku
    io.write("reset: ", cmd, "\n")
    io.flush()
    os.execute(cmd)
    io.write("\n")
  end
end

-- thread states
local counter = 0
-- globals (not locals): done() reads them through thread:get()
s200, s404, s409, s429, s503, sother = 0, 0, 0, 0, 0, 0

function init(args)
  -- tid is set by setup() before init runs
end

function request()
  counter = counter + 1
  -- distinct users: w<thread>-<n>
  local path = "/miaosha/" .. mode .. "?" .. query .. "&user=w" .. tostring(tid) .. "-" ..
               counter
  if method == "GET" then
    return wrk.format("GET", path)
  end
  return wrk.format("POST", path, {["Content-Length"] = "0"})
end

function response(status, headers, body)
  if status == 200 then s200 = s200 + 1
  elseif status == 404 then s404 = s404 + 1
  elseif status == 409 then s409 = s409 + 1
  elseif status == 429 then s429 = s429 + 1
  elseif status == 503 then s503 = s503 + 1
  else sother = sother + 1 end
end

-- main state, after the load
function done(summary, latency, requests)
  local t = {s200 = 0, s404 = 0, s409 = 0, s429 = 0, s503 = 0, sother = 0}
  for _, th in ipairs(threads) do
    for k, _ in pairs(t) do
      t[k] = t[k] + (th:get(k) or 0)
    end
  end
  io.write(string.format(
    "statuses: 200 ok %d, 409 sold_out %d, 429 lock_busy %d, 503 redis_unavailable %d, other %d\n",
    t.s200, t.s409, t.s429, t.s503, t.sother))
  if t.s404 > 0 then
    io.write(string.format("404 unknown_sku %d: SKU %s was never stocked; set STOCK=N to reset it first\n",
      t.s404, sku))
  end
  io.write(string.format("latency ms: p50 %.2f p90 %.2f p99 %.2f max %.2f\n",
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000))
  local cmd = "curl -s http://" .. (addr or "127.0.0.1:8080") .. "/stock/" .. sku
  if os.getenv("AUDIT") == "0" then
    io.write("audit: run  ", cmd, "\n")
  else
    io.write("audit (", cmd, "):\n")
    io.flush()
    os.execute(cmd)
    io.write("\n")
  end
  io.write("read it: oversold > 0 means more was sold than the stock went down; ",
           "undersold > 0 means stock went down without an order\n")
end

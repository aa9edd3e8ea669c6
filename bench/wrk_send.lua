-- wrk script: blocking SendMessage (JSON-RPC, A2A 1.0), a fresh messageId per request.
-- Usage: wrk -t1 -c64 -d8s -s bench/wrk_send.lua http://127.0.0.1:PORT/ENDPOINT_ID/a2a
-- done() prints one line "WRKJSON {...}" with counts and latency percentiles in µs.

local counter = 0
local thread_tag = tostring(math.random(1, 1000000000))

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"
local api_key = os.getenv("A2A_BENCH_API_KEY")
if api_key then
  wrk.headers["X-API-Key"] = api_key
end

request = function()
  counter = counter + 1
  local body = '{"jsonrpc":"2.0","id":' .. counter .. ',"method":"SendMessage","params":{"message":'
    .. '{"messageId":"bench-' .. thread_tag .. '-' .. counter .. '","role":"ROLE_USER",'
    .. '"parts":[{"text":"hello gateway"}]}}}'
  return wrk.format(nil, nil, nil, body)
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"non2xx":%d,"connect":%d,"read":%d,'
      .. '"write":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"mean_us":%.1f,"max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.status, e.connect, e.read, e.write,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.mean, latency.max))
end

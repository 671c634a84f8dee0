-- Shared by the wrk scripts. Run wrk with as many connections as threads (-t N -c N): each thread
-- then owns one keep-alive connection whose requests are strictly sequential, so a thread can
-- walk a multi-request cycle and its ids (run-thread-counter) are unique.
local M = {}

local threads = {}
local next_tid = 1

function M.setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
  table.insert(threads, thread)
end

M.headers = { ["Content-Type"] = "application/json", ["Connection"] = "keep-alive" }

function M.envelope(kind, data)
  return '{"kind":"' .. kind .. '","head":{"corrId":"wrk","version":"2026-04-01"},"data":' .. data .. '}'
end

function M.post(body)
  return wrk.format("POST", "/", M.headers, body)
end

-- Called by each thread's response(): count answers that are not 200, keep the first one.
function M.check(status, body)
  if status ~= 200 then
    bad = (bad or 0) + 1
    if first_bad == nil then first_bad = status .. " " .. string.sub(body or "", 1, 200) end
  end
end

-- The next (cycle number, step) of a cycle of ``len`` requests.
function M.advance(n, step, len)
  step = step + 1
  if step == len then return n + 1, 0 end
  return n, step
end

-- One JSON line on stdout for the harness (latency in microseconds).
function M.done(summary, latency, requests)
  local bad_total, first = 0, ""
  for _, t in ipairs(threads) do
    bad_total = bad_total + (t:get("bad") or 0)
    local f = t:get("first_bad")
    if f ~= nil and first == "" then first = f end
  end
  first = string.gsub(string.gsub(first, '\\', '\\\\'), '"', '\\"')
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,'
      .. '"max_us":%d,"mean_us":%.1f,"non200":%d,"first_non200":"%s","socket_errors":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, latency.mean, bad_total, first,
    e.connect + e.read + e.write + e.timeout))
end

return M

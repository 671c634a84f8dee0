-- (2a) promise.create then promise.settle of the same id, over and over.
-- wrk -t N -c N -s promise_pair.lua URL -- RUN_ID TIMEOUT_AT
package.path = string.match(debug.getinfo(1, "S").source, "^@(.*/)") .. "?.lua;" .. package.path
local c = require("common")

setup = c.setup
done = c.done

function init(args)
  run, far = args[1] or "pair", args[2] or "9999999999999"
  n, step = 1, 0
end

-- request() must not advance the cycle: wrk calls it once more than it sends, on the first
-- thread, to verify the script. response() advances it.
function request()
  local id = run .. "-" .. tid .. "-" .. n
  if step == 0 then
    return c.post(c.envelope("promise.create",
      '{"id":"' .. id .. '","timeoutAt":' .. far .. ',"param":{"headers":{},"data":"e30="},"tags":{}}'))
  end
  return c.post(c.envelope("promise.settle",
    '{"id":"' .. id .. '","state":"resolved","value":{"headers":{},"data":"e30="}}'))
end

function response(status, headers, body)
  c.check(status, body)
  n, step = c.advance(n, step, 2)
end

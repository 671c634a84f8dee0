-- (2b) The SDK-shaped cycle of one workflow with two ctx.run children:
--   task.create -> task.fence(promise.create :1) -> task.fence(promise.settle :1)
--               -> task.fence(promise.create :2) -> task.fence(promise.settle :2) -> task.fulfill
-- Tags as resonate-sdk 0.8.1 writes them (root: origin/branch/parent, scope global, a target;
-- children: scope local, no target). Six requests per cycle.
-- wrk -t N -c N -s task_cycle.lua URL -- RUN_ID TIMEOUT_AT
package.path = string.match(debug.getinfo(1, "S").source, "^@(.*/)") .. "?.lua;" .. package.path
local c = require("common")

setup = c.setup
done = c.done

function init(args)
  run, far = args[1] or "cycle", args[2] or "9999999999999"
  n, step = 1, 0
  pid = run .. "-w" .. tid
end

local function tags(root, scope, target)
  local t = '"resonate:origin":"' .. root .. '","resonate:branch":"' .. root
    .. '","resonate:parent":"' .. root .. '","resonate:scope":"' .. scope .. '"'
  if target then t = t .. ',"resonate:target":"poll://any@bench"' end
  return "{" .. t .. "}"
end

local function create(id, root, scope, target)
  return '{"kind":"promise.create","head":{"corrId":"i","version":"2026-04-01"},"data":{"id":"'
    .. id .. '","timeoutAt":' .. far .. ',"param":{"headers":{},"data":"e30="},"tags":'
    .. tags(root, scope, target) .. '}}'
end

local function settle(id)
  return '{"kind":"promise.settle","head":{"corrId":"i","version":"2026-04-01"},"data":{"id":"'
    .. id .. '","state":"resolved","value":{"headers":{},"data":"e30="}}}'
end

local function fence(root, action)
  return c.envelope("task.fence", '{"id":"' .. root .. '","version":1,"action":' .. action .. '}')
end

-- request() must not advance the cycle: wrk calls it once more than it sends, on the first
-- thread, to verify the script. response() advances it.
function request()
  local s = step
  local root = run .. "-" .. tid .. "-" .. n
  if s == 0 then
    return c.post(c.envelope("task.create", '{"pid":"' .. pid .. '","ttl":60000,"action":'
      .. create(root, root, "global", true) .. '}'))
  elseif s == 1 then
    return c.post(fence(root, create(root .. ":1", root, "local", false)))
  elseif s == 2 then
    return c.post(fence(root, settle(root .. ":1")))
  elseif s == 3 then
    return c.post(fence(root, create(root .. ":2", root, "local", false)))
  elseif s == 4 then
    return c.post(fence(root, settle(root .. ":2")))
  end
  return c.post(c.envelope("task.fulfill", '{"id":"' .. root .. '","version":1,"action":'
    .. settle(root) .. '}'))
end

function response(status, headers, body)
  c.check(status, body)
  n, step = c.advance(n, step, 6)
end

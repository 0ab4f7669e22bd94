-- The fleet's one script (see protocol.rs and docs/fleet.md), run atomically on the server by every
-- agent: ARGV[1] is the operation, 'renew' or 'leave'.
-- KEYS[1] = {fleet:NAME}:members, KEYS[2] = {fleet:NAME}:config.
-- ARGV: op, member, weight, min, held, ttl (ms), total (units), agent's epoch, instance, demand,
-- opens ('1': the agent has seen its epoch for one lease on its own monotonic clock).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op = ARGV[1]
local me = ARGV[2]
local weight = tonumber(ARGV[3])
local mymin = tonumber(ARGV[4])
local held = tonumber(ARGV[5])
local ttl = tonumber(ARGV[6])
local total = tonumber(ARGV[7])
local agent_epoch = ARGV[8]
local inst = ARGV[9]
local mydemand = tonumber(ARGV[10]) or total
local function rate(u)
  local s = string.format('%d', math.floor(u / 1000000))
  local f = u % 1000000
  if f > 0 then s = s .. (string.gsub(string.format('.%06d', f), '0+$', '')) end
  return s .. '/s'
end
local function enc(w, g, mn, exp, j, i, d, h)
  return string.format('%d %d %d %d %d ', w, g, mn, exp, j) .. i .. string.format(' %d %d', d, h)
end
if op == 'leave' then
  local cur = redis.call('HGET', KEYS[1], me)
  if cur and string.match(cur, '^%d+ %d+ %d+ %d+ %d+ (%w+)') == inst then redis.call('HDEL', KEYS[1], me) end
  return {'left', 0, 0, now, 0, 0, 0}
end
-- Expire leases: a dead member keeps only min(grant, its minimum) (its reserved minimum),
-- and disappears when that is 0.
local recs = {}
local nlive = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local w, g, mn, exp, j, ins, d, h = string.match(all[i + 1], '^(%d+) (%d+) (%d+) (%d+) (%d+) (%w+) ?(%d*) ?(%d*)$')
  if w then
    local r = {w = tonumber(w), g = tonumber(g), mn = tonumber(mn), exp = tonumber(exp), j = tonumber(j), ins = ins, d = tonumber(d) or total, h = tonumber(h) or 0}
    r.live = r.exp >= now
    if r.live then
      recs[all[i]] = r
      nlive = nlive + 1
    else
      local keep = math.min(r.g, r.mn)
      if keep > 0 then
        if keep ~= r.g then
          r.g = keep
          redis.call('HSET', KEYS[1], all[i], enc(r.w, keep, r.mn, r.exp, r.j, r.ins, r.d, math.min(r.h, keep)))
        end
        recs[all[i]] = r
      else
        redis.call('HDEL', KEYS[1], all[i])
      end
    end
  else
    redis.call('HDEL', KEYS[1], all[i])
  end
end
-- The state is this server process's own only if the process that wrote it is this one: a
-- restart that reloaded a snapshot or an append-only file, or a replica promoted after a
-- failover, has the keys of another process (run_id), possibly without its latest grants.
local srv = redis.call('INFO', 'server')
local run_id = string.match(srv, 'run_id:(%w+)') or ''
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if epoch and redis.call('HGET', KEYS[2], 'run_id') ~= run_id then epoch = nil end
if not epoch then
  -- No state of this process (first start, a restart, a flush, a failover): a new epoch. Its
  -- members start with nothing but what they re-assert (a share whose lease runs on its host:
  -- those were disjoint when granted, and are admitted up to the total), and it grants nothing
  -- new until it is open: when an agent reports that it has seen this epoch for one lease on
  -- its own monotonic clock (every lease of the lost state was granted before this epoch began,
  -- so its holder has fenced it by then; see docs/fleet.md). Open at once only for a fleet this
  -- server can show never had state here: a primary never promoted from a replica, that
  -- never evicts keys without a TTL (the fleet's have none) and was never flushed, up for more
  -- than a lease (`uptime_in_seconds` is a difference of whole seconds: the start is at most
  -- now - (uptime - 1) s). `quiet_until` is the server's estimate of the opening, for status.
  local rep = redis.call('INFO', 'replication')
  local mem = redis.call('INFO', 'memory')
  local cmds = redis.call('INFO', 'commandstats')
  local uptime = tonumber(string.match(srv, 'uptime_in_seconds:(%d+)') or '0')
  local role = string.match(rep, 'role:(%w+)')
  local second = string.match(rep, 'second_repl_offset:(%-?%d+)')
  local policy = string.match(mem, 'maxmemory_policy:([%w%-]+)') or ''
  local flushed = string.find(cmds, 'cmdstat_flushall:', 1, true) or string.find(cmds, 'cmdstat_flushdb:', 1, true) or string.find(cmds, 'cmdstat_swapdb:', 1, true)
  local open = '0'
  local quiet_len = ttl
  if role == 'master' and second == '-1' and string.sub(policy, 1, 8) ~= 'allkeys-' and not flushed and (uptime - 1) * 1000 >= ttl then
    open = '1'
    quiet_len = 0
  end
  epoch = t[1] .. '.' .. t[2]
  redis.call('DEL', KEYS[1], KEYS[2])
  recs = {}
  nlive = 0
  redis.call('HSET', KEYS[2], 'epoch', epoch, 'total', ARGV[7], 'ttl', ARGV[6], 'quiet_until', now + quiet_len, 'open', open, 'run_id', run_id)
else
  local ctotal = redis.call('HGET', KEYS[2], 'total')
  local cttl = redis.call('HGET', KEYS[2], 'ttl')
  if ctotal ~= ARGV[7] or cttl ~= ARGV[6] then
    local others = nlive
    if recs[me] and recs[me].live then others = others - 1 end
    if others > 0 then
      return redis.error_reply('FLEETCONFIG the fleet runs with total ' .. rate(tonumber(ctotal) or 0) .. ' and ttl ' .. tostring(cttl) .. ' ms; this agent has total ' .. rate(total) .. ' and ttl ' .. ARGV[6] .. ' ms')
    end
    redis.call('HSET', KEYS[2], 'total', ARGV[7], 'ttl', ARGV[6])
  end
end
-- An agent that has seen this epoch for one lease on its own clock opens it.
local open = redis.call('HGET', KEYS[2], 'open') == '1'
if not open and ARGV[11] == '1' and agent_epoch == epoch then
  redis.call('HSET', KEYS[2], 'open', '1')
  open = true
end
local old = recs[me]
local g = 0
local joined = now
if old then
  if old.live and old.ins ~= inst then
    return redis.error_reply('FLEETDUP member ' .. me .. ' is held by another running agent (instance ' .. old.ins .. ', its lease ends in ' .. (old.exp - now) .. ' ms): give each agent its own --member')
  end
  if agent_epoch == epoch and old.ins == inst then g = old.g end
  if old.live then joined = old.j end
  recs[me] = nil
end
local sum_w = weight
local sum_g = 0
local reserved = mymin
local live_after = 1
for _, r in pairs(recs) do
  sum_g = sum_g + r.g
  if r.live then
    sum_w = sum_w + r.w
    reserved = reserved + r.mn
    live_after = live_after + 1
  else
    reserved = reserved + r.g
  end
end
if reserved > total then
  return redis.error_reply('FLEETMIN the reserved minimums (' .. rate(reserved) .. ') exceed the total (' .. rate(total) .. ')')
end
local avail = total - reserved
-- A member that comes from an older epoch re-asserts `held`, the share its host applies under
-- a lease that still runs there (or its fence): admitted up to the total.
if agent_epoch ~= '' and agent_epoch ~= epoch then g = math.max(0, math.min(held, total - sum_g)) end
-- Max-min fair targets, weighted, capped by demand: each live member wants its reported demand
-- plus a quarter (headroom to be seen growing) above its minimum; members that want less than
-- their weighted part of what is left get what they want, the others share the rest by weight;
-- what nobody wants is spread by weight over everyone. The targets add up to at most `avail`
-- plus the minimums: they only steer, the grants below stay within `free` whatever they are.
local ms = {{w = weight, e = math.max(0, mydemand + math.floor(mydemand / 4) - mymin), me = true}}
for _, r in pairs(recs) do
  if r.live then
    table.insert(ms, {w = r.w, e = math.max(0, r.d + math.floor(r.d / 4) - r.mn)})
  end
end
local rem = avail
local open_w = sum_w
local mine = nil
local changed = true
while changed and open_w > 0 do
  changed = false
  for _, m in ipairs(ms) do
    if not m.done and m.e * open_w <= rem * m.w then
      m.done = true
      rem = rem - m.e
      open_w = open_w - m.w
      if m.me then mine = m.e end
      changed = true
    end
  end
end
if mine == nil then
  mine = math.floor(rem * weight / open_w)
elseif open_w == 0 then
  mine = mine + math.floor(rem * weight / sum_w)
end
local target = mymin + mine
-- The agent applies at most `held`: what it does not use is released now.
if held < g then g = held end
if open and g < target then
  local free = total - sum_g - g
  if free > 0 then g = g + math.min(target - g, free) end
end
redis.call('HSET', KEYS[1], me, enc(weight, g, mymin, now + ttl, joined, inst, mydemand, math.min(held, g)))
return {epoch, g, target, now, now + ttl, live_after, sum_w}

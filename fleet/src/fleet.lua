-- The fleet's one script (see protocol.rs and FLEET.md), run atomically on the server by every
-- agent: ARGV[1] is the operation, 'renew' or 'leave'.
-- KEYS[1] = {fleet:NAME}:members, KEYS[2] = {fleet:NAME}:config.
-- ARGV: op, member, weight, min, held, ttl (ms), total (units), agent's epoch, instance, demand.
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
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if not epoch then
  -- No state (first start, or a restart or failover that lost it): a new epoch, and no grant
  -- for one lease so that every grant of the lost state has been fenced first.
  -- The quarantine ends one lease after the last instant a lease of the lost state can have
  -- been granted: at the latest now. When the server can show more (it is a primary that was
  -- never promoted from a replica and never evicts keys without a TTL, which the fleet's keys
  -- are), the lost state's leases were granted before this server started (the fleet's keys
  -- were never here, or died with the previous process), so the quarantine ends one lease
  -- after its start (`uptime_in_seconds` rounds down: the start is at most now - uptime): a
  -- new fleet on a server up for longer than a lease has none (see FLEET.md).
  local quiet_len = ttl
  local srv = redis.call('INFO', 'server')
  local rep = redis.call('INFO', 'replication')
  local mem = redis.call('INFO', 'memory')
  local uptime = tonumber(string.match(srv, 'uptime_in_seconds:(%d+)') or '0')
  local role = string.match(rep, 'role:(%w+)')
  local second = string.match(rep, 'second_repl_offset:(%-?%d+)')
  local policy = string.match(mem, 'maxmemory_policy:([%w%-]+)') or ''
  if role == 'master' and second == '-1' and string.sub(policy, 1, 8) ~= 'allkeys-' then
    quiet_len = math.max(0, ttl - uptime * 1000)
  end
  epoch = t[1] .. '.' .. t[2]
  redis.call('DEL', KEYS[1])
  recs = {}
  nlive = 0
  redis.call('HSET', KEYS[2], 'epoch', epoch, 'total', ARGV[7], 'ttl', ARGV[6], 'quiet_until', now + quiet_len)
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
local quiet = tonumber(redis.call('HGET', KEYS[2], 'quiet_until') or '0')
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
if now >= quiet and g < target then
  local free = total - sum_g - g
  if free > 0 then g = g + math.min(target - g, free) end
end
redis.call('HSET', KEYS[1], me, enc(weight, g, mymin, now + ttl, joined, inst, mydemand, math.min(held, g)))
return {epoch, g, target, now, now + ttl, live_after, sum_w}

"""The Lua of a run's state and its plan: what the run is doing, and its tasks (`core.plan`).

KEYS and ARGV are named at the top of each script, as in `core.scripts`.
"""

from __future__ import annotations

from core.plan import MOST_TASKS

# A run's plan tasks (`core.plan`): put the field / value pairs ARGV[from], ARGV[from + 1]… into
# the hash `key`. A value is `rank|at|json`: a lower rank never replaces a higher one, and a
# task keeps the time it was first noted. Nothing beyond MOST_TASKS is noted.
TASKS_LUA = f"""
local function put_tasks(key, from)
  for n = from, #ARGV, 2 do
    local field, new = ARGV[n], ARGV[n + 1]
    local old = redis.call('HGET', key, field)
    if old then
      local rank, at = string.match(old, '^(%d)|([^|]*)|')
      if tonumber(rank) > tonumber(string.sub(new, 1, 1)) then
        new = nil
      else
        new = string.sub(new, 1, 2) .. at .. string.sub(new, string.find(new, '|', 3, true), -1)
      end
    elseif redis.call('HLEN', key) >= {MOST_TASKS} + 8 then
      new = nil
    end
    if new then redis.call('HSET', key, field, new) end
  end
end
"""

PUT_TASKS = (
    TASKS_LUA
    + """
local run_state, status_due = KEYS[1], KEYS[2]
local thread_id, due_ms = ARGV[1], ARGV[2]
-- ARGV[3…]: the task pairs

put_tasks(run_state, 3)
redis.call('ZADD', status_due, 'LT', due_ms, 'status:' .. thread_id)
return 1
"""
)

# What the run is doing (its status message follows), and the tasks its messages show.
SET_RUN_STATE = (
    TASKS_LUA
    + """
local run_state, idle, status_due = KEYS[1], KEYS[2], KEYS[3]
local state, detail, tool, is_idle, thread_id, now, due_ms = unpack(ARGV, 1, 7)
-- ARGV[8…]: the task pairs

redis.call('HSET', run_state, 'state', state, 'detail', detail, 'tool', tool)
if is_idle == '1' then redis.call('ZADD', idle, now, thread_id)
else redis.call('ZREM', idle, thread_id) end
put_tasks(run_state, 8)
redis.call('ZADD', status_due, 'LT', due_ms, 'status:' .. thread_id)
return 1
"""
)

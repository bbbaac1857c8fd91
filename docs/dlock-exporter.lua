-- dlock metrics for redis_exporter's -script option
-- (redis_exporter -script docs/dlock-exporter.lua ...).
--
-- redis_exporter keeps only the module INFO fields it knows, so this script
-- reads INFO dlock itself and returns alternating names and values (strings),
-- which redis_exporter exports as redis_script_values{key="<name>"}:
--   every counter and gauge as it is (dlock_grants, dlock_waiters, ...);
--   every percentile line (dlock_wait_percentiles_usec, ..._<kind>) split
--   into one value per percentile: dlock_wait_percentiles_usec_p50,
--   ..._p99, ..._p99_9 (microseconds).
-- Run it by hand with: redis-cli EVAL "$(cat docs/dlock-exporter.lua)" 0

local result = {}
local info = redis.call("INFO", "dlock")
for line in string.gmatch(info, "[^\r\n]+") do
  local name, value = string.match(line, "^(dlock_[%w_]+):(.+)$")
  if name then
    if string.find(value, "=", 1, true) then
      -- latencystats format: p50=1.000,p99=2.000,p99.9=3.000
      for p, v in string.gmatch(value, "p([%d%.]+)=([%d%.]+)") do
        table.insert(result, name .. "_p" .. string.gsub(p, "%.", "_"))
        table.insert(result, v)
      end
    elseif string.match(value, "^[%d%.]+$") then
      table.insert(result, name)
      table.insert(result, value)
    end
  end
end
return result

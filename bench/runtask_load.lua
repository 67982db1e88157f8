-- wrk script of bench/runtask_load.sh: POSTs RunTask (count 1) on every keep-alive connection, sorts the answers
-- into successful placements, placement failures (200 with failures[]) and errors (non-200), and prints the
-- figures as "key value" lines the shell script reads. Environment: GPUPACK_CLUSTER, GPUPACK_TASKDEF.

local cluster = os.getenv("GPUPACK_CLUSTER") or "bench"
local taskdef = os.getenv("GPUPACK_TASKDEF") or "bench-shared-2g"

wrk.method = "POST"
wrk.path = "/"
wrk.headers["Content-Type"] = "application/x-amz-json-1.1"
wrk.headers["X-Amz-Target"] = "AmazonEC2ContainerServiceV20141113.RunTask"
wrk.body = '{"cluster":"' .. cluster .. '","taskDefinition":"' .. taskdef .. '","count":1}'

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  placed, failed, errors = 0, 0, 0
end

function response(status, headers, body)
  if status ~= 200 then
    errors = errors + 1
  elseif string.find(body, '"failures":[]', 1, true) and string.find(body, '"tasks":[{', 1, true) then
    placed = placed + 1
  else
    failed = failed + 1
  end
end

function done(summary, latency, requests)
  local placed_total, failed_total, errors_total = 0, 0, 0
  for _, t in ipairs(threads) do
    placed_total = placed_total + t:get("placed")
    failed_total = failed_total + t:get("failed")
    errors_total = errors_total + t:get("errors")
  end
  local secs = summary.duration / 1e6
  local e = summary.errors
  io.write(string.format("result.requests %d\n", summary.requests))
  io.write(string.format("result.duration_s %.3f\n", secs))
  io.write(string.format("result.calls_per_s %.0f\n", summary.requests / secs))
  io.write(string.format("result.placed %d\n", placed_total))
  io.write(string.format("result.placement_failures %d\n", failed_total))
  io.write(string.format("result.http_errors %d\n", errors_total))
  io.write(string.format("result.socket_errors connect=%d read=%d write=%d timeout=%d\n",
                         e.connect, e.read, e.write, e.timeout))
  io.write(string.format("result.latency_mean_ms %.3f\n", latency.mean / 1000))
  io.write(string.format("result.latency_p50_ms %.3f\n", latency:percentile(50) / 1000))
  io.write(string.format("result.latency_p90_ms %.3f\n", latency:percentile(90) / 1000))
  io.write(string.format("result.latency_p99_ms %.3f\n", latency:percentile(99) / 1000))
  io.write(string.format("result.latency_p999_ms %.3f\n", latency:percentile(99.9) / 1000))
  io.write(string.format("result.latency_max_ms %.3f\n", latency.max / 1000))
end

# Every second, one line: MemTotal MemAvailable SwapTotal SwapFree (kB, /proc/meminfo), then
# the memory.current of vllm.service's and of the neighbour's cgroups (bytes, 0 when absent).
# Run as `sh -s` over ssh; the controller stamps each line as it arrives.
cg=/sys/fs/cgroup/system.slice
while :; do
  mem=$(awk '/^MemTotal:/ {t=$2} /^MemAvailable:/ {a=$2} /^SwapTotal:/ {st=$2} /^SwapFree:/ {sf=$2}
             END {print t, a, st, sf}' /proc/meminfo)
  unit=$(cat $cg/vllm.service/memory.current 2>/dev/null || echo 0)
  neighbour=$(cat $cg/cure-neighbour.service/memory.current 2>/dev/null || echo 0)
  echo "$mem $unit $neighbour"
  sleep 1
done

# `hostkit doctor`'s recent history, GPU and collector parts; unit names the vLLM unit (set by
# the unit part). hostkit.doctor.gather sets before it: hk_mark, hk_kept (how many journal
# lines to keep), hk_watchdog_unit, hk_watchdog_decisions (an ERE of the watchdog's lines
# worth reporting), hk_watchdog_state (its state file), hk_apps_query (the
# --query-compute-apps fields) and hk_metrics (the collector's metrics file).
echo "${hk_mark}engine-deaths@@"
echo "now=$(date +%s)"
journalctl -u "$unit" --since -24h -q --no-pager -o short-iso 2>/dev/null | awk -v kept="$hk_kept" '
  /EngineDeadError/ { n++; last[n % kept] = $0 }
  END { print "count=" n+0; for (i = n - kept + 1; i <= n; i++) if (i > 0) print "line " last[i % kept] }'
echo "${hk_mark}watchdog@@"
journalctl -u "$hk_watchdog_unit" --since -24h -q --no-pager -o short-iso 2>/dev/null \
  | grep -E "$hk_watchdog_decisions" | tail -n "$hk_kept" | sed 's/^/line /'
[ -r "$hk_watchdog_state" ] && printf 'state %s\n' "$(tr -d '\n' < "$hk_watchdog_state")"
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "${hk_mark}gpu@@"
  nvidia-smi --query-gpu=index,uuid,memory.total,memory.used --format=csv,noheader,nounits 2>&1; echo "rc=$?"
  echo "${hk_mark}gpu-apps@@"
  nvidia-smi --query-compute-apps="$hk_apps_query" --format=csv,noheader,nounits 2>&1
fi
if [ -r "$hk_metrics" ]; then
  echo "${hk_mark}metrics@@"
  echo "path=$hk_metrics"; echo "age=$(( $(date +%s) - $(stat -c %Y "$hk_metrics") ))"; cat "$hk_metrics"
fi
true

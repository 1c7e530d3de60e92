# `hostkit doctor`'s recent history and collector parts; unit names the vLLM unit (set by the
# unit part). hostkit.doctor.gather sets before it: hk_mark, hk_kept (how many journal lines
# to keep), hk_journal_s (journalctl's deadline), hk_watchdog_unit (vllm.service's watchdog),
# hk_watchdog_decisions (an ERE of the watchdog's lines worth reporting), hk_watchdog_state
# (its state file) and hk_metrics (the collector's metrics file); and hk_deadline
# (hostkit.facts.deadline), whose TIMED_OUT line (hk_timed_out) the filters below pass on.
# hk_engine_deaths UNIT SUFFIX: the part engine-deaths of UNIT, its name followed by SUFFIX
# (as hk_unit_parts names its parts).
hk_engine_deaths() {
  echo "${hk_mark}engine-deaths$2@@"
  echo "now=$(date +%s)"
  hk_deadline "$hk_journal_s" "journalctl -u $1" \
      journalctl -u "$1" --since -24h -q --no-pager -o short-iso 2>/dev/null \
    | awk -v kept="$hk_kept" -v timed_out="$hk_timed_out" '
    index($0, timed_out) == 1 { print; next }
    /EngineDeadError/ { n++; last[n % kept] = $0 }
    END { print "count=" n+0; for (i = n - kept + 1; i <= n; i++) if (i > 0) print "line " last[i % kept] }'
}
hk_engine_deaths "$unit" ""
# hk_watchdog WATCHDOG_UNIT STATE_FILE SUFFIX: the part watchdog of the health watchdog
# WATCHDOG_UNIT (its decisions in the journal, its state file), its name followed by SUFFIX.
hk_watchdog() {
  echo "${hk_mark}watchdog$3@@"
  hk_deadline "$hk_journal_s" "journalctl -u $1" \
    journalctl -u "$1" --since -24h -q --no-pager -o short-iso 2>/dev/null \
    | grep -E -e "^$hk_timed_out" -e "$hk_watchdog_decisions" | tail -n "$hk_kept" | sed "/^$hk_timed_out/!s/^/line /"
  [ -r "$2" ] && printf 'state %s\n' "$(tr -d '\n' < "$2")"
  true
}
hk_watchdog "$hk_watchdog_unit" "$hk_watchdog_state" ""
if [ -r "$hk_metrics" ]; then
  echo "${hk_mark}metrics@@"
  echo "path=$hk_metrics"; echo "age=$(( $(date +%s) - $(stat -c %Y "$hk_metrics") ))"; cat "$hk_metrics"
fi
true

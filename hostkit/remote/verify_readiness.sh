# verify's readiness probe: poll until vLLM answers, its unit stops or the wait runs out; then
# the unit's properties and its main process. hostkit.verify.probes sets before it: hk_unit,
# hk_mark, hk_ready (what a ready answer contains), hk_interval, hk_properties (systemctl
# show's property names), hk_wait (the seconds to wait), hk_ready_probe (prints the probe's
# JSON line), and hk_show, hk_show_value
# (hostkit.facts.systemctl_show).
echo "${hk_mark}readiness@@"
hk_start=$(date +%s); hk_attempts=0
while :; do
  hk_attempts=$((hk_attempts + 1))
  hk_probe=$( hk_ready_probe 2>/dev/null )
  case $hk_probe in *"$hk_ready"*) hk_end=ready; break ;; esac
  hk_state=$(hk_show_value "$hk_unit" ActiveState)
  case $hk_state in activating|active|reloading) ;; *) hk_end="unit ${hk_state:-unknown}"; break ;; esac
  [ $(( $(date +%s) - hk_start )) -ge "$hk_wait" ] && { hk_end=timeout; break; }
  sleep "$hk_interval"
done
echo "outcome $hk_end"; echo "attempts $hk_attempts"; echo "waited $(( $(date +%s) - hk_start ))"
echo "probe $hk_probe"
echo "${hk_mark}unit@@"
# $hk_properties is a list of names: split on purpose.
hk_unit_lines=$(hk_show "$hk_unit" $hk_properties); printf '%s\n' "$hk_unit_lines"
echo "${hk_mark}process@@"
hk_pid=$(printf '%s\n' "$hk_unit_lines" | sed -n 's/^MainPID=//p')
if [ "${hk_pid:-0}" != 0 ] && [ -r "/proc/$hk_pid/cmdline" ]; then
  echo "pid $hk_pid"
  awk '/^Uid:/ { print "uid " $3 }' "/proc/$hk_pid/status"
  echo "user $(stat -c %U "/proc/$hk_pid")"
  hk_key=$(tr '\0' '\n' 2>/dev/null < "/proc/$hk_pid/environ" | sed -n 's/^VLLM_API_KEY=//p' | head -n 1)
  if [ -n "$hk_key" ]; then echo "api_key_sha256 $(printf %s "$hk_key" | sha256sum | cut -d' ' -f1)"; fi
  tr '\0' '\n' < "/proc/$hk_pid/cmdline" | sed 's/^/arg /'
fi

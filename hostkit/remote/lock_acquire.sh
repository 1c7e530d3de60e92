# The deploy lock, taken by hostkit.operations.lock.acquire_command, which sets before it:
# lock, hk_lock_dir, hk_owner (the line the lock holds), hk_take_over and hk_replace (with
# hk_take_over=1, a lock still holding exactly hk_replace is removed first) and hk_marker.
umask 022
mkdir -p "$hk_lock_dir"
if [ "$hk_take_over" = 1 ] && [ "$(head -n 1 "$lock" 2>/dev/null)" = "$hk_replace" ]; then rm -f "$lock"; fi
tries=0
while :; do
  if ( set -C; printf '%s\n' "$hk_owner" > "$lock" ) 2>/dev/null; then echo acquired; break; fi
  held=$(head -n 1 "$lock" 2>/dev/null) && mtime=$(stat -c %Y "$lock" 2>/dev/null) && {
    echo "held $(( $(date +%s) - mtime ))"; echo "holder $held"; break; }
  # Released between our attempt and our look: try again.
  tries=$((tries + 1)); [ $tries -lt 5 ] || { echo 'held 0'; echo 'holder '; break; }
done
# Leftover commands: every process naming the marker, except this command's ancestors and
# their direct children (the subshells of this script).
mine=' '; p=$$
while [ "${p:-0}" -gt 1 ]; do mine="$mine$p "; p=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$p/status 2>/dev/null); done
ps -eo pid=,ppid=,args= | while read -r pid ppid args; do
  case "$args" in *"$hk_marker"*) ;; *) continue;; esac
  case "$mine" in *" $pid "*|*" $ppid "*) continue;; esac
  echo "busy $pid $args"
done
exit 0

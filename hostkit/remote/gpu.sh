# The snapshot's gpu section. hostkit.facts.gpu.GpuFact sets before it: hk_mark (the part
# marker's prefix), hk_query_fields and hk_apps_fields (nvidia-smi's --query-* lists),
# hk_smi_s and hk_log_s (deadlines), hk_driver_version (the driver's /proc file),
# hk_xid_limit and hk_timed_out; and hk_deadline (hostkit.facts.deadline).
hk_any() { [ -e "$1" ] || [ -L "$1" ]; }
# The command line, NUL bytes as spaces, of each process whose comm is $1.
hk_cmdlines_of() {
  for c in /proc/[0-9]*/comm; do
    IFS= read -r n 2>/dev/null < "$c" && [ "$n" = "$1" ] || continue
    tr '\0' ' ' < "${c%/comm}/cmdline"; echo
  done
}
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "${hk_mark}query@@"
  hk_deadline "$hk_smi_s" 'nvidia-smi --query-gpu' \
    nvidia-smi --query-gpu="$hk_query_fields" --format=csv,noheader,nounits 2>&1
  echo "${hk_mark}query-rc@@ $?"
  echo "${hk_mark}apps@@"
  hk_apps=$(hk_deadline "$hk_smi_s" 'nvidia-smi --query-compute-apps' \
    nvidia-smi --query-compute-apps="$hk_apps_fields" --format=csv,noheader,nounits 2>&1)
  hk_rc=$?; printf '%s\n' "$hk_apps"; echo "${hk_mark}apps-rc@@ $hk_rc"
  echo "${hk_mark}procs@@"
  printf '%s\n' "$hk_apps" | while IFS=', ' read -r hk_pid hk_rest; do
    case $hk_pid in ''|*[!0-9]*) continue ;; esac
    IFS= read -r hk_comm 2>/dev/null < "/proc/$hk_pid/comm" && echo "$hk_pid comm $hk_comm"
    while IFS= read -r hk_cg; do echo "$hk_pid cgroup $hk_cg"; done 2>/dev/null < "/proc/$hk_pid/cgroup"
  done
else
  echo "${hk_mark}no-nvidia-smi@@"
fi
echo "${hk_mark}version@@"
[ -e "$hk_driver_version" ] && cat "$hk_driver_version" 2>/dev/null
echo "${hk_mark}modules@@"
[ -r /proc/modules ] && while IFS= read -r m; do case $m in nvidia*) printf '%s\n' "$m" ;; esac; done < /proc/modules
echo "${hk_mark}nodes@@"
hk_any /dev/nvidia* && ls -ld /dev/nvidia* 2>/dev/null
echo "${hk_mark}persistenced@@"
hk_cmdlines_of nvidia-persiste
echo "${hk_mark}xid@@"
# An empty answer (not even xid_total) means that log could not be read.
# A log read that timed out prints only its timeout line: partial is not clean.
hk_xids() {
  awk -v limit="$hk_xid_limit" -v timed_out="$hk_timed_out" '
    index($0, timed_out) == 1 { t = $0; next }
    /NVRM: Xid/ { n++; if (n <= limit) x[n] = $0 }
    END { if (t) { print t; exit } for (i = 1; i <= n && i <= limit; i++) print x[i]; if (NR) print "xid_total=" n+0 }'
}
if [ ! -e "$hk_driver_version" ]; then
  echo source=no-driver; echo xid_total=0
else
  hk_log=
  command -v journalctl >/dev/null 2>&1 && hk_source=journalctl \
    && hk_log=$(hk_deadline "$hk_log_s" 'journalctl -k -b' journalctl -k -b -q --no-pager 2>/dev/null | hk_xids)
  [ -n "$hk_log" ] || { hk_source=dmesg; hk_log=$(hk_deadline "$hk_log_s" dmesg dmesg 2>/dev/null | hk_xids); }
  [ -n "$hk_log" ] || { hk_source=none; hk_log=xid_total=0; }
  echo "source=$hk_source"; printf '%s\n' "$hk_log"
fi
if hk_any /dev/nvidia-nvswitch*; then
  echo "${hk_mark}fabricmanager@@"
  hk_cmdlines_of nv-fabricmanage | sed 's/^/process: /'
  nv-fabricmanager --version 2>&1 | sed 's/^/version: /'
fi
true

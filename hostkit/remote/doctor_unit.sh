# `hostkit doctor`'s unit part: sets cg (the unit's ControlGroup) and pid (its MainPID), which
# the later parts read, and prints the unit's properties. hostkit.doctor.gather sets before it:
# hk_mark, unit, hk_unit_properties, hk_nvme_settings, hk_nvme_unit, and the hk_show functions
# (remote/systemctl_show.sh).
cg=; pid=0
if command -v systemctl >/dev/null 2>&1; then
  cg=$(hk_show_value "$unit" ControlGroup)
  pid=$(hk_show_value "$unit" MainPID)
  echo "${hk_mark}unit@@"
  # shellcheck disable=SC2086 # one word per property
  hk_show "$unit" $hk_unit_properties
fi
# hostkit's NVMe boot unit: its settings (the plan it brings back at boot), how its last run
# ended, and what is swapped on now.
echo "${hk_mark}nvme-boot@@"
if [ -r "$hk_nvme_settings" ]; then
  while IFS= read -r hk_l; do case $hk_l in hk_*=*) printf '%s\n' "$hk_l" ;; esac; done < "$hk_nvme_settings"
  ! command -v systemctl >/dev/null 2>&1 || hk_show "$hk_nvme_unit" ActiveState Result
  { read -r hk_l; while read -r hk_l hk_rest; do printf 'active_swap=%s\n' "$hk_l"; done; } < /proc/swaps
fi

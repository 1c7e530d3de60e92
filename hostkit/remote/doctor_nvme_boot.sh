# `hostkit doctor`'s part of hostkit's NVMe boot unit: its settings (the plan it brings back
# at boot), how its last run ended, and what is swapped on now. hostkit.doctor.gather sets
# before it: hk_mark, hk_nvme_settings, hk_nvme_unit, and the hk_show functions.
echo "${hk_mark}nvme-boot@@"
if [ -r "$hk_nvme_settings" ]; then
  while IFS= read -r hk_l; do case $hk_l in hk_*=*) printf '%s\n' "$hk_l" ;; esac; done < "$hk_nvme_settings"
  ! command -v systemctl >/dev/null 2>&1 || hk_show "$hk_nvme_unit" ActiveState Result
  { read -r hk_l; while read -r hk_l hk_rest; do printf 'active_swap=%s\n' "$hk_l"; done; } < /proc/swaps
fi

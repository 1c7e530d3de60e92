# `hostkit doctor`'s unit part: sets cg (the unit's ControlGroup) and pid (its MainPID), which
# the later parts read, and prints the unit's properties. hostkit.doctor.gather sets before it:
# hk_mark, unit, hk_unit_properties, and the hk_show functions (remote/systemctl_show.sh).
cg=; pid=0
if command -v systemctl >/dev/null 2>&1; then
  cg=$(hk_show_value "$unit" ControlGroup)
  pid=$(hk_show_value "$unit" MainPID)
  echo "${hk_mark}unit@@"
  # shellcheck disable=SC2086 # one word per property
  hk_show "$unit" $hk_unit_properties
fi

# `hostkit doctor`'s parts of each of vllm_instances: hk_instances (set by hostkit.doctor.gather,
# may be empty) names, for each instance, its unit, its watchdog's unit and its watchdog's
# state file, three words in a row; hk_unit_parts (doctor_unit.sh), hk_engine_deaths and
# hk_watchdog (doctor_history.sh) print each one's parts, named `PART UNIT`.
# shellcheck disable=SC2086 # one word per name
set -- $hk_instances
while [ $# -ge 3 ]; do
  hk_unit_parts "$1" " $1"
  hk_engine_deaths "$1" " $1"
  hk_watchdog "$2" "$3" " $1"
  shift 3
done
true

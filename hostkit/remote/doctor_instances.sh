# `hostkit doctor`'s parts of each of vllm_instances: hk_instance_units (set by
# hostkit.doctor.gather, may be empty) names their units; hk_unit_parts (doctor_unit.sh) and
# hk_engine_deaths (doctor_history.sh) print each one's parts, named `PART UNIT`.
for hk_instance in $hk_instance_units; do
  hk_unit_parts "$hk_instance" " $hk_instance"
  hk_engine_deaths "$hk_instance" " $hk_instance"
done
true

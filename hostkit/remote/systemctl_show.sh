# `systemctl show` within a deadline (a stuck systemd hangs it). hostkit.facts.systemctl_show
# sets hk_systemctl_s before it, and the hk_deadline function (hostkit.facts.deadline).
# hk_show UNIT PROPERTY...: the PROPERTY=value lines; past the deadline, a TIMED_OUT line.
hk_show() {
  hk_show_unit=$1; shift
  hk_show_n=$#
  while [ "$hk_show_n" -gt 0 ]; do set -- "$@" -p "$1"; shift; hk_show_n=$((hk_show_n - 1)); done
  hk_deadline "$hk_systemctl_s" "systemctl show $hk_show_unit" systemctl show "$hk_show_unit" "$@" 2>/dev/null
}
# hk_show_value UNIT PROPERTY [OPTION...]: PROPERTY's value alone (--value).
hk_show_value() {
  hk_show_unit=$1 hk_show_property=$2; shift 2
  hk_deadline "$hk_systemctl_s" "systemctl show $hk_show_unit $hk_show_property" \
    systemctl show "$@" -p "$hk_show_property" --value "$hk_show_unit" 2>/dev/null
}

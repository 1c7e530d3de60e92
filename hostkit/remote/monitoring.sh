# The monitoring section (hostkit.facts.monitoring). Set by the caller: hk_timer,
# hk_node_exporter_package, hk_node_exporter_unit, hk_metrics (the metrics file), and "$@":
# the files hostkit manages.
sha256sum "$@" 2>/dev/null | sed 's/^/sha256 /'
echo "timer_enabled=$(systemctl is-enabled "$hk_timer" 2>/dev/null)"
echo "timer_active=$(systemctl is-active "$hk_timer" 2>/dev/null)"
echo "node_exporter=$(dpkg-query -W -f='${Status}' "$hk_node_exporter_package" 2>/dev/null)"
echo "node_exporter_enabled=$(systemctl is-enabled "$hk_node_exporter_unit" 2>/dev/null)"
echo "node_exporter_active=$(systemctl is-active "$hk_node_exporter_unit" 2>/dev/null)"
echo "textfile=$hk_metrics"
hk_m=$(stat -c %Y "$hk_metrics" 2>/dev/null) && echo "textfile_age=$(( $(date +%s) - hk_m ))"

# The snapshot's model_configs section. hostkit.facts.model_config.ModelConfigFact sets before it
# hk_mark (the part marker's prefix), hk_read_s (the deadline), hk_max_bytes (the most read of
# one file) and hk_deadline (hostkit.facts.deadline), and calls hk_model_config DIR for each
# local model directory. A file that cannot be read leaves head's own error in its part.
hk_model_config() {
  echo "${hk_mark}dir@@$1"
  hk_deadline "$hk_read_s" "reading $1/config.json" head -c "$hk_max_bytes" "$1/config.json" 2>&1
  hk_rc=$?
  echo
  echo "${hk_mark}rc@@ $hk_rc"
}

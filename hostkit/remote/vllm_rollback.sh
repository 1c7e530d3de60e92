# Roll back a release that did not become ready (hostkit.operations.vllm_install). Set
# before it: hk_root, hk_to (the previous venv), hk_failed (the new venv, removed), hk_unit,
# hk_unit_saved (the unit as it was before the switch, when there was one), hk_service.
set -e
ln -sfn -- "$hk_to" "$hk_root/.current.new"
mv -T -- "$hk_root/.current.new" "$hk_root/current"
if [ -f "$hk_unit_saved" ]; then
  install -m 0644 -o root -g root -- "$hk_unit_saved" "$hk_unit.rollback"
  mv -f -- "$hk_unit.rollback" "$hk_unit"
  rm -f -- "$hk_unit_saved"
fi
systemctl daemon-reload
systemctl reset-failed "$hk_service" 2>/dev/null || true
systemctl restart "$hk_service"
rm -rf -- "$hk_failed"
echo "vLLM rollback: $hk_root/current -> $hk_to, $hk_service restarted"

# Put a complete hostkit release venv in service (hostkit.operations.vllm_install). Set
# before it: hk_root, hk_to (the venv), hk_unit (the vLLM unit file), hk_unit_saved (where
# the unit as it was is kept for a rollback, or empty), and the venvs to remove as "$@".
# `current` is replaced by a rename, so it always points at one whole release.
set -e
[ -r "$hk_to/.hostkit-release" ] || { echo "vLLM switch: $hk_to is not a complete hostkit release" >&2; exit 1; }
if [ -n "$hk_unit_saved" ]; then
  rm -f -- "$hk_unit_saved"
  [ ! -f "$hk_unit" ] || cp -p -- "$hk_unit" "$hk_unit_saved"
fi
ln -sfn -- "$hk_to" "$hk_root/.current.new"
mv -T -- "$hk_root/.current.new" "$hk_root/current"
for hk_v in "$@"; do rm -rf -- "$hk_v"; done
echo "vLLM switch: $hk_root/current -> $hk_to"

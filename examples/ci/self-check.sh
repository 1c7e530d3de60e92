#!/bin/sh
# Provision and/or verify THIS machine with hostkit: the job of a self-hosted CI runner on a
# GPU host (examples/ci/github-actions.yml, examples/ci/gitlab-ci.yml call it; so does the
# lab test tests/e2e/test_ci_self_check.py, inside a lab host against itself).
#
#   examples/ci/self-check.sh [MODE] [INVENTORY] [OUT_DIR]
#
#   MODE       verify (default): only check the host;
#              provision: `pyinfra -y INVENTORY deploys/vllm_host.py`, then check the host.
#   INVENTORY  default examples/ci/inventory.py: one host, `@local` (this machine, no ssh).
#   OUT_DIR    default hostkit-reports: verify.xml (JUnit, one testsuite per host, a
#              testcase per check, the checks a container leaves to its host skipped).
#
# Exit status: hostkit verify's (0 every host fine; 1 a host fails; 2 a usage error or an
# unreachable host). A provision that failed makes a passing verify exit 1 (verify still runs,
# so the JUnit says what the host looks like).
#
# Needs hostkit (and with it pyinfra) on PATH: `pip install vllm-hostkit`, or `pip install .`
# from the checkout. Installs nothing itself. Provisioning writes /etc and systemd units: run
# the runner as root, or give it passwordless sudo and set `_sudo: True` in the inventory.
set -u

mode=${1:-verify}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
inventory=${2:-$here/inventory.py}
out=${3:-hostkit-reports}
deploy=${HOSTKIT_DEPLOY:-$repo/deploys/vllm_host.py}

case $mode in
    verify|provision) ;;
    *) echo "self-check.sh: MODE is verify or provision, not '$mode'" >&2; exit 2 ;;
esac
for tool in hostkit pyinfra; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "self-check.sh: $tool is not on PATH; install hostkit first: pip install vllm-hostkit" >&2
        exit 2
    fi
done
if [ ! -f "$inventory" ]; then
    echo "self-check.sh: no inventory at $inventory" >&2
    exit 2
fi
mkdir -p "$out" || exit 2

provisioned=0
if [ "$mode" = provision ]; then
    echo "==> Provisioning: pyinfra -y $inventory $deploy"
    pyinfra -y "$inventory" "$deploy"
    provisioned=$?
    [ "$provisioned" -eq 0 ] || echo "==> the deploy exited $provisioned; verifying anyway" >&2
fi

echo "==> Verifying: hostkit verify $inventory --junitxml $out/verify.xml"
hostkit verify "$inventory" --junitxml "$out/verify.xml" --verbose
verified=$?

if [ "$verified" -eq 0 ] && [ "$provisioned" -ne 0 ]; then
    exit 1
fi
exit "$verified"

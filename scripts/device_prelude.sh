# Sourced by the device tool's scripts (run from the checkout's root; no network there):
# output to $OUT/run.log as well, and hostkit with its dependencies from the wheels in .whl.
OUT=${OUT:?set OUT to a directory}
LOG=$OUT/run.log
exec > >(tee "$LOG") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
HK="python3 -m hostkit"

# The README's two commands: `make demo` (provision and verify a lab host) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin

.PHONY: install demo demo-real test before-lanes unit unit-pure realvllm lab-images e2e e2e-releases e2e-real lab-down clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

demo: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) scripts/demo.py

# The same with real vLLM's CPU build, installed by the deploy, on a container host (minutes).
demo-real: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) scripts/demo.py --real

# The end-to-end modules run on two xdist workers, one lane each, scheduled longest first from
# the durations of the last measured run (tests/e2e/lanes.py, tests/e2e/durations.json), in
# collection order (--no-loadscope-reorder). Each module's hosts are VMs or containers
# (HOST_KIND; tests/e2e/conftest.py). The unit tests run before, in a pytest of their own: some
# load pyinfra's CLI, whose gevent monkey-patching breaks xdist's workers.
# Real vLLM on a VM (marker real_vllm_lab) is `make e2e-real`; on a container host it is in
# `make test`. Kernel tuning on Debian 13 (marker other_release) is `make e2e-releases`.
XDIST := -n 2 --dist loadgroup --no-loadscope-reorder -m "not real_vllm_lab and not other_release"

# Then the fault report (scripts/fault_report.py) summarises the bad-input, fault and
# security tests of that run from its junit XML, which also keeps what each test printed;
# `python -m tests.e2e.lanes --junit reports/e2e.xml` records its lane groups' durations.
test: before-lanes
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) -m pytest tests/e2e $(XDIST) --durations=30 \
	  --junitxml=reports/e2e.xml -o junit_family=xunit1 -o junit_logging=system-out; \
	status=$$?; $(PY) scripts/fault_report.py --junit reports/e2e.xml || status=1; exit $$status

# What comes before the lanes runs side by side, each its own process with nothing shared but
# apt (hostkit_lab/apt.py takes turns): the unit tests (one core), real vLLM natively, and the
# lanes' images (apt and mmdebstrap, mostly waiting on the mirror: Debian 12's VM image and
# container root filesystem, Debian 11's and 13's VM images), which the lanes would otherwise
# build while a lane waits. Each one's output comes whole when it ends.
before-lanes: install
	$(MAKE) --no-print-directory -j3 --output-sync=target unit realvllm lab-images

lab-images: install
	$(PY) -m hostkit_lab images debian12
	$(PY) -m hostkit_lab images --kind vm debian11 debian13

unit: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) -m pytest tests/unit -q

# The pure unit tests alone (no process started: tests/unit/conftest.py), in seconds.
unit-pure: install
	$(PY) -m pytest tests/unit -q -m "not processes"

# Real vLLM 0.32 (the CPU build) started here, natively: what hostkit assumes about vLLM,
# checked against the real server and the stand-in alike (tests/realvllm). Its wheelhouse,
# venv and tiny model are built once and cached in ~/.cache/vllm-hostkit/realvllm.
realvllm: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) -m pytest tests/realvllm -p no:xdist -q --durations=10 \
	  --junitxml=reports/realvllm.xml -o junit_family=xunit1

e2e: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) -m pytest tests/e2e $(XDIST) --durations=30

# Kernel tuning on Debian 13 (the main deploy on Debian 11 and 13 is in make test).
e2e-releases: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) -m pytest tests/e2e -n 2 --dist loadgroup --no-loadscope-reorder \
	  -m other_release --durations=10

# Real vLLM (the CPU build) installed by the deploy on a VM, where the unit's memory limit
# holds, and served there: one install and a start per restart, each minutes under qemu TCG
# (37 to 43 min alone on this 2-core machine, 2026-12-03).
e2e-real: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) -m pytest tests/e2e/test_real_vllm.py -m real_vllm_lab -p no:xdist -v -s

lab-down: install
	$(PY) -m hostkit_lab down

clean:
	rm -rf $(VENV) .lab

# Issue 11: hostkit against the equivalent Ansible playbook on fresh lab hosts (boots VMs;
# takes a while). Prints a table, writes reports/bench.json. See bench/run.py.
.PHONY: bench
bench: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) bench/run.py

# Issue 36: the field reports' failures with real vLLM on a bare VM and a hostkit VM side by
# side (boots VMs: scenario 2 once about 18 min, 2026-12-07; all three 3 times, hours). Writes
# reports/cure-DATE-COMMIT.json and docs/evidence/cure/*.png. See bench/cure.py.
.PHONY: bench-cure
bench-cure: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) bench/cure.py $(CURE_ARGS)

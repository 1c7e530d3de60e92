"""Parse `vllm serve` arguments with a host's own vLLM, without serving anything.

vLLM has no dry run: `vllm serve --help` exits 0 whatever else is on the line, and a real
start loads the model. But every vLLM CLI that has `vllm serve` (0.5 to now, see
vllm/scripts.py and vllm/entrypoints/cli/main.py) builds its parser, parses, runs its
own checks on the result (`validate`), and only then calls `args.dispatch_function(args)`,
a default set with `parser.set_defaults(dispatch_function=...)`. This script runs the
host's vllm console script unchanged, with `argparse.ArgumentParser.set_defaults`
patched so that the dispatch function stops the run instead of serving.

Run on the host by the interpreter of the console script's #! line:
    PYTHON vllm_parse_check.py /opt/vllm/bin/vllm serve MODEL --flag ...

Exit status: 0 accepted; 2 rejected by argparse (vLLM's own exit status for an unknown
or malformed option); 3 rejected by vLLM's checks around argparse (an exception);
6 the CLI ended without reaching the dispatch function (an unexpected CLI layout).

hostkit's lab stand-in for vLLM (hostkit_lab/standin/) has the same CLI layout, so this script
checks it the same way. Python 3.8+ and the standard library only: it runs under the
host's vLLM interpreter, not hostkit's.
"""

import argparse
import runpy
import sys
import traceback

ACCEPTED, ARGPARSE_REJECTED, VLLM_REJECTED, NO_DISPATCH = 0, 2, 3, 6


class _Dispatched(BaseException):
    """Raised instead of serving; a BaseException so that vLLM's `except Exception` misses it."""


def _stop_at_dispatch(args):
    raise _Dispatched


def _patch_set_defaults():
    original = argparse.ArgumentParser.set_defaults

    def set_defaults(self, **kwargs):
        if "dispatch_function" in kwargs:
            kwargs["dispatch_function"] = _stop_at_dispatch
        return original(self, **kwargs)

    argparse.ArgumentParser.set_defaults = set_defaults


def main():
    script = sys.argv[1]
    sys.argv = [script] + sys.argv[2:]
    _patch_set_defaults()
    try:
        runpy.run_path(script, run_name="__main__")
    except _Dispatched:
        print("hostkit parse check: accepted", file=sys.stderr)
        return ACCEPTED
    except SystemExit as exit_:
        if exit_.code == ARGPARSE_REJECTED:
            return ARGPARSE_REJECTED
        if exit_.code not in (None, 0):
            print(f"hostkit parse check: rejected: {exit_.code}", file=sys.stderr)
            return VLLM_REJECTED
    except Exception:
        traceback.print_exc()
        return VLLM_REJECTED
    print("hostkit parse check: the CLI ended without dispatching", file=sys.stderr)
    return NO_DISPATCH


if __name__ == "__main__":
    sys.exit(main())

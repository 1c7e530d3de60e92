"""hostkit's vLLM release probe, run on the host by the interpreter of the vLLM environment
(hostkit.facts.vllm_release). Prints one JSON object: the first of the distributions named
on the command line that is installed, its version, torch's version, and the CUDA version
torch was built for (torch.version.cuda; null for a CPU build).

torch is not imported (seconds, or minutes on a slow host): torch/version.py, which the
torch build writes, is read from the distribution's files. Python 3.8+, standard library only.
"""

import ast
import json
import sys

try:
    import importlib.metadata as metadata
except ImportError:  # Python < 3.8: nothing to read
    metadata = None


def _version_assignments(text):
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        else:
            continue
        try:
            found[name] = ast.literal_eval(value)
        except ValueError:
            continue
    return found


def torch_build():
    """(torch version, torch.version.cuda, problem)."""
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None, None, None
    try:
        text = dist.locate_file("torch/version.py").read_text()
        cuda = _version_assignments(text).get("cuda")
    except (OSError, SyntaxError) as error:
        return dist.version, None, "torch/version.py unreadable: %s" % error
    return dist.version, cuda if isinstance(cuda, str) else None, None


def main(names):
    result = {"python": sys.executable, "package": None, "version": None, "torch": None, "cuda": None,
              "problem": None}
    if metadata is None:
        result["problem"] = "Python %d.%d has no importlib.metadata" % sys.version_info[:2]
    else:
        for name in names:
            try:
                result["version"] = metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
            result["package"] = name
            break
        result["torch"], result["cuda"], result["problem"] = torch_build()
    print("release=" + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])

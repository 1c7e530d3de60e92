# hostkit.vllm.readiness runs this with `python3 -I -S -c` after hostkit.remote.http_request's
# text and a prelude that sets TIMEOUT (seconds per request); argv: address, port, the
# environment file with VLLM_API_KEY.
import json, sys
try:
    from hostkit.remote.http_request import api_key_from_env_file, http_request
except ImportError:  # on a host, where the program holds http_request's text before this
    pass
address, port, env_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
key = api_key_from_env_file(env_file)
base = "http://%s:%d" % ("[%s]" % address if ":" in address else address, port)
def get(path):
    try:
        status, body = http_request(base + path, key, None, TIMEOUT)
        return status, body, ""
    except Exception as error:
        return None, b"", str(error)
result = {"health": None, "error": "", "models_status": None, "models": None}
result["health"], _, result["error"] = get("/health")
if result["health"] == 200:
    status, body, error = get("/v1/models")
    result["models_status"] = status
    result["error"] = error
    if status == 200:
        try:
            result["models"] = [entry["id"] for entry in json.loads(body)["data"]]
        except Exception as error:
            result["error"] = "bad /v1/models answer: %s" % error
print(json.dumps(result))

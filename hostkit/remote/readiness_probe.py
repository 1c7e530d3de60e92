# hostkit.vllm.readiness runs this with `python3 -I -S -c` after a prelude that sets TIMEOUT
# (seconds per connection); argv: address, port, the environment file with VLLM_API_KEY.
import json, socket, sys
address, port, env_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
key = None
try:
    with open(env_file) as lines:
        for line in lines:
            if line.startswith("VLLM_API_KEY="):
                value = line.rstrip("\n")[len("VLLM_API_KEY="):]
                if value[:1] == '"' and value[-1:] == '"':
                    value = value[1:-1]
                    out, i = [], 0
                    while i < len(value):
                        if value[i] == "\\" and i + 1 < len(value):
                            i += 1
                        out.append(value[i])
                        i += 1
                    value = "".join(out)
                key = value
except OSError:
    pass
host = "[%s]" % address if ":" in address else address
def dechunk(body):
    out = []
    while True:
        size, _, body = body.partition(b"\r\n")
        size = int(size.split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[:size])
        body = body[size + 2:]
def get(path):
    request = "GET %s HTTP/1.0\r\nHost: %s:%s\r\nConnection: close\r\n" % (path, host, port)
    try:
        if key:
            request += "Authorization: Bearer %s\r\n" % key
        with socket.create_connection((address, port), timeout=TIMEOUT) as connection:
            connection.sendall((request + "\r\n").encode("latin-1"))
            answer = []
            while True:
                data = connection.recv(65536)
                if not data:
                    break
                answer.append(data)
        head, _, body = b"".join(answer).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = lines[0].split(None, 2)
        if len(status) < 2 or not status[0].startswith("HTTP/") or not status[1].isdigit():
            raise ValueError("not an HTTP answer: %r" % lines[0][:80])
        headers = [line.lower().split(":", 1) for line in lines[1:]]
        if any(len(h) == 2 and h[0].strip() == "transfer-encoding" and "chunked" in h[1] for h in headers):
            body = dechunk(body)
        return int(status[1]), body, ""
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

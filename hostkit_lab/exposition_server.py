"""A Prometheus exposition served over HTTP with the exposition format's content type, as
node_exporter relays a textfile: in the tests' process (`Exposition`), or on a lab host as a
script of the standard library alone (`python3 -c SOURCE PORT PATH` serves the file PATH)."""

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def handler(read_body):
    """A request handler that answers every GET with `read_body()`."""

    class Exposition(BaseHTTPRequestHandler):
        def do_GET(self):
            body = read_body()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return Exposition


def server(port: int, read_body) -> ThreadingHTTPServer:
    return ThreadingHTTPServer(("127.0.0.1", port), handler(read_body))


if __name__ == "__main__":
    port, path = int(sys.argv[1]), sys.argv[2]
    with open(path, "rb"):  # a missing file fails the start, not each scrape
        pass
    server(port, lambda: open(path, "rb").read()).serve_forever()

"""Serves one file over HTTP on a port, as node_exporter's textfile collector relays
hostkit's metrics file (node_exporter's apt install costs minutes under qemu TCG).

    python3 textfile_http.py PORT PATH
"""

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, PATH = int(sys.argv[1]), sys.argv[2]


class Textfile(BaseHTTPRequestHandler):
    def do_GET(self):
        with open(PATH, "rb") as metrics:
            body = metrics.read()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Textfile).serve_forever()

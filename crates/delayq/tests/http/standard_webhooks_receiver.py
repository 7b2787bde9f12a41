"""A callback receiver that verifies each call as docs/delivery.md tells users to: it runs the
page's two Python blocks as written there (the Rust test extracts them and passes them in
DOCS_LIBRARY_EXAMPLE, with the standardwebhooks package, and DOCS_BY_HAND_EXAMPLE, which defines
`verified`). For each call it prints one JSON line (what arrived and what each check said) and
answers 204 when both verified, else 400.

Usage: python standard_webhooks_receiver.py SECRET; prints {"port": N} first.
"""

import json
import os
import sys
import threading
import types
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = sys.argv[1]
LIBRARY = compile(os.environ["DOCS_LIBRARY_EXAMPLE"], "docs/delivery.md (library)", "exec")
by_hand_scope = {}
exec(compile(os.environ["DOCS_BY_HAND_EXAMPLE"], "docs/delivery.md (by hand)", "exec"), by_hand_scope)
verified = by_hand_scope["verified"]
# One report line at a time: calls are handled in threads of their own.
printing = threading.Lock()


def report_line(report):
    with printing:
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        report = {
            "webhook_id": headers.get("webhook-id"),
            "id": urllib.parse.unquote(headers.get("webhook-id", "")),
            "topic": urllib.parse.unquote(headers.get("delayq-topic", "")),
            "body": body.decode("utf-8"),
        }
        request = types.SimpleNamespace(body=body, headers=dict(self.headers.items()))
        try:
            exec(LIBRARY, {"request": request})
            report["library"] = "ok"
        except Exception as e:  # what the receiver's framework would turn into an error
            report["library"] = f"{type(e).__name__}: {e}"
        try:
            report["by_hand"] = bool(verified(SECRET, headers, body))
        except Exception as e:
            report["by_hand"] = f"{type(e).__name__}: {e}"
        ok = report["library"] == "ok" and report["by_hand"] is True
        self.send_response(204 if ok else 400)
        self.end_headers()
        report_line(report)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
report_line({"port": server.server_address[1]})
server.serve_forever()

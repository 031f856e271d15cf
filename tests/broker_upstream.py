"""A loopback HTTP(S) server for tests/broker_serve.rs: it stands for a
host a secret is bound to.

It records the credentials each request carried (one JSON line per
request, flushed, in the log file) and echoes the bearer token back in the
form the query asks: raw, base64, hex, gzip, deflate, brotli (a coding the
broker cannot scrub), chunked in small pieces, gzip chunked, or in a
response header. It prints its port on its first line of stdout.

usage: broker_upstream.py LOG [CERT KEY]   (without CERT KEY: plain http)
"""
import base64
import gzip
import json
import ssl
import sys
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

LOG = open(sys.argv[1], "a", buffering=1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def handle_one(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                body += self.rfile.read(size)
                self.rfile.readline()
                if size == 0:
                    break
        auth = self.headers.get("Authorization") or ""
        LOG.write(json.dumps({
            "method": self.command,
            "path": self.path,
            "host": self.headers.get("Host"),
            "authorization": auth,
            "accept_encoding": self.headers.get("Accept-Encoding"),
            "body": body.decode("latin-1"),
        }) + "\n")
        token = auth.split(" ", 1)[1].encode() if " " in auth else b""
        form = (parse_qs(urlsplit(self.path).query).get("form") or ["raw"])[0]
        raw = b"token=" + token + b"&again=" + token
        headers = {"Content-Type": "text/plain"}
        chunks = None
        if form == "raw":
            out = raw
        elif form == "b64":
            out = base64.b64encode(token)
        elif form == "hex":
            out = token.hex().encode()
        elif form == "gzip":
            out = gzip.compress(raw)
            headers["Content-Encoding"] = "gzip"
        elif form == "deflate":
            out = zlib.compress(raw)
            headers["Content-Encoding"] = "deflate"
        elif form == "br":
            out = b"\x1b\x00\x00\x00not really brotli" + raw
            headers["Content-Encoding"] = "br"
        elif form == "chunked":
            chunks = [raw[i:i + 7] for i in range(0, len(raw), 7)]
        elif form == "gzipchunked":
            z = gzip.compress(raw)
            chunks = [z[i:i + 5] for i in range(0, len(z), 5)]
            headers["Content-Encoding"] = "gzip"
        elif form == "header":
            out = b"see the header"
            headers["X-Echo"] = token.decode()
        else:
            out = b"unknown form"
        self.send_response(200)
        for k, v in headers.items():
            self.send_header(k, v)
        if chunks is None:
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(out)
        else:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for c in chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    do_GET = handle_one
    do_POST = handle_one
    do_HEAD = handle_one


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
if len(sys.argv) > 3:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()

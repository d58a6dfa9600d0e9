"""The HTTP/1.1 server: request bodies, argument decoding, dispatch, faults, TLS and control.

One ThreadingHTTPServer serves every Dropbox host's routes on one port: `/2/<route>` (rpc,
upload and download styles), `/oauth2/authorize`, `/oauth2/token`, and the loopback-only
`/_control/*` endpoint. Connections are kept alive; request bodies may be chunked or sent
after `Expect: 100-continue` (http.server answers that). Downloads go out with os.sendfile
unless TLS, a bandwidth cap or a reset fault needs the bytes to pass through Python.

Network shaping (docs/EMULATOR.md, "Network profiles"): `latency_ms` is a round trip that every
API request (and OPTIONS request) pays before it is handled, and the first such request on a
connection also pays `handshake_round_trips` more (TCP's and TLS's handshakes); `bandwidth` paces each connection's
request bodies and answers, each direction with its own Throttle.
"""

import json
import os
import socket
import ssl
import struct
import sys
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from . import account_seed, hosts, listing_overlap, namespaces
from .app import ROUTES
from .errors import ApiError, AuthFailure, BadRequest, RateLimited, RouteError
from .faults import Throttle
from .listing_overlap import ReadBody
from .paths import lower, nfc

IO_CHUNK = 4 * 1024 * 1024
# A download's first piece: Dropbox streams a range, so its first bytes leave as soon as a short
# one would; reading 4 MiB before the first byte left made the first 256 KiB of a 4 MiB range
# 1.73-1.88 ms against 1.52-1.79 with this (docs/EMULATOR.md, "Hosts and routes", files/download;
# docs/BENCHMARKS.md, "time to first byte at 0 ms, traced"). Pieces double up to IO_CHUNK.
FIRST_DOWNLOAD_PIECE = 64 * 1024
MAX_RPC_BODY = 64 * 1024 * 1024
JSON_TYPES = ("application/json", "application/json; charset=utf-8", "text/plain; charset=dropbox-cors-hack")
UPLOAD_TYPES = ("application/octet-stream", "text/plain; charset=dropbox-cors-hack")


class ConnectionAborted(Exception):
    """Raised after the reset fault has torn the connection down."""


class RequestBody:
    """The request body as a stream: Content-Length or chunked, paced by the throttle."""

    def __init__(self, rfile, headers, throttle):
        self.rfile = rfile
        self.throttle = throttle
        self.chunked = "chunked" in headers.get("Transfer-Encoding", "").lower()
        self.length = None if self.chunked else int(headers.get("Content-Length") or 0)
        self.remaining = self.length
        self.chunk_left = 0
        self.done = not self.chunked and self.length == 0
        self.total_read = 0

    def _read_chunk_header(self):
        line = self.rfile.readline(65537)
        if not line:
            raise ConnectionError("client closed the connection inside a chunked body")
        size = int(line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            self.done = True
        self.chunk_left = size

    def readinto(self, view):
        """Fills up to len(view) bytes; returns 0 at the end of the body."""
        if self.done or len(view) == 0:
            return 0
        if self.chunked:
            if self.chunk_left == 0:
                self._read_chunk_header()
                if self.done:
                    return 0
            want = min(len(view), self.chunk_left)
        else:
            want = min(len(view), self.remaining)
        want = self.throttle.chunk_size(want)
        n = self.rfile.readinto(view[:want])
        if not n:
            raise ConnectionError("client closed the connection inside the body")
        if self.chunked:
            self.chunk_left -= n
            if self.chunk_left == 0:
                self.rfile.readline(3)
        else:
            self.remaining -= n
            self.done = self.remaining == 0
        self.total_read += n
        self.throttle.pace(n)
        return n

    def read_all(self, limit):
        if self.done:
            return b""
        parts, buf = [], bytearray(min(self.length, IO_CHUNK) if self.length is not None else 65536)
        view = memoryview(buf)
        while True:
            n = self.readinto(view)
            if not n:
                return b"".join(parts)
            if self.total_read > limit:
                raise BadRequest("request body: too large")
            parts.append(bytes(view[:n]))

    def drain(self):
        buf = memoryview(bytearray(1 << 20))
        while self.readinto(buf):
            pass


class Call:
    """One API request as route functions see it."""

    def __init__(self, app, route, arg, body, token, handler, reset):
        self.app = app
        self.route = route
        self.arg = arg
        self.body = body
        self.token = token
        self.handler = handler
        self.reset = reset  # the reset fault fired: drop the connection mid-body

    def abort_mid_upload(self):
        """For upload routes under the reset fault: read part of the body, then drop."""
        if self.reset:
            half = memoryview(bytearray(max(1, min(IO_CHUNK, (self.body.length or 2) // 2))))
            self.body.readinto(half)
            self.handler.abort_connection()


def parse_range(header, size):
    """(start, end_inclusive) for a single `bytes=` range; None to send everything; 'bad' if unsatisfiable."""
    if not header or not header.strip().lower().startswith("bytes="):
        return None
    spec = header.strip()[6:].split(",")[0].strip()
    first, _, last = spec.partition("-")
    try:
        if first == "":
            n = int(last)
            if n <= 0:
                return "bad"
            return max(0, size - n), size - 1
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return "bad"
    return start, min(end, size - 1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dbx-emulator/1"

    def version_string(self):
        return self.server_version

    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        self.throttle_in = Throttle(self.server.app.settings)    # request bodies
        self.throttle_out = Throttle(self.server.app.settings)   # answers
        self.requests_here = 0   # on this connection: the first one pays the handshakes

    def log_message(self, fmt, *args):
        if self.server.verbose:
            # When the answer went out, to the millisecond: traces line these up with a client's.
            stamp = time.strftime("%H:%M:%S", time.gmtime()) + ".%03d" % (time.time() * 1000 % 1000)
            sys.stderr.write("%s %s - %s\n" % (stamp, self.address_string(), fmt % args))

    def do_GET(self):
        self.dispatch()

    def do_POST(self):
        self.dispatch()

    def do_OPTIONS(self):
        # A CORS preflight, or a client opening a connection ahead of need (dbxfs does, with no
        # token): it pays the network like an API request, handshakes included, so a connection
        # opened this way saves the request that follows exactly what it would on Dropbox.
        self.server.app.stats.count_preflight()
        self.pay_round_trips()
        self.send_bytes(200, b"", "text/plain")

    def pay_round_trips(self):
        """The round trip of this request, and the connection's handshakes if it is the first."""
        settings = self.server.app.settings
        latency = settings["latency_ms"]
        round_trips = 1 if self.requests_here else 1 + settings["handshake_round_trips"]
        if not self.requests_here:
            self.server.app.stats.count_connection()
        self.requests_here += 1
        if latency:
            time.sleep(latency * round_trips / 1000.0)

    # ----- low-level answers -----
    def send_bytes(self, status, body, content_type, headers=None, reset=False):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Dropbox-Request-Id", uuid.uuid4().hex)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        # Headers and a small body in one write: fewer packets, no Nagle/delayed-ACK stalls.
        self._headers_buffer.append(b"\r\n")
        if reset:
            self._headers_buffer.append(body[: len(body) // 2])
            self.flush_headers()
            self.abort_connection()
        first = self.throttle_out.chunk_size(len(body))
        self._headers_buffer.append(body[:first])
        self.flush_headers()
        self.throttle_out.pace(first)
        self.write_paced(memoryview(body)[first:])

    def write_paced(self, data):
        """Writes bytes at the connection's bandwidth (at once when there is no cap)."""
        sent = 0
        while sent < len(data):
            n = self.throttle_out.chunk_size(len(data) - sent)
            self.wfile.write(data[sent:sent + n])
            self.throttle_out.pace(n)
            sent += n

    def send_json(self, status, obj, headers=None, reset=False):
        body = json.dumps(obj).encode()
        self.send_bytes(status, body, "application/json", headers, reset)

    def send_text(self, status, text):
        self.send_bytes(status, text.encode(), "text/plain; charset=utf-8")

    def abort_connection(self):
        """Drops the connection at once with a TCP RST, so the client sees a truncated body."""
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.close_connection = True
        raise ConnectionAborted()

    def send_injected_failure(self, status, form):
        """A 5xx as Dropbox's front ends send them: plain text, an nginx-style HTML page, or
        nothing at all (Dropbox-Uploader#247 shows the HTML one for a 400)."""
        reason = {500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
                  504: "Gateway Timeout"}.get(status, "Server Error")
        if form == "html":
            page = f"<html><body><h1>{status} {reason}</h1>\n(injected fault)\n</body></html>\n"
            self.send_bytes(status, page.encode(), "text/html")
        elif form == "empty":
            self.send_bytes(status, b"", "text/plain")
        else:
            self.send_text(status, f"{reason} (injected fault)")

    def send_error_for(self, err, route):
        if isinstance(err, BadRequest):
            self.send_text(400, f'Error in call to API function "{route}": {err.text}')
        elif isinstance(err, RateLimited):
            self.send_json(429, err.body(), {"Retry-After": str(err.retry_after)})
        elif isinstance(err, (RouteError, AuthFailure)):
            self.send_json(err.status, err.body())
        else:
            self.send_text(500, "Internal Server Error")

    # ----- dispatch -----
    def dispatch(self):
        app = self.server.app
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        body = RequestBody(self.rfile, self.headers, self.throttle_in)
        path, self.asked_host = hosts.split(url.path, self.headers.get("Host"))
        try:
            if path.startswith("/_control/"):
                self.handle_control(path, body)
            elif path == "/oauth2/authorize":
                app.stats.count_request("oauth2/authorize")
                if self.refuse_host("oauth2/authorize", "web", body):
                    return
                self.send_response_object(app.tokens.authorize(url.query))
            elif path == "/oauth2/token":
                app.stats.count_request("oauth2/token")
                if self.refuse_host("oauth2/token", "api", body):
                    return
                form = body.read_all(1 << 20).decode("utf-8", "replace") or url.query
                self.send_response_object(app.tokens.token(form, self.headers.get("Authorization")))
            elif path.startswith("/2/"):
                self.handle_api(path[3:], query, body)
            else:
                self.send_text(404, "Not Found")
            if not body.done:
                body.drain()
        except ConnectionAborted:
            return
        except (ConnectionError, ssl.SSLError, TimeoutError):
            self.close_connection = True
        except Exception:
            # An emulator bug: say so loudly in the log, answer 500 if nothing was sent yet.
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            try:
                self.send_text(500, "Internal Server Error (emulator bug, see its stderr)")
            except (OSError, ValueError):
                pass

    def refuse_host(self, function, expected, body):
        """Answers the 400 of a request sent to the wrong host; True if it did."""
        try:
            hosts.check(function, expected, self.asked_host)
            return False
        except BadRequest as err:
            body.drain()
            self.send_text(400, err.text)
            return True

    def send_response_object(self, resp):
        self.send_bytes(resp.status, resp.body, resp.content_type, resp.headers)

    def handle_api(self, route_name, query, body):
        app = self.server.app
        app.stats.count_request(route_name)
        route = ROUTES.get(route_name)
        if route is None:
            body.drain()
            self.send_text(404, f'Unknown API function: "{route_name}"')
            return
        if self.refuse_host(route_name, hosts.route_host(route_name, route.style), body):
            return
        try:
            # A batch commit counts from its arrival (its latency included), so two batches sent
            # at once overlap as they would on Dropbox, which commits one at a time per namespace.
            in_batch_commit = app.contention.enter_batch_commit(route_name)
            # So does a listing, until its answer is ready: an identical one is refused meanwhile
            # (listing_overlap.py). Its arguments are read now for that.
            if route_name in listing_overlap.ROUTES:
                body = ReadBody(body.read_all(MAX_RPC_BODY))
                self.listing_served = app.listing_overlap.arrive(
                    route_name, body.raw, self.headers.get("Authorization"), self.headers.get("Dropbox-API-Path-Root"))
        except ApiError as err:
            body.drain()
            self.send_error_for(err, route_name)
            return
        try:
            self.handle_api_call(route_name, route, query, body)
        finally:
            self.listing_answered()
            if in_batch_commit:
                app.contention.leave_batch_commit()

    listing_served = None   # the key of the listing this connection is serving (listing_overlap.py)

    def listing_answered(self):
        self.server.app.listing_overlap.leave(self.listing_served)
        self.listing_served = None

    def handle_api_call(self, route_name, route, query, body):
        app = self.server.app
        settings = app.settings
        self.pay_round_trips()
        if not app.rate_limiter.allow():
            app.stats.count_fault("rate_limited")
            body.drain()
            self.send_error_for(RateLimited("too_many_requests", settings["retry_after"]), route_name)
            return
        if settings.take("fail_next") or settings.roll("fail_rate"):
            app.stats.count_fault("fail")
            body.drain()
            self.send_injected_failure(settings["fail_status"], settings["fail_body"])
            return

        reset = settings.roll("reset_rate")
        if reset:
            app.stats.count_fault("reset")
        entered_gate = False
        try:
            token = None
            view = app.account.home_view()
            if route.auth:
                token = self.bearer_token(query)
                app.tokens.check(token)
                # The namespace this call works in (namespaces.py): 400 or 422 for a bad header.
                view = app.account.view_for_header(self.headers.get("Dropbox-API-Path-Root"), app.shares)
            if route.write:
                if not app.write_gate.enter():
                    app.stats.count_fault("write_limited")
                    raise app.contention.rate_limited(header_only=True)
                entered_gate = True
                if settings.take("deny_next"):
                    # An app without the files.content.write scope, or an account that may not write.
                    app.stats.count_fault("denied")
                    raise (AuthFailure("missing_scope") if settings["deny_form"] == "missing_scope"
                           else RouteError({".tag": "no_permission"}, status=403))
                app.contention.check_call(route_name)
            arg = self.decode_arg(route, query, body)
            call = Call(app, route_name, arg, body, token, self, reset)
            if route.style == "upload":
                call.abort_mid_upload()
            try:
                with namespaces.request_context(app, view):
                    result = route.func(call)
            finally:
                # The commit is over once the route returns: free the gate before answering, so a
                # client that reacts to the answer at once is not refused by its own finished write.
                # The same for a listing and the next identical one.
                if entered_gate:
                    app.write_gate.leave()
                    entered_gate = False
                self.listing_answered()
            if route.style == "download":
                self.send_download(result, reset)
            else:
                if not body.done:
                    body.drain()
                self.send_json(200, result, reset=reset)
        except ApiError as err:
            if isinstance(err, AuthFailure) and err.tag == "expired_access_token":
                app.stats.count_fault("expired")
            if not body.done:
                body.drain()
            self.send_error_for(err, route_name)
        finally:
            if entered_gate:
                app.write_gate.leave()

    def bearer_token(self, query):
        header = self.headers.get("Authorization")
        if header is None and "authorization" in query:
            header = query["authorization"][0]
        if header is None:
            raise BadRequest('Must provide HTTP header "Authorization" or URL parameter "authorization".')
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise BadRequest('Invalid authorization value in HTTP header "Authorization": "%s".  '
                             'Expecting "Bearer <oauth2-access-token>".' % header)
        return token.strip()

    def decode_arg(self, route, query, body):
        content_type = (self.headers.get("Content-Type") or "").strip()
        if route.style == "rpc":
            if content_type and content_type.lower() not in JSON_TYPES:
                raise BadRequest(f'Bad HTTP "Content-Type" header: "{content_type}".  Expecting one of '
                                 '"application/json", "text/plain; charset=dropbox-cors-hack".')
            raw = body.read_all(MAX_RPC_BODY)
            if not raw.strip():
                return None
            try:
                return json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                raise BadRequest("request body: could not decode input as JSON")
        if route.style == "upload" and content_type.lower() not in UPLOAD_TYPES:
            raise BadRequest(f'Bad HTTP "Content-Type" header: "{content_type}".  Expecting one of '
                             '"application/octet-stream", "text/plain; charset=dropbox-cors-hack".')
        header = self.headers.get("Dropbox-API-Arg")
        if header is not None:
            # http.client decoded the header bytes as Latin-1; undo that so raw UTF-8 works too.
            try:
                text = header.encode("latin-1").decode("utf-8")
            except (UnicodeEncodeError, UnicodeDecodeError):
                text = header
            source = 'HTTP header "Dropbox-API-Arg"'
        elif "arg" in query:
            text, source = query["arg"][0], 'URL parameter "arg"'
        else:
            raise BadRequest('Must provide HTTP header "Dropbox-API-Arg" or URL parameter "arg".')
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            raise BadRequest(f"{source}: could not decode input as JSON")

    def send_download(self, dl, reset):
        with dl.file:
            self._send_download(dl, reset)

    def _send_download(self, dl, reset):
        result = json.dumps(dl.result, ensure_ascii=True)
        if dl.etag and self.headers.get("If-None-Match") == dl.etag:
            self.send_response(304)
            self.send_header("Dropbox-API-Result", result)
            self.send_header("ETag", dl.etag)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        rng = parse_range(self.headers.get("Range"), dl.size)
        if rng == "bad":
            self.send_bytes(416, b"", "text/plain", {"Content-Range": f"bytes */{dl.size}"})
            return
        start, end = rng if rng else (0, dl.size - 1)
        length = max(0, end - start + 1)
        self.send_response(206 if rng else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Dropbox-API-Result", result)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("X-Dropbox-Request-Id", uuid.uuid4().hex)
        if dl.etag:
            self.send_header("ETag", dl.etag)
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end}/{dl.size}")
        self.end_headers()
        limit = length // 2 if reset else length
        f = dl.file
        sent = 0
        plain_socket = not isinstance(self.connection, ssl.SSLSocket)
        if plain_socket and not self.server.app.settings["bandwidth"] and not reset:
            out = self.connection.fileno()
            while sent < limit:
                n = os.sendfile(out, f.fileno(), start + sent, min(limit - sent, 1 << 30))
                if n == 0:
                    break
                sent += n
        else:
            f.seek(start)
            piece = FIRST_DOWNLOAD_PIECE
            while sent < limit:
                chunk = f.read(self.throttle_out.chunk_size(min(piece, limit - sent)))
                if not chunk:
                    break
                self.wfile.write(chunk)
                sent += len(chunk)
                self.throttle_out.pace(len(chunk))
                piece = min(2 * piece, IO_CHUNK)
        if reset:
            self.abort_connection()

    # ----- /_control -----
    def handle_control(self, path, body):
        app = self.server.app
        host = self.client_address[0]
        if host not in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
            self.send_text(403, "control endpoint is loopback-only")
            return
        if self.headers.get("Authorization", "") != "Bearer " + app.control_token:
            body.drain()
            self.send_text(401, "control endpoint needs Authorization: Bearer <control token>")
            return
        raw = body.read_all(1 << 20)
        if path == "/_control/config":
            if self.command == "POST":
                try:
                    changes = json.loads(raw or b"{}")
                    if not isinstance(changes, dict):
                        raise ValueError("expected a JSON object")
                    app.settings.update(changes)
                except ValueError as err:
                    self.send_text(400, f"bad config: {err}")
                    return
            self.send_json(200, app.settings.snapshot())
        elif path == "/_control/stats":
            self.send_json(200, app.stats.snapshot())
        elif path == "/_control/stats/reset" and self.command == "POST":
            app.stats.reset()
            self.send_json(200, app.stats.snapshot())
        elif path == "/_control/path_state" and self.command == "POST":
            try:
                request = json.loads(raw or b"{}")
                app.path_states.set(lower(nfc(request["path"])), request.get("state"))
            except (ValueError, KeyError, TypeError) as err:
                self.send_text(400, f"bad path_state: {err}")
                return
            self.send_json(200, {"path": request["path"], "state": request.get("state")})
        elif path == "/_control/purge_deleted" and self.command == "POST":
            revisions, blobs = app.store.purge_deleted()
            self.send_json(200, {"revisions": revisions, "blobs": blobs})
        elif path == "/_control/reset_cursors" and self.command == "POST":
            app.store.invalidate_cursors()
            self.send_json(200, {"epoch": app.store.epoch})
        elif path in account_seed.CONTROL:
            try:
                status, answer = account_seed.handle_control(app, path, self.command, raw)
            except RouteError as err:
                status, answer = 409, err.body()
            self.send_json(status, answer)
        else:
            self.send_text(404, "unknown control request")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True

    def __init__(self, address, app, tls_cert=None, tls_key=None, verbose=False):
        host = address[0]
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__(address, Handler)
        self.app = app
        self.verbose = verbose
        self.scheme = "http"
        if tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls_cert, tls_key)
            # Handshake in the connection's own thread, not in the accept loop.
            self.socket = ctx.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
            self.scheme = "https"

    def handle_error(self, request, client_address):
        if self.verbose:
            super().handle_error(request, client_address)

    @property
    def url(self):
        host, port = self.server_address[:2]
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{port}"

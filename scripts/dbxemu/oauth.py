"""Access tokens and the OAuth2 endpoints (/oauth2/authorize and /oauth2/token).

Tokens given with --token never expire. Tokens issued through OAuth expire after `token_ttl`
seconds (Dropbox's 14400 when unset) and answer 401 `expired_access_token` afterwards.
Revoking an access token also revokes its refresh token and that refresh token's other
access tokens, as Dropbox does.

The authorize page is made for tests: add `approve=1` to the query and it approves at once.
Without `redirect_uri` the answer is a small HTML page with the code in
`<code id="auth-code">CODE</code>`; with `redirect_uri` it is a 302 to
`redirect_uri?code=CODE&state=STATE`. `deny=1` redirects with `error=access_denied`.
"""

import base64
import hashlib
import html
import json
import secrets
import time
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from .errors import AuthFailure

DEFAULT_TTL = 14400
CODE_TTL = 600

SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    token TEXT PRIMARY KEY, kind TEXT NOT NULL, refresh_token TEXT, expires_at REAL,
    revoked INTEGER NOT NULL DEFAULT 0, client_id TEXT, scope TEXT);
CREATE INDEX IF NOT EXISTS tokens_refresh ON tokens(refresh_token);
CREATE TABLE IF NOT EXISTS auth_codes (
    code TEXT PRIMARY KEY, client_id TEXT, redirect_uri TEXT, challenge TEXT, method TEXT,
    access_type TEXT, scope TEXT, expires_at REAL, used INTEGER NOT NULL DEFAULT 0);
"""


class Response:
    """A finished HTTP answer: status, headers and a body."""

    def __init__(self, status, body=b"", content_type="application/json", headers=None):
        self.status = status
        self.body = body if isinstance(body, bytes) else body.encode()
        self.content_type = content_type
        self.headers = headers or {}


def json_response(status, obj):
    return Response(status, json.dumps(obj))


def oauth_error(error, description, status=400):
    return json_response(status, {"error": error, "error_description": description})


class TokenRegistry:
    def __init__(self, store, settings, static_tokens, app_key=None):
        self.store = store
        self.settings = settings
        self.app_key = app_key
        with store.lock:
            store.db.executescript(SCHEMA)
        with store.write() as db:
            for token in static_tokens:
                db.execute("INSERT OR REPLACE INTO tokens (token, kind, revoked) VALUES (?, 'static', 0)", (token,))

    # ----- API authentication -----
    def check(self, token):
        """Raises AuthFailure unless `token` is a live access token."""
        with self.store.lock:
            row = self.store.db.execute("SELECT kind, expires_at, revoked FROM tokens WHERE token = ?",
                                        (token,)).fetchone()
        if row is None or row["kind"] == "refresh" or row["revoked"]:
            raise AuthFailure("invalid_access_token")
        if row["expires_at"] is not None and time.time() >= row["expires_at"]:
            raise AuthFailure("expired_access_token")

    def revoke(self, token):
        with self.store.write() as db:
            row = db.execute("SELECT refresh_token FROM tokens WHERE token = ?", (token,)).fetchone()
            db.execute("UPDATE tokens SET revoked = 1 WHERE token = ?", (token,))
            if row is not None and row["refresh_token"]:
                db.execute("UPDATE tokens SET revoked = 1 WHERE token = ? OR refresh_token = ?",
                           (row["refresh_token"], row["refresh_token"]))

    def _issue_access(self, db, client_id, refresh_token, scope):
        ttl = self.settings["token_ttl"] or DEFAULT_TTL
        token = "sl." + secrets.token_urlsafe(48)
        db.execute("INSERT INTO tokens (token, kind, refresh_token, expires_at, client_id, scope) "
                   "VALUES (?, 'access', ?, ?, ?, ?)", (token, refresh_token, time.time() + ttl, client_id, scope))
        return token, max(1, int(round(ttl)))

    # ----- /oauth2/authorize -----
    def authorize(self, query):
        params = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
        if params.get("response_type") != "code":
            return Response(400, "<p>Error (400): response_type must be \"code\".</p>", "text/html; charset=utf-8")
        client_id = params.get("client_id", "")
        if not client_id or (self.app_key and client_id != self.app_key):
            return Response(400, "<p>Error (400): Invalid client_id.</p>", "text/html; charset=utf-8")
        method = params.get("code_challenge_method") or ("plain" if params.get("code_challenge") else "")
        if method not in ("", "S256", "plain"):
            return Response(400, "<p>Error (400): unknown code_challenge_method.</p>", "text/html; charset=utf-8")
        access_type = params.get("token_access_type") or "online"
        if access_type not in ("online", "offline", "legacy"):
            return Response(400, "<p>Error (400): unknown token_access_type.</p>", "text/html; charset=utf-8")
        redirect_uri = params.get("redirect_uri")
        state = params.get("state")
        if params.get("deny") == "1" and redirect_uri:
            return self._redirect(redirect_uri, {"error": "access_denied", "state": state})
        if params.get("approve") != "1":
            approve_query = urlencode({**params, "approve": "1"})
            page = ("<!doctype html><html><head><meta charset=\"utf-8\"><title>Authorize app</title></head>"
                    f"<body><p>The app <b>{html.escape(client_id)}</b> asks for access to your emulated Dropbox.</p>"
                    f"<p><a id=\"approve\" href=\"/oauth2/authorize?{html.escape(approve_query)}\">Allow</a></p>"
                    "</body></html>")
            return Response(200, page, "text/html; charset=utf-8")
        code = secrets.token_urlsafe(32)
        with self.store.write() as db:
            db.execute("INSERT INTO auth_codes (code, client_id, redirect_uri, challenge, method, access_type, "
                       "scope, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (code, client_id, redirect_uri, params.get("code_challenge"), method, access_type,
                        params.get("scope", ""), time.time() + CODE_TTL))
        if redirect_uri:
            return self._redirect(redirect_uri, {"code": code, "state": state})
        page = ("<!doctype html><html><head><meta charset=\"utf-8\"><title>Authorization code</title></head>"
                "<body><p>Enter this code into the app:</p>"
                f"<code id=\"auth-code\">{code}</code></body></html>")
        return Response(200, page, "text/html; charset=utf-8")

    @staticmethod
    def _redirect(uri, params):
        parts = urlsplit(uri)
        extra = urlencode({k: v for k, v in params.items() if v is not None})
        query = parts.query + ("&" if parts.query else "") + extra
        return Response(302, b"", "text/plain", {"Location": urlunsplit(parts._replace(query=query))})

    # ----- /oauth2/token -----
    def token(self, form, authorization_header):
        params = {k: v[0] for k, v in parse_qs(form, keep_blank_values=True).items()}
        client_id, client_secret = params.get("client_id"), params.get("client_secret")
        if authorization_header and authorization_header.lower().startswith("basic "):
            try:
                pair = base64.b64decode(authorization_header[6:].strip()).decode()
                client_id, _, client_secret = pair.partition(":")
            except (ValueError, UnicodeDecodeError):
                return oauth_error("invalid_client", "bad Basic authorization header")
        if self.app_key and client_id != self.app_key:
            return oauth_error("invalid_client", "Invalid client_id or client_secret")
        grant = params.get("grant_type")
        if grant == "authorization_code":
            return self._grant_code(params, client_id, client_secret)
        if grant == "refresh_token":
            return self._grant_refresh(params, client_id)
        return oauth_error("unsupported_grant_type", f"unknown grant_type {grant!r}")

    def _grant_code(self, params, client_id, client_secret):
        with self.store.write() as db:
            row = db.execute("SELECT * FROM auth_codes WHERE code = ?", (params.get("code", ""),)).fetchone()
            if row is None or row["used"] or time.time() > row["expires_at"]:
                return oauth_error("invalid_grant", "code doesn't exist or has expired")
            if row["client_id"] != client_id:
                return oauth_error("invalid_grant", "code was issued to a different client")
            if row["redirect_uri"] and params.get("redirect_uri") != row["redirect_uri"]:
                return oauth_error("invalid_grant", "redirect_uri mismatch")
            if row["challenge"]:
                verifier = params.get("code_verifier", "")
                if row["method"] == "S256":
                    computed = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
                else:
                    computed = verifier
                if not verifier or computed != row["challenge"]:
                    return oauth_error("invalid_grant", "invalid code verifier")
            elif not client_secret:
                return oauth_error("invalid_request", "No auth function available for given request")
            db.execute("UPDATE auth_codes SET used = 1 WHERE code = ?", (row["code"],))
            refresh = None
            if row["access_type"] == "offline":
                refresh = secrets.token_urlsafe(48)
                db.execute("INSERT INTO tokens (token, kind, client_id, scope) VALUES (?, 'refresh', ?, ?)",
                           (refresh, client_id, row["scope"]))
            access, expires_in = self._issue_access(db, client_id, refresh, row["scope"])
        body = {"access_token": access, "token_type": "bearer", "expires_in": expires_in,
                "scope": row["scope"] or "account_info.read files.content.read files.content.write files.metadata.read",
                "uid": self.store.uid, "account_id": self.store.account_id}
        if refresh:
            body["refresh_token"] = refresh
        return json_response(200, body)

    def _grant_refresh(self, params, client_id):
        with self.store.write() as db:
            row = db.execute("SELECT * FROM tokens WHERE token = ? AND kind = 'refresh'",
                             (params.get("refresh_token", ""),)).fetchone()
            if row is None or row["revoked"]:
                return oauth_error("invalid_grant", "refresh token is invalid or revoked")
            if row["client_id"] and client_id and row["client_id"] != client_id:
                return oauth_error("invalid_grant", "refresh token was issued to a different client")
            access, expires_in = self._issue_access(db, row["client_id"], row["token"], row["scope"])
        return json_response(200, {"access_token": access, "token_type": "bearer", "expires_in": expires_in})

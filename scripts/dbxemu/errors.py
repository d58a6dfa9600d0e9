"""Exceptions that carry a Dropbox API error all the way to the HTTP layer.

Dropbox answers errors in a few distinct shapes (see dropbox-api-notes.md section 3):
400 is plain text, 401/403/409 are JSON with `error_summary` and `error`, 429 is JSON plus a
`Retry-After` header, 5xx is plain text. Route code raises one of these; `http_server`
serialises it.
"""


class ApiError(Exception):
    """Base class: anything the HTTP layer knows how to answer."""
    status = 500


class BadRequest(ApiError):
    """400 with a plain-text body (argument decoding and validation failures)."""
    status = 400

    def __init__(self, text):
        super().__init__(text)
        self.text = text


def error_summary(error):
    """Builds Dropbox's `error_summary`: the chain of union tags joined by '/', then '/..'.

    A union member that is another union is nested under the key equal to its tag; a member
    that is a struct is inlined, and its own union fields (e.g. `reason`) continue the chain.
    """
    tags = []
    node = error
    while isinstance(node, dict) and ".tag" in node and len(tags) < 10:
        tag = node[".tag"]
        tags.append(tag)
        nxt = node.get(tag)
        if not (isinstance(nxt, dict) and ".tag" in nxt):
            nxt = next((v for k, v in node.items() if k != tag and isinstance(v, dict) and ".tag" in v), None)
        node = nxt
    return "/".join(tags) + "/.."


class RouteError(ApiError):
    """409 (or 403) with the route-error envelope `{"error_summary", "error"}`."""
    status = 409

    def __init__(self, error, status=409, user_message=None):
        super().__init__(error_summary(error))
        self.error = error
        self.status = status
        self.user_message = user_message

    def body(self):
        body = {"error_summary": error_summary(self.error), "error": self.error}
        if self.user_message:
            body["user_message"] = {"text": self.user_message, "locale": "en"}
        return body


class AuthFailure(ApiError):
    """401 with an AuthError union, e.g. `invalid_access_token` or `expired_access_token`."""
    status = 401

    def __init__(self, tag):
        super().__init__(tag)
        self.tag = tag

    def body(self):
        err = {".tag": self.tag}
        if self.tag == "missing_scope":
            # The scope the emulator pretends the app lacks (AuthError.missing_scope, auth.stone).
            err["required_scope"] = "files.content.write"
        return {"error_summary": error_summary(err), "error": err}


class RateLimited(ApiError):
    """429 with `{"reason": {".tag": reason}, "retry_after": N}` and a `Retry-After` header.

    `header_only`: the body has no `retry_after` field, only the header says how long to wait, as
    in a real answer to a write-contended upload (dropbox/dropbox-sdk-go-unofficial#33).
    """
    status = 429

    def __init__(self, reason="too_many_requests", retry_after=1, header_only=False):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.header_only = header_only

    def body(self):
        error = {"reason": {".tag": self.reason}}
        if not self.header_only:
            error["retry_after"] = self.retry_after
        return {"error_summary": self.reason + "/.", "error": error}


def lookup_error(tag, wrapper="path"):
    """A LookupError nested under `wrapper`, e.g. path/not_found."""
    return RouteError({".tag": wrapper, wrapper: {".tag": tag}})


def write_error(tag, wrapper="path", conflict=None):
    """A WriteError nested under `wrapper`; `conflict` is file, folder or file_ancestor."""
    inner = {".tag": tag}
    if tag == "conflict":
        inner["conflict"] = {".tag": conflict}
    return RouteError({".tag": wrapper, wrapper: inner})

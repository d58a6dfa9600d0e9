/// The one error type of the client. Each case says which kind of failure happened, so the FUSE
/// layer can map them to errno in one place: a route's own error union (`route`), auth, rate
/// limiting, bad input, server trouble, transport, cancellation. `classify` turns an HTTP answer
/// into one of these; it is the only place that knows how Dropbox spells its failures.
import Foundation

public enum DropboxError: Error, Sendable, Equatable {
    /// 409: the route's own error union, decoded, plus the opaque `error_summary`.
    case route(RouteError, summary: String)
    /// 401: the AuthError tag (`expired_access_token`, `invalid_access_token`, `missing_scope`, ...).
    case auth(AuthError, summary: String)
    /// 403: AccessError tag (`no_permission`, `invalid_account_type`, ...).
    case accessDenied(tag: String, summary: String)
    /// 429 after the retry budget: `too_many_requests` or `too_many_write_operations`.
    case rateLimited(reason: String, retryAfter: Double)
    /// 400 (and 422 path-root errors): the server's explanation, verbatim.
    case badInput(String)
    /// 5xx after the retry budget.
    case server(status: Int, message: String)
    /// The request never produced an HTTP answer: curl's code and message.
    case transport(code: Int, message: String)
    /// The caller's cancel handle fired, or a sink/progress callback asked to stop.
    case cancelled
    /// The server answered something that does not follow the API (missing fields, bad JSON).
    case unexpectedResponse(String)
    /// The local side failed: the upload source could not be read.
    case localIO(String)
    /// A download was resumed after a failure, but the file changed in between (new rev).
    case contentChanged(path: String)

    /// The failures worth retrying by the policy: transport trouble, 5xx, 429.
    var isTransient: Bool {
        if case .rateLimited = self { return true }
        return isUnreachable
    }

    /// Dropbox is not there (no HTTP answer, or a 5xx), as opposed to "Dropbox said no": what
    /// makes a mount offline.
    public var isUnreachable: Bool {
        switch self {
        case .transport, .server: true
        default: false
        }
    }
}

/// Stone `AuthError`.
public enum AuthError: Sendable, Equatable {
    case invalidAccessToken, invalidSelectUser, invalidSelectAdmin, userSuspended, expiredAccessToken
    case missingScope(requiredScope: String?)
    case routeAccessDenied
    case other(String)

    init(json: JSON?) {
        switch json?.tag {
        case "invalid_access_token": self = .invalidAccessToken
        case "invalid_select_user": self = .invalidSelectUser
        case "invalid_select_admin": self = .invalidSelectAdmin
        case "user_suspended": self = .userSuspended
        case "expired_access_token": self = .expiredAccessToken
        case "missing_scope": self = .missingScope(requiredScope: json?["required_scope"]?.string)
        case "route_access_denied": self = .routeAccessDenied
        case let other: self = .other(other ?? "unknown")
        }
    }
}

/// Stone `LookupError`.
public enum LookupError: Sendable, Equatable {
    case malformedPath(String?)
    case notFound, notFile, notFolder, restrictedContent, unsupportedContentType, locked
    case other(String)

    init(json: JSON?) {
        switch json?.tag {
        case "malformed_path": self = .malformedPath(json?["malformed_path"]?.string)
        case "not_found": self = .notFound
        case "not_file": self = .notFile
        case "not_folder": self = .notFolder
        case "restricted_content": self = .restrictedContent
        case "unsupported_content_type": self = .unsupportedContentType
        case "locked": self = .locked
        case let other: self = .other(other ?? "unknown")
        }
    }
}

/// Stone `WriteConflictError`: what is already at the target.
public enum WriteConflict: Sendable, Equatable {
    case file, folder, fileAncestor
    case other(String)
}

/// Stone `WriteError`.
public enum WriteError: Sendable, Equatable {
    case malformedPath(String?)
    case conflict(WriteConflict)
    case noWritePermission, insufficientSpace, disallowedName, teamFolder, operationSuppressed
    case tooManyWriteOperations, accessRestricted
    case other(String)

    init(json: JSON?) {
        switch json?.tag {
        case "malformed_path": self = .malformedPath(json?["malformed_path"]?.string)
        case "conflict":
            switch json?["conflict"]?.tag {
            case "file": self = .conflict(.file)
            case "folder": self = .conflict(.folder)
            case "file_ancestor": self = .conflict(.fileAncestor)
            case let other: self = .conflict(.other(other ?? "unknown"))
            }
        case "no_write_permission": self = .noWritePermission
        case "insufficient_space": self = .insufficientSpace
        case "disallowed_name": self = .disallowedName
        case "team_folder": self = .teamFolder
        case "operation_suppressed": self = .operationSuppressed
        case "too_many_write_operations": self = .tooManyWriteOperations
        case "access_restricted": self = .accessRestricted
        case let other: self = .other(other ?? "unknown")
        }
    }
}

/// Stone `UploadSessionLookupError` (and the append error that extends it).
public enum UploadSessionLookupError: Sendable, Equatable {
    case notFound
    /// The server has a different number of bytes than the append's offset assumed.
    case incorrectOffset(correctOffset: UInt64)
    case closed, notClosed, tooLarge
    case concurrentSessionInvalidOffset, concurrentSessionInvalidDataSize, payloadTooLarge
    case other(String)

    init(json: JSON?) {
        switch json?.tag {
        case "not_found": self = .notFound
        case "incorrect_offset": self = .incorrectOffset(correctOffset: json?["correct_offset"]?.uint64 ?? 0)
        case "closed": self = .closed
        case "not_closed": self = .notClosed
        case "too_large": self = .tooLarge
        case "concurrent_session_invalid_offset": self = .concurrentSessionInvalidOffset
        case "concurrent_session_invalid_data_size": self = .concurrentSessionInvalidDataSize
        case "payload_too_large": self = .payloadTooLarge
        case let other: self = .other(other ?? "unknown")
        }
    }
}

/// A route's error union, decoded. Stone reuses tag names with different payload types across
/// routes (`path` is a LookupError for get_metadata but a WriteError for create_folder_v2), so each
/// route declares its `RouteErrorShape` and the case names below say which payload was found.
public enum RouteError: Sendable, Equatable {
    /// `path` → LookupError: get_metadata, list_folder (+continue, get_latest_cursor), download.
    case path(LookupError)
    /// `path` → WriteError: create_folder_v2, upload (UploadWriteFailed.reason), session finish.
    case pathWrite(WriteError)
    /// delete_v2 `path_lookup` / `path_write`.
    case pathLookup(LookupError)
    case pathWriteOnDelete(WriteError)
    /// move_v2/copy_v2 `from_lookup`, `from_write`, `to`.
    case fromLookup(LookupError)
    case fromWrite(WriteError)
    case to(WriteError)
    /// upload_session/append_v2 errors, and finish's `lookup_failed`.
    case uploadSession(UploadSessionLookupError)
    /// The cursor is no longer valid (list_folder/continue, longpoll).
    case reset
    /// create_shared_link_with_settings `settings_error`: the SharedLinkSettingsError tag
    /// (`invalid_settings`, `not_authorized`).
    case settingsError(String)
    /// Any other member of the route's union, by tag (`cant_move_folder_into_itself`,
    /// `content_hash_mismatch`, `too_many_write_operations`, `invalid_async_job_id`, ...).
    case other(tag: String)

    /// Decodes the `error` member of a 409 envelope for a route of the given shape.
    public init(json: JSON, shape: RouteErrorShape) {
        let tag = json.tag ?? "unknown"
        switch (shape, tag) {
        case (_, "reset"): self = .reset
        case (.lookup, "path"), (.sharedLink, "path"): self = .path(LookupError(json: json["path"]))
        case (.sharedLink, "settings_error"): self = .settingsError(json["settings_error"]?.tag ?? "other")
        case (.write, "path"): self = .pathWrite(WriteError(json: json["path"]))
        // UploadWriteFailed is a plain struct, so it is inlined next to the tag: {"reason": ...}.
        case (.upload, "path"): self = .pathWrite(WriteError(json: json["reason"]))
        case (.uploadSession, _) where tag != "content_hash_mismatch" && tag != "other":
            self = .uploadSession(UploadSessionLookupError(json: json))
        case (.uploadSessionFinish, "lookup_failed"): self = .uploadSession(UploadSessionLookupError(json: json["lookup_failed"]))
        case (.uploadSessionFinish, "path"): self = .pathWrite(WriteError(json: json["path"]))
        case (.delete, "path_lookup"): self = .pathLookup(LookupError(json: json["path_lookup"]))
        case (.delete, "path_write"): self = .pathWriteOnDelete(WriteError(json: json["path_write"]))
        case (.relocation, "from_lookup"): self = .fromLookup(LookupError(json: json["from_lookup"]))
        case (.relocation, "from_write"): self = .fromWrite(WriteError(json: json["from_write"]))
        case (.relocation, "to"): self = .to(WriteError(json: json["to"]))
        default: self = .other(tag: tag)
        }
    }

    /// The LookupError inside, whichever member carries it.
    public var lookup: LookupError? {
        switch self {
        case .path(let e), .pathLookup(let e), .fromLookup(let e): e
        default: nil
        }
    }
    /// The WriteError inside, whichever member carries it.
    public var write: WriteError? {
        switch self {
        case .pathWrite(let e), .pathWriteOnDelete(let e), .fromWrite(let e), .to(let e): e
        default: nil
        }
    }
}

extension RouteError {
    static let writeContentionTag = "too_many_write_operations"

    /// Whether a route's error union says `too_many_write_operations`, at the top (DeleteError,
    /// UploadSessionFinishError, a finish_batch entry's failure) or one union down (a WriteError in
    /// `path`, `path_write`, `to`, `from_write`, or UploadWriteFailed's `reason`).
    static func isWriteContention(_ error: JSON) -> Bool {
        guard let tag = error.tag else { return false }
        if tag == writeContentionTag { return true }
        return error[tag]?.tag == writeContentionTag || error["reason"]?.tag == writeContentionTag
    }
}

/// Which error union a route declares, so `RouteError.init(json:shape:)` can read its payloads.
public enum RouteErrorShape: Sendable {
    case lookup, write, upload, uploadSession, uploadSessionFinish, delete, relocation, sharedLink, none
}

extension DropboxError {
    /// Classifies a non-2xx answer. `retryAfterHeader` is the `Retry-After` header, if any.
    public static func classify(status: Int, body: Data, contentType: String?, retryAfterHeader: String?,
                                shape: RouteErrorShape) -> DropboxError {
        let text = String(decoding: body, as: UTF8.self)
        let json: JSON? = (contentType?.hasPrefix("application/json") ?? false) || text.hasPrefix("{")
            ? try? JSON.parse(body) : nil
        let summary = json?["error_summary"]?.string ?? ""
        switch status {
        case 400:
            return .badInput(text)
        case 401:
            return .auth(AuthError(json: json?["error"]), summary: summary)
        case 403:
            return .accessDenied(tag: json?["error"]?.tag ?? "unknown", summary: summary)
        case 409:
            guard let error = json?["error"] else { return .unexpectedResponse("409 without error: \(text.prefix(200))") }
            // Write contention as a route error (inside WriteError, DeleteError, UploadSessionFinishError,
            // UploadWriteFailed) means the same as its 429 form: wait and send the request again.
            if RouteError.isWriteContention(error) {
                let retryAfter = retryAfterHeader.flatMap { Double($0.trimmingCharacters(in: .whitespaces)) } ?? 1
                return .rateLimited(reason: RouteError.writeContentionTag, retryAfter: retryAfter)
            }
            return .route(RouteError(json: error, shape: shape), summary: summary)
        case 422:
            return .badInput("path root error: \(summary.isEmpty ? text : summary)")
        case 429:
            let reason = json?["error"]?["reason"]?.tag ?? "too_many_requests"
            let retryAfter = json?["error"]?["retry_after"]?.double
                ?? retryAfterHeader.flatMap { Double($0.trimmingCharacters(in: .whitespaces)) } ?? 1
            return .rateLimited(reason: reason, retryAfter: retryAfter)
        case 500...599:
            return .server(status: status, message: String(text.prefix(500)))
        default:
            return .unexpectedResponse("HTTP \(status)" + (text.isEmpty ? " with an empty body" : ": \(text.prefix(500))"))
        }
    }
}

/// How the client's errors read to a person: one sentence each, saying what happened (and what to
/// do, where the client knows), never a dump of the enum. This is the one rendering of
/// `DropboxError` and of the Dropbox unions inside it; logs, the mount's messages and the
/// `auth`/`unlink` lines all go through it. Dropbox's own tags (`too_many_files`) stay in
/// parentheses where they help a search; Swift's spellings never show.
import Foundation

extension DropboxError: CustomStringConvertible {
    public var description: String { describe(server: "Dropbox") }

    /// The sentence, naming the server: "Dropbox", or the URL of an emulator or gateway.
    public func describe(server: String) -> String {
        switch self {
        case .route(.other(let tag), _):
            return "\(server) refused the request (\(tag))"
        case .route(let error, _):
            return "\(server) refused the request: \(error)"
        case .auth(.other(let tag), let summary):
            // The OAuth token endpoint's answers (RFC 6749: invalid_grant, invalid_client, ...).
            let detail = summary.isEmpty || summary == tag ? "" : ": \(summary)"
            return "\(server) refused the authorization\(detail) (\(tag))"
        case .auth(let error, _):
            return "\(server) rejected the access token: \(error)"
        case .accessDenied(let tag, _):
            return "\(server) denied access (\(tag))"
        case .rateLimited(let reason, let retryAfter):
            let why = reason == RouteError.writeContentionTag ? "too many writes at once in this account" : "too many requests"
            return "\(server) asks to slow down (\(why)); retry in \(Self.seconds(retryAfter))"
        case .badInput(let text):
            return "\(server) rejected the request as invalid: \(Self.oneLine(text))"
        case .server(let status, let message):
            let body = Self.oneLine(message)
            return "\(server) is failing (HTTP \(status)\(body.isEmpty ? "" : ": \(body)")); try again later"
        case .transport(_, let message):
            return "cannot reach \(server): \(message)"
        case .cancelled:
            return "the request to \(server) was cancelled"
        case .unexpectedResponse(let text):
            // A 404 or an HTML page is nearly always a wrong API base URL.
            let hint = text.hasPrefix("HTTP 404") ? " (is the API base URL right?)" : ""
            return "\(server) answered something dbxfs does not understand: \(Self.oneLine(text))\(hint)"
        case .localIO(let text):
            return "cannot read the local file to upload: \(text)"
        case .contentChanged(let path):
            return "\(path) changed on \(server) while it was being downloaded"
        }
    }

    /// Server text on one line and of bounded length (error pages can be long HTML).
    static func oneLine(_ text: String, limit: Int = 200) -> String {
        let flat = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
        return flat.count > limit ? String(flat.prefix(limit)) + "…" : flat
    }

    static func seconds(_ value: Double) -> String {
        let whole = Int(value.rounded(.up))
        return whole == 1 ? "1 second" : "\(whole) seconds"
    }
}

extension AuthError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .invalidAccessToken: "the access token is invalid or was revoked"
        case .invalidSelectUser: "the team member it names (Dropbox-API-Select-User) is not valid"
        case .invalidSelectAdmin: "the team admin it names (Dropbox-API-Select-Admin) is not valid"
        case .userSuspended: "the Dropbox account is suspended"
        case .expiredAccessToken: "the access token has expired"
        case .missingScope(let scope): "the app lacks the permission \(scope ?? "this call needs") (missing_scope)"
        case .routeAccessDenied: "the app may not use this call"
        case .other(let tag): tag
        }
    }
}

extension LookupError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .malformedPath(let detail): "the path is malformed\(detail.map { " (\($0))" } ?? "")"
        case .notFound: "nothing is there (not_found)"
        case .notFile: "it is a folder, not a file (not_file)"
        case .notFolder: "it is a file, not a folder (not_folder)"
        case .restrictedContent: "the content is restricted and will not be served (restricted_content)"
        case .unsupportedContentType: "the content type is not supported (unsupported_content_type)"
        case .locked: "the file is locked (locked)"
        case .other(let tag): tag
        }
    }
}

extension WriteConflict: CustomStringConvertible {
    public var description: String {
        switch self {
        case .file: "a file is already there"
        case .folder: "a folder is already there"
        case .fileAncestor: "a file is where a parent folder should be"
        case .other(let tag): "something is already there (\(tag))"
        }
    }
}

extension WriteError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .malformedPath(let detail): "the path is malformed\(detail.map { " (\($0))" } ?? "")"
        case .conflict(let conflict): conflict.description
        case .noWritePermission: "no write permission there, a read-only shared folder (no_write_permission)"
        case .insufficientSpace: "the Dropbox account is full (insufficient_space)"
        case .disallowedName: "the name is not allowed (disallowed_name)"
        case .teamFolder: "team folders cannot be changed this way (team_folder)"
        case .operationSuppressed: "the operation was suppressed (operation_suppressed)"
        case .tooManyWriteOperations: "too many writes at once in this account (too_many_write_operations)"
        case .accessRestricted: "access there is restricted (access_restricted)"
        case .other(let tag): tag
        }
    }
}

extension UploadSessionLookupError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .notFound: "the upload session is unknown or has expired"
        case .incorrectOffset(let offset): "the upload session expected the data from byte \(offset) on"
        case .closed: "the upload session is already closed"
        case .notClosed: "the upload session is not closed yet"
        case .tooLarge: "the upload session would exceed Dropbox's 350 GB limit"
        case .concurrentSessionInvalidOffset: "an append to a concurrent session did not start at a multiple of 4 MiB"
        case .concurrentSessionInvalidDataSize: "an append to a concurrent session was not a multiple of 4 MiB"
        case .payloadTooLarge: "the append was larger than Dropbox's 150 MiB limit"
        case .other(let tag): tag
        }
    }
}

extension RouteError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .path(let error), .pathLookup(let error): error.description
        case .pathWrite(let error), .pathWriteOnDelete(let error): error.description
        case .fromLookup(let error): "the source: \(error)"
        case .fromWrite(let error): "the source: \(error)"
        case .to(let error): "the target: \(error)"
        case .uploadSession(let error): error.description
        case .reset: "the change cursor is no longer valid (reset)"
        case .settingsError(let tag): "the shared link settings were refused (\(tag))"
        case .other(let tag): tag
        }
    }
}

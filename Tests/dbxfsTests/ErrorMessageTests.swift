/// Every error a person can see, walked case by case: the client's `DropboxError` (with every
/// nested Dropbox union), the cache layer's `RemoteError` as the mount's adapter makes it, the
/// write-back's `WriteBackError`, the offline gate's refusal, and the one-line messages of the
/// commands. Each rendering must be a sentence: no Swift enum spelling (`unavailable("…")`,
/// `.insufficientSpace`, `invalidAccessToken`), no escaped quotes, no labelled tuples.
///
/// New cases cannot slip past: each enum has an exhaustive `switch` below (no `default`), so
/// adding a case breaks the build here until the case gets a sample.
import DropboxRemote
import Foundation
import Testing
import VFSCache
@testable import dbxfs

/// The shapes of a Swift value dumped into a message, and what each catches.
enum SwiftSpelling {
    static let patterns: [(String, String)] = [
        (#"\b[a-z][A-Za-z0-9]*\("#, "an enum case with its payload, e.g. unavailable(\"…\")"),
        (#"\b[a-z]+[A-Z][A-Za-z0-9]*\b"#, "a camelCase identifier, e.g. insufficientSpace"),
        (#"(^|[\s(\[:])\.[a-z][A-Za-z0-9]+"#, "a dotted case name, e.g. .insufficientSpace"),
        (#"\\["'\\]"#, "an escaped quote or backslash"),
        (#"\(\w+: "#, "a labelled tuple, e.g. (status: 500, …)"),
    ]

    /// The first Swift-looking piece of `text`, with what it looks like; nil when it reads as prose.
    static func find(in text: String) -> String? {
        for (pattern, what) in patterns {
            if let range = text.range(of: pattern, options: .regularExpression) {
                return "\(what): \"\(text[range])\""
            }
        }
        return nil
    }
}

@Suite struct ErrorMessageTests {
    // MARK: Samples of every case

    static let lookupErrors: [LookupError] = [
        .malformedPath(nil), .malformedPath("name ends with a space"), .notFound, .notFile, .notFolder,
        .restrictedContent, .unsupportedContentType, .locked, .other("some_new_tag"),
    ]
    static let conflicts: [WriteConflict] = [.file, .folder, .fileAncestor, .other("some_new_tag")]
    static let writeErrors: [WriteError] = [.malformedPath(nil), .malformedPath("bad")] + conflicts.map { .conflict($0) } + [
        .noWritePermission, .insufficientSpace, .disallowedName, .teamFolder, .operationSuppressed,
        .tooManyWriteOperations, .accessRestricted, .other("some_new_tag"),
    ]
    static let sessionErrors: [UploadSessionLookupError] = [
        .notFound, .incorrectOffset(correctOffset: 8_388_608), .closed, .notClosed, .tooLarge,
        .concurrentSessionInvalidOffset, .concurrentSessionInvalidDataSize, .payloadTooLarge, .other("some_new_tag"),
    ]
    static let routeErrors: [RouteError] = lookupErrors.map { .path($0) } + writeErrors.map { .pathWrite($0) }
        + lookupErrors.map { .pathLookup($0) } + writeErrors.map { .pathWriteOnDelete($0) }
        + lookupErrors.map { .fromLookup($0) } + writeErrors.map { .fromWrite($0) } + writeErrors.map { .to($0) }
        + sessionErrors.map { .uploadSession($0) }
        + [.reset, .settingsError("not_authorized"), .other(tag: "cant_move_folder_into_itself"), .other(tag: "too_many_files"), .other(tag: "insufficient_quota"),
           .other(tag: "cant_nest_shared_folder"), .other(tag: "duplicated_or_nested_paths"), .other(tag: "content_hash_mismatch")]
    static let authErrors: [AuthError] = [
        .invalidAccessToken, .invalidSelectUser, .invalidSelectAdmin, .userSuspended, .expiredAccessToken,
        .missingScope(requiredScope: "files.content.write"), .missingScope(requiredScope: nil), .routeAccessDenied,
        .other("invalid_grant"),
    ]
    static let dropboxErrors: [DropboxError] = routeErrors.map { .route($0, summary: "path/not_found/..") }
        + routeErrors.map { .route($0, summary: "") }
        + authErrors.map { .auth($0, summary: "invalid_access_token/..") } + authErrors.map { .auth($0, summary: "") }
        + [.auth(.other("invalid_grant"), summary: "refresh token is invalid or revoked"),
           .accessDenied(tag: "no_permission", summary: "no_permission/"), .accessDenied(tag: "paper_access_denied", summary: ""),
           .rateLimited(reason: "too_many_requests", retryAfter: 2.5), .rateLimited(reason: "too_many_write_operations", retryAfter: 1),
           .badInput(#"Error in call to API function "files/upload": HTTP header "Dropbox-API-Arg": could not decode input as JSON"#),
           .badInput("path root error: invalid_root/"),
           .server(status: 503, message: "injected fault"), .server(status: 502, message: "<html><body>Bad gateway</body></html>"),
           .server(status: 500, message: ""),
           .transport(code: 7, message: "Failed to connect to 127.0.0.1 port 1 after 0 ms: Couldn't connect to server"),
           .transport(code: 28, message: "Operation too slow. Less than 1 bytes/sec transferred the last 60 seconds"),
           .cancelled, .unexpectedResponse("download answer without Dropbox-API-Result"),
           // What a wrong --api-base gets: a 404 with nothing, or an HTML page.
           DropboxError.classify(status: 404, body: Data(), contentType: nil, retryAfterHeader: nil, shape: .none),
           DropboxError.classify(status: 405, body: Data("<html>Method Not Allowed</html>".utf8), contentType: "text/html",
                                 retryAfterHeader: nil, shape: .none),
           .localIO("upload source: No such file or directory"), .contentChanged(path: "/Docs/a.txt")]

    static let path = "/Docs/report.txt"
    static let remoteErrors: [RemoteError] = [
        .notFound(path), .notFolder(path), .notFile(path), .conflict(path), .insufficientSpace, .disallowedName(path),
        .malformedPath(path), .invalidOperation(path), .restrictedContent(path), .locked(path), .tooManyFiles(path),
        .cursorReset, .sessionGone("pid_upload_session:abc"), .auth(path), .permissionDenied(path),
        .rateLimited(retryAfter: 3), .unavailable(path), .cancelled, .other(path),
    ]

    // MARK: Every case is sampled (exhaustive switches: a new case fails to compile here)

    static func index(_ error: DropboxError) -> Int {
        switch error {
        case .route: 0
        case .auth: 1
        case .accessDenied: 2
        case .rateLimited: 3
        case .badInput: 4
        case .server: 5
        case .transport: 6
        case .cancelled: 7
        case .unexpectedResponse: 8
        case .localIO: 9
        case .contentChanged: 10
        }
    }
    static func index(_ error: RouteError) -> Int {
        switch error {
        case .path: 0
        case .pathWrite: 1
        case .pathLookup: 2
        case .pathWriteOnDelete: 3
        case .fromLookup: 4
        case .fromWrite: 5
        case .to: 6
        case .uploadSession: 7
        case .reset: 8
        case .other: 9
        case .settingsError: 10
        }
    }
    static func index(_ error: LookupError) -> Int {
        switch error {
        case .malformedPath: 0
        case .notFound: 1
        case .notFile: 2
        case .notFolder: 3
        case .restrictedContent: 4
        case .unsupportedContentType: 5
        case .locked: 6
        case .other: 7
        }
    }
    static func index(_ error: WriteConflict) -> Int {
        switch error {
        case .file: 0
        case .folder: 1
        case .fileAncestor: 2
        case .other: 3
        }
    }
    static func index(_ error: WriteError) -> Int {
        switch error {
        case .malformedPath: 0
        case .conflict: 1
        case .noWritePermission: 2
        case .insufficientSpace: 3
        case .disallowedName: 4
        case .teamFolder: 5
        case .operationSuppressed: 6
        case .tooManyWriteOperations: 7
        case .accessRestricted: 8
        case .other: 9
        }
    }
    static func index(_ error: UploadSessionLookupError) -> Int {
        switch error {
        case .notFound: 0
        case .incorrectOffset: 1
        case .closed: 2
        case .notClosed: 3
        case .tooLarge: 4
        case .concurrentSessionInvalidOffset: 5
        case .concurrentSessionInvalidDataSize: 6
        case .payloadTooLarge: 7
        case .other: 8
        }
    }
    static func index(_ error: AuthError) -> Int {
        switch error {
        case .invalidAccessToken: 0
        case .invalidSelectUser: 1
        case .invalidSelectAdmin: 2
        case .userSuspended: 3
        case .expiredAccessToken: 4
        case .missingScope: 5
        case .routeAccessDenied: 6
        case .other: 7
        }
    }
    static func index(_ error: RemoteError) -> Int {
        switch error {
        case .notFound: 0
        case .notFolder: 1
        case .notFile: 2
        case .conflict: 3
        case .insufficientSpace: 4
        case .disallowedName: 5
        case .malformedPath: 6
        case .invalidOperation: 7
        case .restrictedContent: 8
        case .locked: 9
        case .tooManyFiles: 10
        case .cursorReset: 11
        case .sessionGone: 12
        case .auth: 13
        case .permissionDenied: 14
        case .rateLimited: 15
        case .unavailable: 16
        case .cancelled: 17
        case .other: 18
        }
    }
    static func index(_ error: WriteBackError) -> Int {
        switch error {
        case .failed: 0
        case .timedOut: 1
        case .stopped: 2
        }
    }

    @Test func everyCaseHasASample() {
        #expect(Set(Self.dropboxErrors.map(Self.index)) == Set(0...10))
        #expect(Set(Self.routeErrors.map(Self.index)) == Set(0...10))
        #expect(Set(Self.lookupErrors.map(Self.index)) == Set(0...7))
        #expect(Set(Self.conflicts.map(Self.index)) == Set(0...3))
        #expect(Set(Self.writeErrors.map(Self.index)) == Set(0...9))
        #expect(Set(Self.sessionErrors.map(Self.index)) == Set(0...8))
        #expect(Set(Self.authErrors.map(Self.index)) == Set(0...7))
        #expect(Set(Self.remoteErrors.map(Self.index)) == Set(0...18))
        #expect(Set(Self.writeBackErrors.map(Self.index)) == Set(0...2))
    }

    static var writeBackErrors: [WriteBackError] {
        remoteErrors.map { .failed($0) } + remoteErrors.map { .timedOut(lastError: $0) } + [.timedOut(lastError: nil), .stopped]
    }

    /// The messages of `errors`, each checked; returns them for the other checks.
    @discardableResult
    private func expectSentences(_ messages: [String], _ what: String) -> [String] {
        var bad: [String] = []
        if ProcessInfo.processInfo.environment["DBXFS_PRINT_MESSAGES"] != nil { print("== \(what)\n" + Set(messages).sorted().joined(separator: "\n")) }
        for message in messages {
            if let found = SwiftSpelling.find(in: message) { bad.append("\(found) in: \(message)") }
            else if message.trimmingCharacters(in: .whitespaces).isEmpty { bad.append("an empty message") }
        }
        let unreadable = bad.count
        #expect(unreadable == 0, "\(what): \(bad.count) of \(messages.count) messages read as Swift values, e.g.\n\(bad.prefix(8).joined(separator: "\n"))")
        return messages
    }

    // MARK: The walks

    @Test func theClientsErrorsReadAsSentences() {
        expectSentences(Self.dropboxErrors.map { "\($0)" }, "DropboxError")
        // The commands' own phrasing (auth, unlink) names the server.
        expectSentences(Self.dropboxErrors.map { ServerMessages.describe($0, server: "http://127.0.0.1:8080") }, "auth/unlink lines")
    }

    @Test func theAdaptersErrorsReadAsSentencesAndNameThePath() {
        let store = DropboxRemoteStore(client: DropboxClient(accessToken: "unused"), root: "")
        let mapped = Self.dropboxErrors.map { store.remoteError($0, Self.path) }
        let messages = expectSentences(mapped.map { "\($0)" }, "RemoteError from the adapter")
        // Where the error is about the file, the message says which file.
        for (error, message) in zip(mapped, messages) {
            switch error {
            case .notFound, .notFolder, .notFile, .disallowedName, .malformedPath, .invalidOperation, .restrictedContent,
                 .locked, .tooManyFiles, .permissionDenied, .conflict:
                #expect(message.contains(Self.path), "no path in: \(message)")
            default: break
            }
        }
        // What the engine reports for fsync and sync.
        expectSentences(mapped.map { "\(WriteBackError.failed($0))" }, "WriteBackError")
    }

    @Test func theCacheLayersErrorsReadAsSentences() {
        expectSentences(Self.remoteErrors.map { "\($0)" }, "RemoteError")
        expectSentences(Self.writeBackErrors.map { "\($0)" }, "WriteBackError")
        expectSentences(Self.remoteErrors.map { "\(Errno($0))" }, "Errno")
    }

    @Test func theOfflineGatesRefusalReadsAsASentence() {
        let store = DropboxRemoteStore(client: DropboxClient(accessToken: "unused"), root: "")
        let cause = store.remoteError(.transport(code: 7, message: "Failed to connect to 127.0.0.1 port 1 after 0 ms: Couldn't connect to server"),
                                      "(longpoll)")
        // The change watcher records why it went offline, then the gate refuses every call with it.
        let state = OfflineState(offline: true, reason: "\(cause)")
        let gate = OfflineGatedRemote(InertRemote(), state: state, probeInterval: nil)
        var refusal = ""
        do { _ = try gate.metadata(path: Self.path) } catch { refusal = "\(error)" }
        #expect(!refusal.isEmpty)
        expectSentences([refusal, state.reason ?? ""], "the offline gate")
    }
}

/// A remote that is never reached (the gate refuses first).
private struct InertRemote: RemoteStore {
    func metadata(path: String) throws(RemoteError) -> RemoteEntry? { nil }
    func listFolder(path: String, recursive: Bool, limit: Int?) throws(RemoteError) -> RemoteListPage { throw .cancelled }
    func listFolderContinue(cursor: String) throws(RemoteError) -> RemoteListPage { throw .cancelled }
    func latestCursor(path: String, recursive: Bool) throws(RemoteError) -> String { throw .cancelled }
    func longpoll(cursor: String, timeout: Int) throws(RemoteError) -> (changes: Bool, backoff: Int?) { throw .cancelled }
    func download(path: String, rev: String?, range: Range<UInt64>?, sink: (UnsafeRawBufferPointer) -> Bool) throws(RemoteError) { throw .cancelled }
    func upload(file: URL, length: UInt64, commit: RemoteCommit, progress: RemoteProgress?) throws(RemoteError) -> RemoteEntry { throw .cancelled }
    func startSession(concurrent: Bool) throws(RemoteError) -> String { throw .cancelled }
    func appendSession(id: String, file: URL, offset: UInt64, length: UInt64, close: Bool, progress: RemoteProgress?) throws(RemoteError) { throw .cancelled }
    func appendSessionChecked(id: String, bytes: Data, offset: UInt64, contentHash: String) throws(RemoteError) { throw .cancelled }
    func finishBatch(_ entries: [(session: RemoteUploadedSession, commit: RemoteCommit)]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] { throw .cancelled }
    func createFolder(path: String) throws(RemoteError) -> RemoteEntry { throw .cancelled }
    func delete(path: String) throws(RemoteError) { throw .cancelled }
    func move(from: String, to: String) throws(RemoteError) -> RemoteEntry { throw .cancelled }
    func copy(from: String, to: String) throws(RemoteError) -> RemoteEntry { throw .cancelled }
    func spaceUsage() throws(RemoteError) -> (used: UInt64, allocated: UInt64) { throw .cancelled }
}

/// How the cache layer's remote failures read to a person: the one rendering of `RemoteError`,
/// used by every log line, by `dbxfs status` and `dbxfs sync` (the upload errors they show are
/// these sentences), and by fsync's warnings.
///
/// The payloads follow two conventions (RemoteStore.swift): the cases about one item carry its
/// path, and the sentence is made here; the others carry a sentence the remote adapter wrote
/// (naming the path where there is one), shown as it is.
import Foundation

extension RemoteError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .notFound(let path): "\(Self.shown(path)): not found on Dropbox"
        case .notFolder(let path): "\(Self.shown(path)): not a folder on Dropbox (a file is in the way)"
        case .notFile(let path): "\(Self.shown(path)): a folder on Dropbox, not a file"
        case .conflict(let path): "\(Self.shown(path)): Dropbox has another version there (a conflict)"
        case .insufficientSpace: "the Dropbox account is full (insufficient space)"
        case .disallowedName(let path): "\(Self.shown(path)): Dropbox does not allow this name"
        case .malformedPath(let path): "\(Self.shown(path)): Dropbox does not accept this path (malformed_path)"
        case .invalidOperation(let text): Self.sentence(text, or: "Dropbox refused the operation")
        case .restrictedContent(let text): Self.sentence(text, or: "Dropbox restricts this content and will not serve it")
        case .locked(let text): Self.sentence(text, or: "the file is locked on Dropbox")
        case .tooManyFiles(let text): Self.sentence(text, or: "more than 10,000 files and folders for one move or copy")
        case .cursorReset: "Dropbox no longer knows the change cursor (reset); the tree is listed again"
        case .sessionGone: "the upload session is gone on Dropbox (expired, or used already); the file is sent again"
        case .auth(let text): Self.sentence(text, or: "Dropbox rejected the access token")
        case .permissionDenied(let text): Self.sentence(text, or: "Dropbox refuses writes there (a read-only shared folder)")
        case .rateLimited(let retryAfter):
            "Dropbox asks to slow down (too many requests, wait \(Int(retryAfter.rounded(.up))) s)"
        case .unavailable(let text): Self.sentence(text, or: "Dropbox cannot be reached")
        case .cancelled: "cancelled"
        case .other(let text): Self.sentence(text, or: "Dropbox failed in an unexpected way")
        }
    }

    /// The sentence for a line that already names `path` ("will retry /a.txt (attempt 2): ...",
    /// status's line of /a.txt): without its own leading "/a.txt: ".
    public func description(about path: String) -> String {
        let text = description
        let prefix = Self.shown(path) + ": "
        return text.hasPrefix(prefix) ? String(text.dropFirst(prefix.count)) : text
    }

    /// Paths are relative to the mount root; the root itself is "".
    private static func shown(_ path: String) -> String { path.isEmpty ? "/" : path }

    private static func sentence(_ text: String, or fallback: String) -> String { text.isEmpty ? fallback : text }
}

/// One-line explanations of the client's errors for `auth` and `unlink`, phrased for the person
/// at the terminal (what happened, and what to do), never a dump of the error value.
import DropboxRemote
import Foundation

enum ServerMessages {
    static func describe(_ error: DropboxError, server: String) -> String {
        switch error {
        case .auth(let reason, let summary):
            let detail = summary.isEmpty ? "\(reason)" : summary
            return "\(server) refused the authorization (\(detail))"
        case .accessDenied(let tag, _):
            return "access denied by \(server) (\(tag))"
        case .transport(_, let message):
            return "cannot reach \(server): \(message)"
        case .server(let status, _):
            return "\(server) is failing (HTTP \(status)); try again later"
        case .rateLimited(_, let retryAfter):
            return "\(server) is rate limiting this app; retry in \(Int(retryAfter.rounded(.up))) s"
        case .badInput(let message):
            return "\(server) rejected the request: \(message.prefix(200))"
        default:
            return "\(server) answered unexpectedly: \(String(describing: error).prefix(200))"
        }
    }

    /// "Dropbox" for the real service, else the base URL (the emulator, a gateway).
    static func serverName(_ apiBase: String?) -> String { apiBase ?? "Dropbox" }

    static func endpoints(_ apiBase: String?) -> Endpoints {
        apiBase.map { Endpoints(overridingAllWith: $0) } ?? .dropbox
    }
}

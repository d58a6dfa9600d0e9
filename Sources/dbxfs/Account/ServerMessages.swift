/// One-line explanations of the client's errors for `auth`, `unlink` and the mount's start-up
/// checks, naming the server the person gave (the rendering itself is the client's, in
/// DropboxError+Description.swift: one sentence per error, never a dump of the value).
import DropboxRemote
import Foundation

enum ServerMessages {
    /// The client's own sentence (DropboxError+Description.swift), naming the server.
    static func describe(_ error: DropboxError, server: String) -> String {
        error.describe(server: server)
    }

    /// "Dropbox" for the real service, else the base URL (the emulator, a gateway).
    static func serverName(_ apiBase: String?) -> String { apiBase ?? "Dropbox" }

    static func endpoints(_ apiBase: String?) -> Endpoints {
        apiBase.map { Endpoints(overridingAllWith: $0) } ?? .dropbox
    }
}

/// The client's history and shared-link routes against the emulator: list_revisions decoded
/// (newest first, a deleted file's `is_deleted` and time), restore, and `sharedLink`, which reuses
/// an existing link and turns each CreateSharedLinkWithSettingsError into its own case.
import ContentHash
import Foundation
import Testing
@testable import DropboxRemote

@Suite(.serialized, .enabled(if: Emulator.isAvailable, "scripts/dbx-emulator is missing"))
struct EmulatorRevisionLinkTests {
    let emulator: Emulator
    let client: DropboxClient
    init() throws { emulator = try Emulator(); client = emulator.client() }

    private func put(_ path: String, _ text: String) throws -> FileMetadata {
        let data = Data(text.utf8)
        return try client.upload(CommitInfo(path: path, mode: .overwrite), body: .data(data), contentHash: DropboxContentHasher.hash(data))
    }

    @Test func revisionsRestoreAndADeletedFile() throws {
        let made = [try put("/h.txt", "first"), try put("/h.txt", "second!")]
        let list = try client.listRevisions(path: "/h.txt")
        #expect(list.entries.map(\.rev) == made.reversed().map(\.rev))
        #expect(!list.isDeleted && list.serverDeleted == nil && !list.hasMore)
        #expect(list.entries[1].contentHash == DropboxContentHasher.hash(Data("first".utf8)))

        let restored = try client.restore(path: "/h.txt", rev: made[0].rev)
        #expect(restored.rev != made[1].rev && restored.size == 5 && restored.id == made[1].id)
        #expect(try client.downloadData(path: "/h.txt").1 == Data("first".utf8))
        #expect { try client.restore(path: "/h.txt", rev: "0123456789ab") } throws: {
            if case DropboxError.route(.other(tag: "invalid_revision"), _) = $0 { true } else { false }
        }

        try client.delete(path: "/h.txt")
        let gone = try client.listRevisions(path: "/h.txt", limit: 1)
        #expect(gone.isDeleted && gone.serverDeleted != nil && gone.entries.first?.rev == restored.rev && gone.hasMore)
        #expect { try client.listRevisions(path: "/") } throws: { _ in true }
        #expect(DropboxClient.isWellFormedRev("0123456789abcdef") && !DropboxClient.isWellFormedRev("12345678")
                && !DropboxClient.isWellFormedRev("0123456789ABC"))
    }

    @Test func aLinkIsMadeOnceThenReused() throws {
        _ = try put("/l.txt", "link me")
        let made = try client.sharedLink(path: "/l.txt")
        #expect(made.url.hasPrefix("https://") && !made.reused && made.expires == nil && !made.passwordProtected)
        let again = try client.sharedLink(path: "/l.txt")
        #expect(again.url == made.url && again.reused)
        #expect(try client.listSharedLinks().map(\.url).contains(made.url))

        let expires = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 86400).rounded(.down))
        _ = try put("/p.txt", "protected")
        let protected = try client.sharedLink(path: "/p.txt", expires: expires, password: "pw")
        #expect(protected.passwordProtected && protected.expires == expires)
        // The same settings find it again; other ones are refused by name.
        #expect(try client.sharedLink(path: "/p.txt", expires: expires, password: "pw").url == protected.url)
        #expect { try client.sharedLink(path: "/p.txt", expires: expires.addingTimeInterval(3600)) } throws: {
            if case SharedLinkFailure.existsWithOtherSettings(let link) = $0 { link.url == protected.url } else { false }
        }
    }

    @Test func eachRefusalHasItsCase() throws {
        #expect { try client.sharedLink(path: "/none.txt") } throws: {
            if case SharedLinkFailure.path(.notFound) = $0 { true } else { false }
        }
        _ = try put("/b.txt", "basic")
        _ = try emulator.control("account", ["account_type": "basic"])
        #expect { try client.sharedLink(path: "/b.txt", expires: Date().addingTimeInterval(3600)) } throws: {
            ($0 as? SharedLinkFailure) == .settingsNotAuthorized
        }
        _ = try emulator.control("account", ["account_type": "", "email_verified": false])
        #expect { try client.sharedLink(path: "/b.txt") } throws: { ($0 as? SharedLinkFailure) == .emailNotVerified }
        _ = try emulator.control("account", ["email_verified": true])
        #expect { try client.sharedLink(path: "/b.txt", expires: Date().addingTimeInterval(-3600)) } throws: {
            ($0 as? SharedLinkFailure) == .invalidSettings
        }
        try emulator.configure(["fail_rate": 1])
        #expect { try client.sharedLink(path: "/b.txt") } throws: {
            if case SharedLinkFailure.call(.server) = $0 { true } else { false }
        }
        try emulator.configure(["fail_rate": 0])
    }
}

/// CreateSharedLinkWithSettingsError decoded from recorded bodies, without a server.
@Suite struct SharedLinkErrorDecodingTests {
    private func failure(_ body: String) -> SharedLinkFailure {
        DropboxClient.sharedLinkFailure(DropboxError.classify(status: 409, body: Data(body.utf8), contentType: "application/json",
                                                              retryAfterHeader: nil, shape: .sharedLink))
    }

    @Test func eachMemberHasItsCase() {
        #expect(failure(#"{"error_summary": "settings_error/not_authorized/..", "error": {".tag": "settings_error", "settings_error": {".tag": "not_authorized"}}}"#)
                == .settingsNotAuthorized)
        #expect(failure(#"{"error_summary": "settings_error/invalid_settings/..", "error": {".tag": "settings_error", "settings_error": {".tag": "invalid_settings"}}}"#)
                == .invalidSettings)
        #expect(failure(#"{"error_summary": "path/not_found/..", "error": {".tag": "path", "path": {".tag": "not_found"}}}"#)
                == .path(.notFound))
        #expect(failure(#"{"error_summary": "email_not_verified/..", "error": {".tag": "email_not_verified"}}"#) == .emailNotVerified)
        #expect(failure(#"{"error_summary": "banned_member/..", "error": {".tag": "banned_member"}}"#) == .bannedMember)
    }
}

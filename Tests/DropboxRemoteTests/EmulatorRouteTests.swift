/// Every route against the emulator, on its success and error paths, with Unicode names.
import ContentHash
import Foundation
import Testing
@testable import DropboxRemote

@Suite(.serialized, .enabled(if: Emulator.isAvailable, "scripts/dbx-emulator is missing"))
struct EmulatorRouteTests {
    let emulator: Emulator
    let client: DropboxClient
    init() throws { emulator = try Emulator(); client = emulator.client() }

    private func put(_ path: String, _ text: String, mode: WriteMode = .add) throws -> FileMetadata {
        let data = Data(text.utf8)
        return try client.upload(CommitInfo(path: path, mode: mode), body: .data(data), contentHash: DropboxContentHasher.hash(data))
    }

    @Test func metadataListingAndUnicodeNames() throws {
        let names = ["Café crème.txt", "☺ smile.md", "日本語のファイル", "Ωmega"]   // 😀 is refused: outside the BMP
        _ = try client.createFolder(path: "/Ünïcode")
        for name in names { _ = try put("/Ünïcode/\(name)", name) }

        let file = try client.getMetadata(path: "/Ünïcode/Café crème.txt")
        guard case .file(let f) = file else { Issue.record("expected a file"); return }
        #expect(f.name == "Café crème.txt" && f.size == UInt64("Café crème.txt".utf8.count))
        #expect(f.pathDisplay == "/Ünïcode/Café crème.txt")
        #expect(f.contentHash == DropboxContentHasher.hash(Data("Café crème.txt".utf8)))
        // By id, and case-insensitively.
        #expect(try client.getMetadata(path: f.id).name == f.name)
        #expect(try client.getMetadata(path: "/ÜNÏCODE/café crème.TXT").file?.id == f.id)
        guard case .folder = try client.getMetadata(path: "/Ünïcode") else { Issue.record("expected a folder"); return }

        // Paging: limit 1 forces several pages; the page API streams them.
        var seen: [String] = []
        var pages = 0
        try client.listFolderPages(path: "/Ünïcode", limit: 1) { page in
            pages += 1
            seen += page.entries.map(\.name)
            return true
        }
        #expect(Set(seen) == Set(names))
        #expect(pages >= 2)

        #expect(try client.allEntries(path: "", recursive: true).contains { $0.name == "日本語のファイル" })
    }

    @Test func lookupErrors() throws {
        // error_summary is opaque ("path/not_found/.."): match the decoded union only.
        #expect { try client.getMetadata(path: "/nothing/here") } throws: {
            if case DropboxError.route(.path(.notFound), let summary) = $0 { summary.hasPrefix("path/not_found") } else { false }
        }
        #expect(try client.metadataIfExists(path: "/nothing") == nil)
        _ = try put("/plain.txt", "x")
        #expect {
            try client.listFolder(path: "/plain.txt")
        } throws: { ($0 as? DropboxError).flatMap { if case .route(.path(.notFolder), _) = $0 { true } else { nil } } ?? false }
        // The root is "" in the API; "/" is bad input with the server's explanation.
        #expect {
            try client.listFolder(path: "/")
        } throws: { if case DropboxError.badInput(let text) = $0 { !text.isEmpty } else { false } }
    }

    @Test func cursorsChangesAndLongpoll() throws {
        _ = try client.createFolder(path: "/watch")
        let cursor = try client.getLatestCursor(path: "/watch", recursive: true)
        let start = Date()
        let writer = Thread { [client] in
            Thread.sleep(forTimeInterval: 0.5)
            _ = try? client.upload(CommitInfo(path: "/watch/new.txt"), body: .data(Data("hello".utf8)))
        }
        writer.start()
        let poll = try client.longpoll(cursor: cursor, timeout: 30)
        #expect(poll.changes)
        #expect(Date().timeIntervalSince(start) < 20)
        let changes = try client.allChanges(since: cursor)
        #expect(changes.entries.contains { $0.name == "new.txt" })

        _ = try client.delete(path: "/watch/new.txt")
        let afterDelete = try client.allChanges(since: changes.cursor)
        #expect(afterDelete.entries.contains { if case .deleted(let d) = $0 { d.name == "new.txt" } else { false } })

        try emulator.resetCursors()
        #expect { try client.listFolderContinue(cursor: afterDelete.cursor) } throws: {
            if case DropboxError.route(.reset, _) = $0 { true } else { false }
        }
    }

    @Test func uploadDownloadAndRanges() throws {
        let data = pseudoRandomBytes(count: 3 * 1024 * 1024 + 123, seed: 7)
        let file = try client.upload(CommitInfo(path: "/bin/data.bin"), body: .data(data), contentHash: DropboxContentHasher.hash(data))
        #expect(file.size == UInt64(data.count) && file.contentHash == DropboxContentHasher.hash(data))

        let (meta, whole) = try client.downloadData(path: "/bin/data.bin")
        #expect(whole == data && meta.rev == file.rev)
        for range in [0..<1, 5..<70_000, UInt64(data.count - 10)..<UInt64(data.count), 1_000_000..<3_000_000] {
            let (_, part) = try client.downloadData(path: file.id, range: range)
            #expect(part == data.subdata(in: Int(range.lowerBound)..<Int(range.upperBound)), "range \(range)")
        }
        #expect(try client.downloadData(path: "/bin/data.bin", range: 10..<10).1.isEmpty)

        #expect { try client.downloadData(path: "/bin/missing") } throws: {
            if case DropboxError.route(.path(.notFound), _) = $0 { true } else { false }
        }
        #expect { try client.downloadData(path: "/bin") } throws: {
            if case DropboxError.route(.path(.notFile), _) = $0 { true } else { false }
        }
    }

    @Test func uploadWriteModesAndConflicts() throws {
        let first = try put("/modes.txt", "one")
        #expect { try put("/modes.txt", "two", mode: .add) } throws: {
            if case DropboxError.route(.pathWrite(.conflict(.file)), _) = $0 { true } else { false }
        }
        // Same content in add mode is a no-op that returns the same rev.
        #expect(try put("/modes.txt", "one").rev == first.rev)
        let second = try put("/modes.txt", "two", mode: .update(rev: first.rev))
        #expect(second.rev != first.rev)
        #expect { try put("/modes.txt", "three", mode: .update(rev: first.rev)) } throws: {
            if case DropboxError.route(.pathWrite(.conflict), _) = $0 { true } else { false }
        }
        #expect(try put("/modes.txt", "four", mode: .overwrite).size == 4)
        // A wrong content hash is refused, and nothing is written.
        #expect {
            try client.upload(CommitInfo(path: "/hash.txt"), body: .data(Data("abc".utf8)), contentHash: String(repeating: "0", count: 64))
        } throws: { if case DropboxError.route(.other("content_hash_mismatch"), _) = $0 { true } else { false } }
        #expect(try client.metadataIfExists(path: "/hash.txt") == nil)
        _ = try client.createFolder(path: "/afolder")
        #expect { try put("/afolder", "x") } throws: {
            if case DropboxError.route(.pathWrite(.conflict(.folder)), _) = $0 { true } else { false }
        }
    }

    @Test func sequentialSessionContinuesFromCorrectOffset() throws {
        let a = Data("first-part|".utf8), b = Data("second-part".utf8)
        let session = try client.uploadSessionStart(body: .data(a))
        // Claim offset 0 again with a+b: the server has a already and says so (incorrect_offset),
        // so the client sends only b.
        try client.uploadSessionAppend(sessionID: session, offset: 0, body: .data(a + b))
        #expect(client.statistics.snapshot.offsetCorrections == 1)
        let file = try client.uploadSessionFinish(sessionID: session, offset: UInt64(a.count + b.count),
                                                  commit: CommitInfo(path: "/session.txt"))
        #expect(try client.downloadData(path: "/session.txt").1 == a + b)
        #expect(file.contentHash == DropboxContentHasher.hash(a + b))

        #expect { try client.uploadSessionAppend(sessionID: "pid_upload_session:nope", offset: 0, body: .data(a)) } throws: {
            if case DropboxError.route(.uploadSession(.notFound), _) = $0 { true } else { false }
        }
        // Offset beyond what the server has: not repairable by this append.
        let other = try client.uploadSessionStart(body: .data(a))
        #expect { try client.uploadSessionAppend(sessionID: other, offset: 100, body: .data(b)) } throws: {
            if case DropboxError.route(.uploadSession(.incorrectOffset(let correct)), _) = $0 { correct == UInt64(a.count) } else { false }
        }
    }

    @Test func finishBatchReportsEachEntry() throws {
        _ = try put("/batch/taken.txt", "already here")
        var entries: [UploadSessionFinishEntry] = []
        for (index, name) in ["one.txt", "two.txt", "taken.txt"].enumerated() {
            let data = Data("content \(index)".utf8)
            let session = try client.uploadSessionStart(type: .concurrent)
            try client.uploadSessionAppend(sessionID: session, offset: 0, body: .data(data), close: true)
            entries.append(UploadSessionFinishEntry(sessionID: session, length: UInt64(data.count),
                                                    commit: CommitInfo(path: "/batch/\(name)"), fileContentHash: DropboxContentHasher.hash(data)))
        }
        let results = try client.uploadSessionFinishBatch(entries)
        #expect(results.count == 3)
        #expect(try results[0].get().name == "one.txt")
        #expect(try results[1].get().contentHash == entries[1].fileContentHash)
        guard case .failure(.route(.pathWrite(.conflict(.file)), _)) = results[2] else {
            Issue.record("expected a conflict for taken.txt, got \(results[2])"); return
        }
    }

    @Test func namespaceRoutes() throws {
        let folder = try client.createFolder(path: "/Ns/Deep/Er")
        #expect(folder.name == "Er" && folder.pathLower == "/ns/deep/er")
        #expect { try client.createFolder(path: "/Ns/Deep/Er") } throws: {
            if case DropboxError.route(.pathWrite(.conflict(.folder)), _) = $0 { true } else { false }
        }
        _ = try put("/Ns/a.txt", "a")
        let moved = try client.move(from: "/Ns/a.txt", to: "/Ns/Deep/b.txt")
        #expect(moved.name == "b.txt")
        #expect { try client.move(from: "/Ns/a.txt", to: "/Ns/c.txt") } throws: {
            if case DropboxError.route(.fromLookup(.notFound), _) = $0 { true } else { false }
        }
        #expect { try client.move(from: "/Ns", to: "/Ns/Deep/inside") } throws: {
            if case DropboxError.route(.other, _) = $0 { true } else { false }
        }
        let copied = try client.copy(from: "/Ns/Deep/b.txt", to: "/Ns/copy.txt")
        #expect(copied.file?.id != moved.file?.id)
        #expect { try client.copy(from: "/Ns/Deep/b.txt", to: "/Ns/copy.txt") } throws: {
            if case DropboxError.route(.to(.conflict(.file)), _) = $0 { true } else { false }
        }
        let deleted = try client.delete(path: "/Ns/copy.txt")
        #expect(deleted.name == "copy.txt")
        #expect { try client.delete(path: "/Ns/copy.txt") } throws: {
            if case DropboxError.route(.pathLookup(.notFound), _) = $0 { true } else { false }
        }
        _ = try put("/Ns/x1", "1"); _ = try put("/Ns/x2", "2")
        let batch = try client.deleteBatch([DeleteArg(path: "/Ns/x1"), DeleteArg(path: "/Ns/x2"), DeleteArg(path: "/Ns/none")])
        #expect(batch.count == 3)
        #expect(try batch[0].get().name == "x1")
        guard case .failure(.route(.pathLookup(.notFound), _)) = batch[2] else { Issue.record("expected not_found, got \(batch[2])"); return }
        #expect(try client.metadataIfExists(path: "/Ns/x1") == nil)
    }

    @Test func namespaceBatches() throws {
        // A delete with a stale parent_rev keeps the file; one at its rev deletes it.
        let first = try put("/Nb/kept", "1")
        _ = try put("/Nb/kept", "2", mode: .overwrite)
        let gone = try put("/Nb/gone", "3")
        let deletes = try client.deleteBatch([DeleteArg(path: "/Nb/kept", parentRev: first.rev),
                                              DeleteArg(path: "/Nb/gone", parentRev: gone.rev)])
        guard case .failure(.route(.pathWriteOnDelete(.conflict(.file)), _)) = deletes[0] else {
            Issue.record("expected a conflict, got \(deletes[0])"); return
        }
        #expect(try deletes[1].get().name == "gone")
        #expect(try client.metadataIfExists(path: "/Nb/kept") != nil)

        // Folders: a synchronous batch, then one run as a job (more than batch_async_over entries).
        _ = try put("/Nb/file", "f")
        let small = try client.createFolderBatch(paths: ["/Nb/d1", "/Nb/deep/d2", "/Nb/file"])
        #expect(try small[0].get().name == "d1" && small[1].get().pathLower == "/nb/deep/d2")
        guard case .failure(.route(.pathWrite(.conflict(.file)), _)) = small[2] else { Issue.record("got \(small[2])"); return }
        let many = try client.createFolderBatch(paths: (0..<12).map { "/Nb/many/m\($0)" } + ["/Nb/d1"])
        #expect(many.prefix(12).allSatisfy { (try? $0.get()) != nil })
        guard case .failure(.route(.pathWrite(.conflict(.folder)), _)) = many[12] else { Issue.record("got \(many[12])"); return }

        // Moves: each entry its own result; the moved file keeps its id and rev.
        let a = try put("/Nb/a.txt", "a")
        let moves = try client.moveBatch([RelocationPath(from: "/Nb/a.txt", to: "/Nb/sub/a2.txt"),
                                          RelocationPath(from: "/Nb/many", to: "/Nb/many2"),
                                          RelocationPath(from: "/Nb/none", to: "/Nb/x"),
                                          RelocationPath(from: "/Nb/d1", to: "/Nb/file")])
        #expect(try moves[0].get().file?.id == a.id && moves[0].get().file?.rev == a.rev)
        guard case .folder = try moves[1].get() else { Issue.record("expected a folder"); return }
        guard case .failure(.route(.fromLookup(.notFound), _)) = moves[2] else { Issue.record("got \(moves[2])"); return }
        guard case .failure(.route(.to(.conflict(.file)), _)) = moves[3] else { Issue.record("got \(moves[3])"); return }
        #expect(try client.allEntries(path: "/Nb/many2").count == 12)
    }

    @Test func accountSpaceAndRevoke() throws {
        let account = try client.currentAccount()
        #expect(account.accountID.hasPrefix("dbid:") && account.accountID.count == 40)
        #expect(["user", "team"].contains(account.rootInfo.tag))
        let before = try client.spaceUsage()
        _ = try put("/space.bin", String(repeating: "x", count: 10_000))
        let after = try client.spaceUsage()
        #expect(after.used >= before.used + 10_000 && after.filesystem.size > 0)
        try client.revokeToken()
        #expect { try client.spaceUsage() } throws: {
            if case DropboxError.auth(.invalidAccessToken, _) = $0 { true } else { false }
        }
    }

    @Test func oauthCodeFlowWithPKCEAndRefresh() throws {
        let pkce = PKCE()
        let url = client.authorizeURL(appKey: emulator.appKey, pkce: pkce, state: "s1")
        #expect(url.hasPrefix(emulator.baseURL + "/web/oauth2/authorize?") && url.contains("code_challenge_method=S256"))
        let code = try emulator.authorizationCode(for: url)
        let token = try client.exchangeCode(code, appKey: emulator.appKey, pkce: pkce)
        #expect(token.refreshToken != nil && token.expiresAt != nil && token.accountID != nil)
        // The code is single-use.
        #expect { try client.exchangeCode(code, appKey: emulator.appKey, pkce: pkce) } throws: {
            if case DropboxError.auth(.other("invalid_grant"), _) = $0 { true } else { false }
        }
        let refreshed = try client.refreshAccessToken(refreshToken: token.refreshToken!, appKey: emulator.appKey)
        #expect(refreshed.accessToken != token.accessToken && refreshed.refreshToken == token.refreshToken)
        let linked = emulator.client(tokens: TokenProvider(token: refreshed, appKey: emulator.appKey))
        #expect(try linked.currentAccount().accountID == token.accountID)
    }

    @Test func asyncWrappersRunOffThePool() async throws {
        _ = try await client.createFolder(path: "/async")
        let uploaded = try await client.uploadFile(CommitInfo(path: "/async/f.txt"), body: .data(Data("async".utf8)))
        #expect(try await client.getMetadata(path: "/async/f.txt").file?.rev == uploaded.rev)
        // The first page alone: Dropbox's may be empty while has_more is true (WholeListings.swift).
        let first = try await client.listFolder(path: "/async")
        #expect(first.entries.count + (first.hasMore ? try client.allChanges(since: first.cursor).entries.count : 0) == 1)
        let target = FileManager.default.temporaryDirectory.appendingPathComponent("dbxfs-async-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: target) }
        _ = try await client.download(path: "/async/f.txt", to: target)
        #expect(try Data(contentsOf: target) == Data("async".utf8))
        // Many concurrent calls: they must not starve the cooperative pool (2 cores here).
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<16 { group.addTask { _ = try await client.getMetadata(path: "/async/f.txt") } }
            try await group.waitForAll()
        }
    }
}

extension Emulator {
    func resetCursors() throws {
        _ = try Emulator.curl(["-s", "-f", "-X", "POST", "-H", "Authorization: Bearer \(controlToken)", baseURL + "/_control/reset_cursors"])
    }
}

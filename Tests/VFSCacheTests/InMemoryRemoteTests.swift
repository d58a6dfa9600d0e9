/// Checks that the test fake itself keeps Dropbox's rules, so VFSCache tests built on it mean something.
import Foundation
import Testing
@testable import VFSCache

@Suite struct InMemoryRemoteTests {
    @Test func pathsAreCaseInsensitiveAndCasePreserving() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/Docs/Read Me.TXT", "hello")
        let entry = try #require(try remote.metadata(path: "/docs/read me.txt"))
        #expect(entry.name == "Read Me.TXT")
        #expect(entry.pathLower == "/docs/read me.txt")
        #expect(try remote.metadata(path: "/Docs")?.isFolder == true)
    }

    @Test func addConflictsButIdenticalContentIsANoOp() throws {
        let remote = InMemoryRemote()
        let first = remote.externalWrite("/a.txt", Array("one".utf8))
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("imr-\(UUID())")
        try Data("two".utf8).write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        #expect(throws: RemoteError.self) { try remote.upload(file: url, length: 3, commit: RemoteCommit(path: "/a.txt", mode: .add), progress: nil) }
        #expect(throws: RemoteError.self) { try remote.upload(file: url, length: 3, commit: RemoteCommit(path: "/a.txt", mode: .update(rev: "000000000bad")), progress: nil) }
        let second = try remote.upload(file: url, length: 3, commit: RemoteCommit(path: "/a.txt", mode: .update(rev: first.rev!)), progress: nil)
        #expect(second.rev != first.rev)
        let again = try remote.upload(file: url, length: 3, commit: RemoteCommit(path: "/a.txt", mode: .add), progress: nil)
        #expect(again.rev == second.rev)
    }

    @Test func cursorReportsChangesAndDeletes() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/x/1", "1")
        var page = try remote.listFolder(path: "", recursive: true, limit: 1)
        var seen = page.changes.count
        while page.hasMore { page = try remote.listFolderContinue(cursor: page.cursor); seen += page.changes.count }
        #expect(seen == 2)
        remote.externalDelete("/x")
        remote.externalWrite("/y", "2")
        page = try remote.listFolderContinue(cursor: page.cursor)
        #expect(page.changes.contains(.deleted(pathLower: "/x", pathDisplay: "/x")))
        #expect(page.changes.count == 2)
        remote.invalidateCursors()
        #expect(throws: RemoteError.cursorReset) { try remote.listFolderContinue(cursor: page.cursor) }
    }
}

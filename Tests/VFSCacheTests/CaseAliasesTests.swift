/// `CaseAliases` over the real facade: a file or folder named in another case gets an alias inode
/// (so the kernel sends case-only renames), display-case names never do, everything done through
/// an alias reaches the real file or folder, and the alias's lookups are given back to the real
/// inode when the kernel forgets it.
import Foundation
import Testing
@testable import VFSCache

@Suite struct CaseAliasesTests {
    @Test func aFileNamedInAnotherCaseIsAnAliasOfTheSameFile() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/Docs/Read Me.txt", "hello")
        let vfs = try makeVFS(remote)
        let fs = CaseAliases(vfs)
        let docs = try fs.lookup(parent: rootInode, name: "DOCS")   // a folder alias
        let realDocs = try fs.lookup(parent: rootInode, name: "Docs")
        #expect(docs.attributes.ino != realDocs.attributes.ino && docs.attributes.kind == .directory)
        #expect(try fs.list(docs.attributes.ino) == (try fs.list(realDocs.attributes.ino)))
        let real = try fs.lookup(parent: docs.attributes.ino, name: "Read Me.txt")
        #expect(real.attributes.ino == (try fs.lookup(parent: realDocs.attributes.ino, name: "Read Me.txt")).attributes.ino)
        let alias = try fs.lookup(parent: docs.attributes.ino, name: "READ ME.TXT")
        #expect(alias.attributes.ino != real.attributes.ino)
        #expect(fs.aliasCount == 2)
        // The same spelling keeps its alias number.
        #expect(try fs.lookup(parent: docs.attributes.ino, name: "READ ME.TXT").attributes.ino == alias.attributes.ino)
        #expect(try fs.getattr(alias.attributes.ino).0.ino == alias.attributes.ino)
        #expect(try fs.getattr(alias.attributes.ino).0.size == 5)
        #expect(fs.displayName(of: alias.attributes.ino) == "Read Me.txt")
        let opened = try fs.open(alias.attributes.ino, flags: [.read])
        #expect(opened.keepCache == false)
        #expect(try fs.read(alias.attributes.ino, handle: opened.handle, offset: 0, size: 100) == Array("hello".utf8))
        fs.release(alias.attributes.ino, handle: opened.handle)
        #expect(try fs.getxattr(alias.attributes.ino, name: "user.dropbox.content_hash") == (try fs.getxattr(real.attributes.ino, name: "user.dropbox.content_hash")))
    }

    @Test func forgettingAnAliasGivesItsLookupsBackToTheRealInode() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/a.txt", "a")
        let vfs = try makeVFS(remote)
        let fs = CaseAliases(vfs)
        let real = try fs.lookup(parent: rootInode, name: "a.txt").attributes.ino
        let alias = try fs.lookup(parent: rootInode, name: "A.TXT").attributes.ino
        _ = try fs.lookup(parent: rootInode, name: "A.TXT")
        #expect(vfs.metadata.node(real)?.lookupCount == 3)
        fs.forget(alias, count: 1)
        #expect(fs.aliasCount == 1)
        #expect(vfs.metadata.node(real)?.lookupCount == 2)
        fs.forget(alias, count: 1)
        #expect(fs.aliasCount == 0)
        #expect(vfs.metadata.node(real)?.lookupCount == 1)
        // A later lookup in that case makes a new alias.
        #expect(try fs.lookup(parent: rootInode, name: "A.TXT").attributes.ino != alias)
    }

    @Test func aCaseOnlyRenameThroughTheAliasesReachesDropbox() throws {
        let remote = InMemoryRemote()
        let directory = try temporaryDirectory(); defer { try? FileManager.default.removeItem(at: directory) }
        var writeBack = WriteBackConfiguration()
        writeBack.gatherDelay = 0.02
        writeBack.retryBaseDelay = 0.01
        remote.externalWrite("/readme.md", "text")
        let vfs = try VFS(remote: remote, config: testConfig { $0.cacheDirectory = directory }, logger: LogCapture().logger,
                          clock: .monotonic, writeBack: writeBack)
        defer { vfs.writeBack?.shutdown(drainUntil: nil); vfs.shutdown() }
        let fs = CaseAliases(vfs)
        _ = try fs.lookup(parent: rootInode, name: "readme.md")
        _ = try fs.lookup(parent: rootInode, name: "README.md")   // what the kernel does for the target
        try fs.rename(parent: rootInode, name: "readme.md", newParent: rootInode, newName: "README.md", flags: [.noReplace])
        #expect(remote.content("/README.md") == Array("text".utf8))
        #expect(try vfs.list(rootInode).map(\.name) == [".", "..", "README.md"])
    }
}

extension CaseAliases {
    /// The names of a folder through opendir/readdir.
    func list(_ ino: InodeNumber) throws(Errno) -> [String] {
        let handle = try openDirectory(ino)
        defer { releaseDirectory(ino, handle: handle) }
        return try readDirectory(ino, handle: handle, offset: 0, limit: 1000).map(\.name)
    }
}

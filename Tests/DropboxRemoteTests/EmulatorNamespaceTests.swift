/// The client against what real accounts have (issue 13): a team space, where everything goes
/// through `Dropbox-API-Path-Root`, cursors and longpoll included; files Dropbox only exports;
/// and read-only shared folders. Each test starts its own emulator.
import Foundation
import Testing
@testable import DropboxRemote

@Suite(.enabled(if: Emulator.isAvailable)) struct EmulatorNamespaceTests {
    @Test func teamRootThroughThePathRootHeaderOnEveryRoute() throws {
        let emulator = try Emulator(["--team-space"])
        defer { emulator.stop() }
        try emulator.control("share", ["path": "/Team Folder", "team_folder": true])
        let plain = emulator.client()
        let info = try plain.currentAccount().rootInfo
        #expect(info.tag == "team" && info.rootNamespaceID != info.homeNamespaceID && info.homePath == "/Emulated User")
        // Without the header: the member folder only.
        #expect(try plain.allEntries(path: "").isEmpty)

        var configuration = ClientConfiguration(endpoints: Endpoints(overridingAllWith: emulator.baseURL),
                                                retryPolicy: Emulator.fastRetries, pathRoot: .root(info.rootNamespaceID))
        let rooted = DropboxClient(configuration: configuration, tokens: TokenProvider(accessToken: emulator.token))
        let top = try rooted.allEntries(path: "").map(\.name).sorted()
        #expect(top == ["Emulated User", "Team Folder"])
        _ = try rooted.upload(CommitInfo(path: "/Team Folder/a.txt"), body: .data(Data("a".utf8)))
        #expect(try rooted.downloadData(path: "/Team Folder/a.txt").1 == Data("a".utf8))
        let cursor = try rooted.getLatestCursor(path: "", recursive: true)
        _ = try rooted.upload(CommitInfo(path: "/Team Folder/b.txt"), body: .data(Data("b".utf8)))
        #expect(try rooted.longpoll(cursor: cursor).changes)
        #expect(try rooted.allChanges(since: cursor).entries.map(\.pathDisplay) == ["/Team Folder/b.txt"])

        // A stale root namespace is Dropbox's 422.
        configuration.pathRoot = .root("1")
        let stale = DropboxClient(configuration: configuration, tokens: TokenProvider(accessToken: emulator.token))
        #expect { try stale.listFolder(path: "") } throws: { error in
            guard case DropboxError.badInput(let text) = error else { return false }
            return text.contains("invalid_root")
        }
    }

    @Test func exportOnlyFilesAndReadOnlyFolders() throws {
        let emulator = try Emulator()
        defer { emulator.stop() }
        let client = emulator.client()
        try emulator.control("export_only", ["path": "/Plan.paper", "exports": ["md": "# Plan\n", "html": "<h1>Plan</h1>"],
                                             "export_as": "md"])
        guard case .file(let paper) = try client.getMetadata(path: "/Plan.paper") else { Issue.record("not a file"); return }
        #expect(!paper.isDownloadable && paper.exportInfo?.exportAs == "md")
        #expect { try client.downloadData(path: "/Plan.paper") } throws: { error in
            error as? DropboxError == .route(.other(tag: "unsupported_file"), summary: "unsupported_file/..")
        }
        let exported = try client.export(path: paper.id)
        #expect(exported.data == Data("# Plan\n".utf8) && exported.export.name == "Plan.md" && exported.export.size == 7)
        #expect(try client.export(path: "/Plan.paper", format: "html").data == Data("<h1>Plan</h1>".utf8))

        _ = try client.createFolder(path: "/ro")
        try emulator.control("share", ["path": "/ro", "read_only": true])
        guard case .folder(let folder) = try client.getMetadata(path: "/ro") else { Issue.record("not a folder"); return }
        #expect(folder.sharingInfo?.readOnly == true && folder.sharingInfo?.sharedFolderID != nil)
        #expect { try client.upload(CommitInfo(path: "/ro/x.txt"), body: .data(Data("x".utf8))) } throws: { error in
            guard case DropboxError.route(let route, _) = error else { return false }
            return route.write == .noWritePermission
        }
    }
}

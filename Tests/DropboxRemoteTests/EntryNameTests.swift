/// Names no folder can hold (EntryNames.swift), decoded from a canned listing page: `.`, `..`,
/// empty, with `/` or NUL, or with such a path component, are left out of `entries` and listed in
/// `refused` with the reason; every ordinary name, odd as it may look, stays.
import Foundation
import Testing
@testable import DropboxRemote

@Suite struct EntryNameTests {
    private func file(_ name: String, _ path: String) -> String {
        let escapedName = name.replacingOccurrences(of: "\u{0}", with: "\\u0000")
        let escapedPath = path.replacingOccurrences(of: "\u{0}", with: "\\u0000")
        return #"{".tag":"file","name":"\#(escapedName)","id":"id:\#(abs(path.hashValue))","client_modified":"2026-01-01T00:00:00Z","server_modified":"2026-01-01T00:00:00Z","rev":"0123456789abcdef","size":1,"path_lower":"\#(escapedPath.lowercased())","path_display":"\#(escapedPath)"}"#
    }

    @Test func listingsDropNamesNoFolderCanHold() throws {
        let good = [("ok.txt", "/ok.txt"), ("...", "/..."), (".hidden", "/.hidden"), ("a..b", "/Docs/a..b"), (" ", "/ "), ("日本語", "/日本語")]
        let bad = [(".", "/.", "'.' is the folder itself"), ("..", "/..", "'..' is the parent folder"),
                   ("", "/", "an empty name"), ("a/b", "/a/b", "a '/' in the name"),
                   ("evil\u{0}name", "/evil\u{0}name", "a NUL character in the name"),
                   ("x.txt", "/../x.txt", "its path goes through '..'"), ("y.txt", "/Docs/./y.txt", "its path goes through '.'"),
                   ("z.txt", "/Docs//z.txt", "an empty component in its path"), ("w.txt", "/d\u{0}/w.txt", "a NUL character in its path")]
        let entries = (good.map { file($0.0, $0.1) } + bad.map { file($0.0, $0.1) }).joined(separator: ",")
        let page = try ListFolderResult(json: JSON.parse(Data(#"{"entries":[\#(entries)],"cursor":"c1","has_more":false}"#.utf8)))
        #expect(page.entries.map(\.name) == good.map(\.0))
        #expect(page.refused.map(\.name) == bad.map(\.0))
        #expect(page.refused.map(\.reason) == bad.map(\.2))
        #expect(page.refused.map(\.path) == bad.map(\.1))
    }

    @Test func deletedEntriesAndSingleAnswersAreCheckedToo() throws {
        let deleted = try Metadata(json: JSON.parse(Data(#"{".tag":"deleted","name":"..","path_lower":"/..","path_display":"/.."}"#.utf8)))
        #expect(deleted.unusableNameReason == "'..' is the parent folder")
        let folder = try Metadata(json: JSON.parse(Data(#"{".tag":"folder","name":"Docs","id":"id:1","path_lower":"/docs","path_display":"/Docs"}"#.utf8)))
        #expect(folder.unusableNameReason == nil)
        #expect(Metadata.printable("evil\u{0}name") == "evil\\0name")
    }
}

/// `ShownRevisions` on its own: the order of our own revs, forgotten once the feed passes them,
/// and its bounds.
import Testing
@testable import VFSCache

@Suite struct ShownRevisionsTests {
    @Test func revsAreOrderedUntilTheFeedPassesThem() {
        var shown = ShownRevisions()
        for n in 1...5 { shown.note("r\(n)", of: "id:a") }
        #expect(shown.isEarlier("r1", than: "r5", of: "id:a"))
        #expect(!shown.isEarlier("r5", than: "r1", of: "id:a"))
        #expect(!shown.isEarlier("r1", than: "r5", of: "id:b"), "another file")
        #expect(!shown.isEarlier("other", than: "r5", of: "id:a"), "a rev not ours: unknown order")
        shown.passed("r3", of: "id:a")
        #expect(shown.keptCount == 3)
        #expect(shown.isEarlier("r3", than: "r5", of: "id:a"))
        #expect(!shown.isEarlier("r2", than: "r5", of: "id:a"), "passed: the feed cannot report it again")
    }

    @Test func aFileKeepsAtMostItsBoundAndAllFilesTheTotal() {
        var shown = ShownRevisions(perFile: 64, total: 1024)
        for n in 0..<(shown.perFile + 10) { shown.note("r\(n)", of: "id:a") }
        #expect(shown.keptCount == shown.perFile)
        #expect(shown.isEarlier("r10", than: "r\(shown.perFile + 9)", of: "id:a"))
        let files = shown.total / shown.perFile + 3
        for file in 0..<files {
            for n in 0..<shown.perFile { shown.note("r\(n)", of: "id:f\(file)") }
        }
        #expect(shown.keptCount <= shown.total)
        #expect(!shown.isEarlier("r10", than: "r20", of: "id:a"), "the file noted longest ago is forgotten first")
        #expect(shown.isEarlier("r10", than: "r20", of: "id:f\(files - 1)"))
    }
}

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

    /// Many files of one commit each (a `cp -r` of small files), past the total several times:
    /// the files noted longest ago go first, and a file forgotten and noted again counts as new.
    @Test func manyFilesAreForgottenOldestFirstAcrossManyRounds() {
        var shown = ShownRevisions(perFile: 4, total: 100)
        for file in 0..<20_000 {
            shown.note("a\(file)", of: "id:\(file)")
            shown.note("b\(file)", of: "id:\(file)")
        }
        #expect(shown.keptCount == 100)
        #expect(shown.isEarlier("a19999", than: "b19999", of: "id:19999"))
        #expect(shown.isEarlier("a19950", than: "b19950", of: "id:19950"))
        #expect(!shown.isEarlier("a19949", than: "b19949", of: "id:19949"), "forgotten: 50 files of 2 revs fill the total")
        shown.note("c0", of: "id:0")
        shown.note("d0", of: "id:0")
        #expect(shown.isEarlier("c0", than: "d0", of: "id:0"))
        #expect(!shown.isEarlier("a19950", than: "b19950", of: "id:19950"), "the oldest went to make room")
        #expect(shown.keptCount == 100)
    }
}

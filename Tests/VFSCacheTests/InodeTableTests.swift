/// `InodeTable` on its own: applying listing and change-feed entries by path, keys independent of
/// the server's lowercasing, and the detach/forget life cycle of inode numbers.
import Foundation
import Testing
@testable import VFSCache

@Suite struct InodeTableTests {
    private func folder(_ display: String, lower: String? = nil) -> RemoteChange {
        .upsert(RemoteEntry(id: "id:\(display)", name: String(display.split(separator: "/").last!),
                            pathLower: lower ?? display.lowercased(), pathDisplay: display, kind: .folder))
    }
    private func file(_ display: String, lower: String? = nil, size: UInt64 = 1) -> RemoteChange {
        .upsert(RemoteEntry(id: "id:\(display)", name: String(display.split(separator: "/").last!),
                            pathLower: lower ?? display.lowercased(), pathDisplay: display,
                            kind: .file(size: size, rev: "0123456789ab", contentHash: nil,
                                        clientModified: Date(), serverModified: Date())))
    }

    @Test func entriesAreFiledByTheirNameWhateverTheServerLowercases() throws {
        var table = InodeTable()
        // A server whose path_lower disagrees with our lowercasing, and whose parent components
        // in path_display have the wrong case: neither may matter.
        let dirApplied = table.apply(folder("/Ünïcode Dir", lower: "/SOMETHING ELSE"), generation: 1)
        let dir = try #require(dirApplied)
        let childApplied = table.apply(file("/üNÏCODE dir/Straße.TXT", lower: "/x/y"), generation: 1)
        let child = try #require(childApplied)
        #expect(table.resolve(path: "/ÜNÏCODE DIR/straße.txt") == child)
        #expect(table.child(of: dir, key: InodeTable.key("STRAßE.txt")) == child)
        #expect(table[child]?.name == "Straße.TXT")
        #expect(table.path(of: child) == "/Ünïcode Dir/Straße.TXT")
        table.apply(.deleted(pathLower: "/whatever", pathDisplay: "/ünïcode DIR"), generation: 2)
        #expect(table[dir] == nil && table[child] == nil)
        // Under a file, an entry has no place.
        let fileApplied = table.apply(file("/plain"), generation: 2)
        _ = try #require(fileApplied)
        #expect(table.apply(file("/plain/inside"), generation: 2) == nil)
    }

    @Test func childrenListedBeforeTheirParentsStillShow() throws {
        var table = InodeTable()
        // Dropbox may list children first (samschott/maestral#452): the missing folders are made...
        let leafApplied = table.apply(file("/A/b/leaf.txt"), generation: 1)
        let leaf = try #require(leafApplied)
        #expect(table.path(of: leaf) == "/A/b/leaf.txt")
        let b = try #require(table.resolve(path: "/a/B"))
        #expect(table[b]?.isDirectory == true && table[b]?.id == nil)
        // ...and fixed up when their own entries arrive: same inode, the id and the display case.
        table.apply(folder("/a/B"), generation: 1)
        table.apply(folder("/A"), generation: 1)
        #expect(table.resolve(path: "/a/b") == b && table[b]?.id == "id:/a/B" && table[b]?.name == "B")
        #expect(table.resolve(path: "/a/b/leaf.txt") == leaf)
        // Made by this listing's generation: a sweep of older entries keeps them.
        table.sweepAll(olderThan: 1)
        #expect(table.resolve(path: "/a/b/leaf.txt") == leaf)
    }

    /// files.stone SharingInfo.read_only: "inside a read-only shared folder". An entry that comes
    /// without sharing_info inherits its folder's; one with its own (a writable nested share) keeps it.
    @Test func readOnlyIsCarriedDownToEntriesWithoutSharingInfo() throws {
        var table = InodeTable()
        func with(_ change: RemoteChange, _ flags: RemoteEntry.Flags) -> RemoteChange {
            guard case .upsert(var entry) = change else { return change }
            entry.flags = flags
            return .upsert(entry)
        }
        let sharedApplied = table.apply(with(folder("/Shared"), [.shared, .readOnly]), generation: 1)
        let shared = try #require(sharedApplied)
        let plainApplied = table.apply(file("/Shared/plain.txt"), generation: 1)
        let plain = try #require(plainApplied)
        let nestedApplied = table.apply(with(folder("/Shared/Drop box"), [.shared]), generation: 1)
        let nested = try #require(nestedApplied)
        let inNestedApplied = table.apply(file("/Shared/Drop box/x.txt"), generation: 1)
        let inNested = try #require(inNestedApplied)
        let paperApplied = table.apply(with(file("/Plan.paper"), [.exportOnly]), generation: 1)
        let paper = try #require(paperApplied)
        #expect(table[shared]!.isReadOnly && table[plain]!.isReadOnly)
        #expect(!table[nested]!.isReadOnly && !table[inNested]!.isReadOnly)
        #expect(table[paper]!.isExportOnly && table[paper]!.isReadOnly)
        // The share turns writable: its entries come again with their new sharing_info.
        table.apply(with(folder("/Shared"), [.shared]), generation: 2)
        table.apply(with(file("/Shared/plain.txt"), [.shared]), generation: 2)
        #expect(!table[shared]!.isReadOnly && !table[plain]!.isReadOnly)
    }

    @Test func referencedNodesOutliveTheirRemovalUntilForgotten() throws {
        var table = InodeTable()
        let dirApplied = table.apply(folder("/d"), generation: 1)
        let dir = try #require(dirApplied)
        let keptApplied = table.apply(file("/d/kept"), generation: 1)
        let kept = try #require(keptApplied)
        let droppedApplied = table.apply(file("/d/dropped"), generation: 1)
        let dropped = try #require(droppedApplied)
        table.addLookup(kept)
        table.addLookup(kept)
        table.detach(dir)
        #expect(table[dropped] == nil)
        #expect(table[dir] == nil)
        #expect(table[kept]?.isAttached == false)
        #expect(table.path(of: kept) == nil)
        table.forget(kept, count: 1)
        #expect(table[kept] != nil)
        table.forget(kept, count: 5)   // more than held: clamps at zero, then drops
        #expect(table[kept] == nil)
        // Numbers are never reused.
        let againApplied = table.apply(folder("/d"), generation: 3)
        let again = try #require(againApplied)
        #expect(again > dropped)
    }

    @Test func sweepsRemoveOnlyEntriesTheNewListingLacks() throws {
        var table = InodeTable()
        let aApplied = table.apply(file("/a"), generation: 1)
        let a = try #require(aApplied)
        let bApplied = table.apply(file("/b"), generation: 1)
        let b = try #require(bApplied)
        table.apply(file("/a", size: 2), generation: 2)
        table.sweepChildren(of: rootInode, olderThan: 2)
        #expect(table[a]?.file?.size == 2)
        #expect(table[b] == nil)
        // An entry confirmed by a lookup (generation 0) during a listing keeps the listing's mark.
        table.apply(file("/a", size: 3), generation: 0)
        table.sweepAll(olderThan: 2)
        #expect(table[a]?.file?.size == 3)
        #expect(table[rootInode] != nil)
    }
}

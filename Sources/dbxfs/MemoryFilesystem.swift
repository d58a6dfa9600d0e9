/// A stand-in `FilesystemOperations` that keeps everything in memory (hidden `--backend memory`).
/// It exists to exercise the FUSE glue on its own, without Dropbox, the emulator or the cache
/// layer: Tests/mount/test_glue_memory.py mounts it. It is not a product feature; nothing persists.
import Foundation
import Synchronization
import VFSCache

final class MemoryFilesystem: FilesystemOperations {
    private struct Node {
        var attributes: FileAttributes
        var data: [UInt8] = []
        var children: [String: InodeNumber] = [:]   // lowercased name → inode (Dropbox-style case rule)
        var names: [InodeNumber: String] = [:]      // child inode → display name
        var parent: InodeNumber
    }

    private struct State {
        var nodes: [InodeNumber: Node] = [:]
        var nextInode: InodeNumber = 2
        var nextHandle: HandleID = 1
    }

    private let state: Mutex<State>
    private let uid: UInt32, gid: UInt32
    private let fileMode: UInt16, directoryMode: UInt16

    init(uid: UInt32, gid: UInt32, umask: UInt16) {
        self.uid = uid; self.gid = gid
        fileMode = 0o666 & ~umask; directoryMode = 0o777 & ~umask
        var state = State()
        state.nodes[rootInode] = Node(attributes: FileAttributes(ino: rootInode, kind: .directory, size: 0, mtime: Date(),
                                                                   permissions: 0o777 & ~umask, nlink: 2, uid: uid, gid: gid),
                                      parent: rootInode)
        self.state = Mutex(state)
    }

    private func entry(_ attributes: FileAttributes) -> EntryReply {
        EntryReply(attributes: attributes, entryTimeout: 1, attributeTimeout: 1)
    }

    func lookup(parent: InodeNumber, name: String) throws(Errno) -> EntryReply {
        let result: Result<FileAttributes, Errno> = state.withLock { s in
            guard let dir = s.nodes[parent] else { return .failure(.noEntry) }
            guard dir.attributes.kind == .directory else { return .failure(.notDirectory) }
            guard let ino = dir.children[name.lowercased()], let node = s.nodes[ino] else { return .failure(.noEntry) }
            return .success(node.attributes)
        }
        return entry(try result.get())
    }

    func forget(_ ino: InodeNumber, count: UInt64) {}

    func getattr(_ ino: InodeNumber) throws(Errno) -> (FileAttributes, timeout: Double) {
        guard let attributes = state.withLock({ $0.nodes[ino]?.attributes }) else { throw .noEntry }
        return (attributes, 1)
    }

    func setattr(_ ino: InodeNumber, changes: AttributeChanges, handle: HandleID?) throws(Errno) -> FileAttributes {
        let result: Result<FileAttributes, Errno> = state.withLock { s in
            guard var node = s.nodes[ino] else { return .failure(.noEntry) }
            if let size = changes.size {
                guard node.attributes.kind == .file else { return .failure(.isDirectory) }
                if size < node.data.count { node.data.removeLast(node.data.count - Int(size)) }
                else { node.data.append(contentsOf: repeatElement(0, count: Int(size) - node.data.count)) }
                node.attributes.size = size
                node.attributes.mtime = Date()
            }
            if let mtime = changes.mtime { node.attributes.mtime = mtime }
            s.nodes[ino] = node
            return .success(node.attributes)
        }
        return try result.get()
    }

    func openDirectory(_ ino: InodeNumber) throws(Errno) -> HandleID {
        let result: Result<HandleID, Errno> = state.withLock { s in
            guard let node = s.nodes[ino] else { return .failure(.noEntry) }
            guard node.attributes.kind == .directory else { return .failure(.notDirectory) }
            s.nextHandle += 1
            return .success(s.nextHandle)
        }
        return try result.get()
    }

    func readDirectory(_ ino: InodeNumber, handle: HandleID, offset: Int, limit: Int) throws(Errno) -> [DirectoryEntry] {
        let result: Result<[DirectoryEntry], Errno> = state.withLock { s in
            guard let dir = s.nodes[ino] else { return .failure(.noEntry) }
            var all: [(String, FileAttributes)] = [(".", dir.attributes)]
            all.append(("..", s.nodes[dir.parent]!.attributes))
            // Sorted by inode so offsets stay stable while the folder changes.
            for child in dir.names.keys.sorted() { all.append((dir.names[child]!, s.nodes[child]!.attributes)) }
            let slice = all.enumerated().dropFirst(offset).prefix(limit)
            return .success(slice.map { DirectoryEntry(name: $0.element.0, attributes: $0.element.1, nextOffset: $0.offset + 1) })
        }
        return try result.get()
    }

    func releaseDirectory(_ ino: InodeNumber, handle: HandleID) {}

    func open(_ ino: InodeNumber, flags: OpenFlags) throws(Errno) -> OpenReply {
        let result: Result<OpenReply, Errno> = state.withLock { s in
            guard var node = s.nodes[ino] else { return .failure(.noEntry) }
            guard node.attributes.kind == .file else { return .failure(.isDirectory) }
            if flags.contains(.truncate) {
                node.data = []; node.attributes.size = 0; node.attributes.mtime = Date(); s.nodes[ino] = node
            }
            s.nextHandle += 1
            return .success(OpenReply(handle: s.nextHandle, keepCache: false))
        }
        return try result.get()
    }

    func read(_ ino: InodeNumber, handle: HandleID, offset: UInt64, size: Int) throws(Errno) -> [UInt8] {
        let result: Result<[UInt8], Errno> = state.withLock { s in
            guard let node = s.nodes[ino] else { return .failure(.noEntry) }
            guard offset < node.data.count else { return .success([]) }
            let end = min(node.data.count, Int(offset) + size)
            return .success(Array(node.data[Int(offset)..<end]))
        }
        return try result.get()
    }

    func write(_ ino: InodeNumber, handle: HandleID, offset: UInt64, data: UnsafeRawBufferPointer) throws(Errno) -> Int {
        let result: Result<Int, Errno> = state.withLock { s in
            guard var node = s.nodes[ino] else { return .failure(.noEntry) }
            let end = Int(offset) + data.count
            if node.data.count < end { node.data.append(contentsOf: repeatElement(0, count: end - node.data.count)) }
            node.data.replaceSubrange(Int(offset)..<end, with: data)
            node.attributes.size = UInt64(node.data.count)
            node.attributes.mtime = Date()
            s.nodes[ino] = node
            return .success(data.count)
        }
        return try result.get()
    }

    func flush(_ ino: InodeNumber, handle: HandleID) throws(Errno) {}
    func fsync(_ ino: InodeNumber, handle: HandleID?) throws(Errno) {}
    func release(_ ino: InodeNumber, handle: HandleID) {}

    private func add(parent: InodeNumber, name: String, kind: FileAttributes.Kind) throws(Errno) -> FileAttributes {
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        let result: Result<FileAttributes, Errno> = state.withLock { s in
            guard var dir = s.nodes[parent] else { return .failure(.noEntry) }
            guard dir.children[name.lowercased()] == nil else { return .failure(.exists) }
            let ino = s.nextInode; s.nextInode += 1
            let attributes = FileAttributes(ino: ino, kind: kind, size: 0, mtime: Date(),
                                            permissions: kind == .file ? fileMode : directoryMode,
                                            nlink: kind == .file ? 1 : 2, uid: uid, gid: gid)
            s.nodes[ino] = Node(attributes: attributes, parent: parent)
            dir.children[name.lowercased()] = ino
            dir.names[ino] = name
            s.nodes[parent] = dir
            return .success(attributes)
        }
        return try result.get()
    }

    func create(parent: InodeNumber, name: String, flags: OpenFlags) throws(Errno) -> (EntryReply, OpenReply) {
        let attributes = try add(parent: parent, name: name, kind: .file)
        let handle = state.withLock { s in s.nextHandle += 1; return s.nextHandle }
        return (entry(attributes), OpenReply(handle: handle, keepCache: false))
    }

    func mkdir(parent: InodeNumber, name: String) throws(Errno) -> EntryReply {
        entry(try add(parent: parent, name: name, kind: .directory))
    }

    private func remove(parent: InodeNumber, name: String, directory: Bool) throws(Errno) {
        let result: Result<Void, Errno> = state.withLock { s in
            guard var dir = s.nodes[parent] else { return .failure(.noEntry) }
            guard let ino = dir.children[name.lowercased()], let node = s.nodes[ino] else { return .failure(.noEntry) }
            if directory {
                guard node.attributes.kind == .directory else { return .failure(.notDirectory) }
                guard node.children.isEmpty else { return .failure(.notEmpty) }
            } else if node.attributes.kind == .directory {
                return .failure(.isDirectory)
            }
            dir.children[name.lowercased()] = nil
            dir.names[ino] = nil
            s.nodes[parent] = dir
            s.nodes[ino] = nil
            return .success(())
        }
        try result.get()
    }

    func unlink(parent: InodeNumber, name: String) throws(Errno) { try remove(parent: parent, name: name, directory: false) }
    func rmdir(parent: InodeNumber, name: String) throws(Errno) { try remove(parent: parent, name: name, directory: true) }

    func rename(parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, flags: RenameFlags) throws(Errno) {
        if flags.contains(.exchange) { throw .invalid }
        let result: Result<Void, Errno> = state.withLock { s in
            guard var from = s.nodes[parent], let ino = from.children[name.lowercased()] else { return .failure(.noEntry) }
            from.children[name.lowercased()] = nil
            from.names[ino] = nil
            s.nodes[parent] = from
            guard var to = s.nodes[newParent] else { return .failure(.noEntry) }
            if let existing = to.children[newName.lowercased()], existing != ino {
                if flags.contains(.noReplace) {
                    // Undo and refuse.
                    s.nodes[parent]!.children[name.lowercased()] = ino
                    s.nodes[parent]!.names[ino] = name
                    return .failure(.exists)
                }
                to.names[existing] = nil
                s.nodes[existing] = nil
            }
            to.children[newName.lowercased()] = ino
            to.names[ino] = newName
            s.nodes[newParent] = to
            s.nodes[ino]!.parent = newParent
            return .success(())
        }
        try result.get()
    }

    func statfs() throws(Errno) -> FilesystemStats {
        let used = state.withLock { $0.nodes.values.reduce(UInt64(0)) { $0 + $1.attributes.size } }
        let total: UInt64 = 1 << 30
        return FilesystemStats(blockSize: 4096, totalBlocks: total / 4096,
                               freeBlocks: (total - min(total, used)) / 4096, maxNameLength: 255)
    }

    func getxattr(_ ino: InodeNumber, name: String) throws(Errno) -> [UInt8] {
        guard name == "user.memory.inode" else { throw .noData }
        return Array(String(ino).utf8)
    }

    func listxattr(_ ino: InodeNumber) throws(Errno) -> [String] { ["user.memory.inode"] }
}

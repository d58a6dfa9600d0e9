/// `Node`: one file or folder as the cache knows it, identified by its inode number. The tree
/// links nodes by parent inode and lowercased child name (`InodeTable` owns them).
///
/// `local` says where a node's truth lives: `.remote` nodes mirror the server; `.dirty` files
/// (written through the mount, upload pending) keep their local size and times, and listings
/// never sweep them away.
import Foundation

struct Node: Sendable {
    enum Kind: Sendable, Equatable {
        case file(FileMetadata)
        case directory
    }

    /// What the server last said about a file.
    struct FileMetadata: Sendable, Equatable {
        var size: UInt64
        var rev: String
        /// Dropbox's content hash, as 64 hex digits (stored as 32 bytes: see `CompactHash`).
        var contentHash: String? {
            get { storedHash?.text }
            set { storedHash = newValue.map(CompactHash.init) }
        }
        var modified: Date
        private var storedHash: CompactHash?

        init(size: UInt64, rev: String, contentHash: String?, modified: Date) {
            self.size = size; self.rev = rev; self.modified = modified
            self.storedHash = contentHash.map(CompactHash.init)
        }
    }

    /// Where the node's truth lives.
    enum LocalState: Sendable, Equatable {
        /// Mirrors the server; listings may update or remove it.
        case remote
        /// Written through the mount and not yet committed (its bytes live in a staging file):
        /// listings may update its id and name but never its size or rev, and never remove it.
        case dirty
    }

    let ino: InodeNumber
    /// Parent folder's inode; 0 once detached from the tree (deleted remotely, still referenced).
    var parent: InodeNumber
    /// Display-case name (the last path component as Dropbox shows it).
    var name: String
    var kind: Kind
    /// Dropbox id ("id:..."); nil for the mount root.
    var id: String?
    var local: LocalState = .remote
    /// Read-only (shared folder) and export-only marks, from Dropbox (RemoteEntry.Flags); one
    /// byte, in the padding after `local`.
    var flags: RemoteEntry.Flags = []
    /// FUSE lookup count: the kernel's references to this inode.
    var lookupCount: UInt64 = 0
    /// Listing generation that last confirmed this node (mark and sweep of stale entries).
    var generation: UInt64 = 0

    /// Children by lowercased name (empty for files).
    var children: [String: InodeNumber] = [:]

    // Kept small on purpose (a million of these may be cached): rarely set and folder-only state
    // (when a folder was listed, its negative answers, a node's last confirmation and the rev the
    // kernel last opened) lives in side tables of `InodeTable`.

    /// Lowercased name, the key under the parent (Dropbox's case-insensitive rule).
    var key: String { InodeTable.key(name) }
    var isDirectory: Bool { kind == .directory }
    var isAttached: Bool { parent != 0 || ino == rootInode }
    var file: FileMetadata? { if case .file(let meta) = kind { return meta } else { return nil } }
    /// Dropbox refuses writes to it (a read-only shared folder, or a file it can only export).
    var isReadOnly: Bool { !flags.isDisjoint(with: [.readOnly, .exportOnly]) }
    var isExportOnly: Bool { flags.contains(.exportOnly) }
}

extension Node.Kind {
    init(_ entry: RemoteEntry) {
        switch entry.kind {
        case .folder:
            self = .directory
        case .file(let size, let rev, let hash, let clientModified, _):
            self = .file(Node.FileMetadata(size: size, rev: rev, contentHash: hash, modified: clientModified))
        }
    }
}

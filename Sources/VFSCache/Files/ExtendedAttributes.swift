/// The extended attributes a mount exposes, so people can compare files with Dropbox (or with
/// each other) without downloading them: `user.dropbox.content_hash`, `user.dropbox.rev` and
/// `user.dropbox.id`. Folders only have an id; the mount root has none. `user.dropbox.shared_link`
/// is read from Dropbox, not from the tree, and is not listed (SharedLinks.swift).
enum ExtendedAttributes {
    static let contentHash = "user.dropbox.content_hash"
    static let rev = "user.dropbox.rev"
    static let id = "user.dropbox.id"
    static let sharedLink = "user.dropbox.shared_link"

    static func names(of node: Node) -> [String] {
        var names: [String] = []
        if let file = node.file {
            if file.contentHash != nil { names.append(contentHash) }
            names.append(rev)
        }
        if node.id != nil { names.append(id) }
        return names
    }

    static func value(_ name: String, of node: Node) -> String? {
        switch name {
        case contentHash: node.file?.contentHash
        case rev: node.file?.rev
        case id: node.id
        default: nil
        }
    }
}

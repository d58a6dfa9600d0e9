/// `NameRules`: which new names the mount accepts. Dropbox refuses a few names outright
/// (`disallowed_name`), so they are refused locally, at create/mkdir/rename time, with EINVAL and
/// a log line, instead of being accepted and then failing forever in the upload queue. Escaping
/// them was rejected: an escaped name would not round-trip to other Dropbox clients, and tools
/// would then see a name they did not write. See docs/SEMANTICS.md.
enum NameRules {
    /// Lowercased names Dropbox never stores (the desktop client ignores them too).
    static let refused: Set<String> = ["desktop.ini", "thumbs.db", ".ds_store", ".dropbox", ".dropbox.attr", "icon\r"]

    /// Throws ENAMETOOLONG for names over 255 bytes, EINVAL for names Dropbox refuses.
    /// (Invalid UTF-8 never gets here: the FUSE glue answers EILSEQ.)
    static func check(_ name: String) throws(Errno) {
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        guard !name.isEmpty, name != ".", name != "..", !name.contains("/") else { throw .invalid }
        if refused.contains(name.lowercased()) { throw .invalid }
    }
}

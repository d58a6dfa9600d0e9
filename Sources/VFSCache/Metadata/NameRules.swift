/// `NameRules`: which new names the mount accepts. Dropbox refuses some names outright
/// (`disallowed_name`) and answers `malformed_path` for others, so they are refused locally, at
/// create/mkdir/rename time, with EINVAL and a log line naming the reason, instead of being
/// accepted and then failing forever in the upload queue. Escaping them was rejected: an escaped
/// name would not round-trip to other Dropbox clients, and tools would then see a name they did
/// not write. See docs/SEMANTICS.md ("Names") and docs/EMULATOR.md for the sources.
enum NameRules {
    /// Lowercased names Dropbox never stores (the desktop client ignores them too).
    static let refused: Set<String> = ["desktop.ini", "thumbs.db", ".ds_store", ".dropbox", ".dropbox.attr", "icon\r"]

    /// Throws ENAMETOOLONG for names over 255 bytes, EINVAL for names Dropbox refuses.
    /// (Invalid UTF-8 never gets here: the FUSE glue answers EILSEQ.)
    static func check(_ name: String) throws(Errno) {
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        guard !name.isEmpty, name != ".", name != "..", !name.contains("/") else { throw .invalid }
        if refusal(name) != nil { throw .invalid }
    }

    /// Why Dropbox would refuse `name`, in words for the log; nil if it accepts it.
    static func refusal(_ name: String) -> String? {
        if refused.contains(name.lowercased()) { return "Dropbox does not store files of that name" }
        // "Paths may not end with a slash or whitespace" (Dropbox staff, dropbox-sdk-obj-c#277).
        if let last = name.unicodeScalars.last, last.properties.isWhitespace { return "it ends with whitespace" }
        // rclone's Dropbox encoder escapes these (backend/dropbox/dropbox.go).
        if name.contains("\\") { return "it contains a backslash" }
        if name.unicodeScalars.contains(where: { $0.value == 0x7F }) { return "it contains the DEL character" }
        // Most emoji: Dropbox takes no character beyond U+FFFF (dropbox-sdk-java#42, rclone#6199).
        if name.unicodeScalars.contains(where: { $0.value > 0xFFFF }) {
            return "it has a character beyond U+FFFF (such as most emoji)"
        }
        return nil
    }
}

/// Names no folder can hold. Dropbox never sends `.`, `..`, an empty name, or a name with `/` or
/// NUL in it, but a listing is data from the network (a gateway, a bug, an attacker on a test
/// setup's plain http): such a name would reach readdir as a second `.`, a name the kernel cuts at
/// the NUL, or a path that climbs out of its folder (issue 14). Listings drop those entries here,
/// when the answer is decoded, and keep them in `ListFolderResult.refused` so the caller can say
/// so in its log; single answers (`get_metadata`, ...) are checked by the caller with
/// `unusableNameReason`.
import Foundation

/// An entry a listing left out, and why.
public struct RefusedEntry: Sendable, Equatable {
    public var name: String
    public var path: String
    public var reason: String
}

extension Metadata {
    /// Why this entry's name, or a component of its path, cannot be a name in a folder; nil when
    /// all of them can.
    public var unusableNameReason: String? {
        if name.isEmpty { return "an empty name" }
        if name == "." { return "'.' is the folder itself" }
        if name == ".." { return "'..' is the parent folder" }
        if name.contains("/") { return "a '/' in the name" }
        if name.unicodeScalars.contains("\u{0}") { return "a NUL character in the name" }
        for path in [pathLower, pathDisplay].compactMap({ $0 }) {
            // "/a/b": every component after the leading "/".
            for component in path.split(separator: "/", omittingEmptySubsequences: false).dropFirst() {
                if component.isEmpty { return "an empty component in its path" }
                if component == "." || component == ".." { return "its path goes through '\(component)'" }
                if component.unicodeScalars.contains("\u{0}") { return "a NUL character in its path" }
            }
        }
        return nil
    }

    /// Escaped for a log line: a NUL shows as `\0`.
    public static func printable(_ text: String) -> String {
        text.replacingOccurrences(of: "\u{0}", with: "\\0")
    }
}

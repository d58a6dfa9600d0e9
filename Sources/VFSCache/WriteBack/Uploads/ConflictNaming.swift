/// `ConflictNaming`: the name a conflicting local version is committed under when Dropbox refuses
/// ours because someone else changed the file: `name (conflicted copy YYYY-MM-DD).ext`, the way the
/// Dropbox client names it, then `name (conflicted copy YYYY-MM-DD) (1).ext`, `(2)`, ... if that
/// name is taken too. The date is the local calendar day, as the desktop client uses.
import Foundation

enum ConflictNaming {
    /// The path of conflicted copy number `index` (0 = the plain one) of `path`.
    static func copyPath(for path: String, date: Date, timeZone: TimeZone, index: Int) -> String {
        let slash = path.lastIndex(of: "/")
        let folder = slash.map { String(path[...$0]) } ?? ""
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        // The extension starts at the last dot, unless that dot begins the name (".bashrc").
        var stem = name, ext = ""
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            stem = String(name[..<dot]); ext = String(name[dot...])
        }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let day = calendar.dateComponents([.year, .month, .day], from: date)
        let stamp = String(format: "%04d-%02d-%02d", day.year ?? 1970, day.month ?? 1, day.day ?? 1)
        let counter = index == 0 ? "" : " (\(index))"
        return "\(folder)\(stem) (conflicted copy \(stamp))\(counter)\(ext)"
    }
}

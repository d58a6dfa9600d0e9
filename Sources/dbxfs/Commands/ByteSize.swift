/// Parses human byte sizes for `--cache-size`: a number with an optional binary suffix.
/// K, M, G, T and KiB, MiB, GiB, TiB all mean powers of 1024 (a cache budget has no use for the
/// decimal/binary distinction, and `du -h` speaks binary too); "B" or no suffix means bytes.
/// Fractions are allowed ("1.5G"). Anything else ("12XB") is rejected with the reason.
import Foundation

enum ByteSize {
    struct Invalid: Error, CustomStringConvertible { var description: String }

    static func parse(_ text: String) throws(Invalid) -> UInt64 {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let numberEnd = trimmed.firstIndex { !($0.isASCII && ($0.isNumber || $0 == ".")) } ?? trimmed.endIndex
        let number = String(trimmed[..<numberEnd])
        let suffix = trimmed[numberEnd...].lowercased()
        guard !number.isEmpty, let value = Double(number), value.isFinite, value >= 0 else {
            throw Invalid(description: "invalid size '\(text)' (expected e.g. 512M, 10G, 1.5GiB)")
        }
        let multiplier: Double
        switch suffix {
        case "", "b": multiplier = 1
        case "k", "kib": multiplier = 1024
        case "m", "mib": multiplier = 1024 * 1024
        case "g", "gib": multiplier = 1024 * 1024 * 1024
        case "t", "tib": multiplier = 1024 * 1024 * 1024 * 1024
        default:
            throw Invalid(description: "invalid size '\(text)': unknown unit '\(trimmed[numberEnd...])' (use K, M, G, T or KiB, MiB, GiB, TiB)")
        }
        let bytes = value * multiplier
        guard bytes < 0x1p63 else { throw Invalid(description: "size '\(text)' is too large") }
        return UInt64(bytes.rounded())
    }
}

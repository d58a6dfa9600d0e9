/// A content hash held in 32 bytes inside the node instead of a 64-character string on the heap
/// (a separate allocation of ~112 bytes per file). With a million cached files that is the
/// difference between ~110 MB and ~32 MB; see "Memory per entry" in docs/VFSCACHE.md.
/// Anything that is not 64 hex digits (never seen from Dropbox) is kept as text.
enum CompactHash: Sendable, Equatable {
    case sha256(UInt64, UInt64, UInt64, UInt64)
    case other(String)

    init(_ text: String) {
        var words: [UInt64] = []
        words.reserveCapacity(4)
        let utf8 = Array(text.utf8)
        if utf8.count == 64 {
            for start in stride(from: 0, to: 64, by: 16) {
                var word: UInt64 = 0
                for byte in utf8[start..<(start + 16)] {
                    // Lowercase hex only, so `text` gives back exactly what came in.
                    guard let digit = Self.value(byte) else { break }
                    word = word << 4 | UInt64(digit)
                }
                words.append(word)
            }
        }
        if words.count == 4, Self.hex(words) == text {
            self = .sha256(words[0], words[1], words[2], words[3])
        } else {
            self = .other(text)
        }
    }

    var text: String {
        switch self {
        case .sha256(let a, let b, let c, let d): Self.hex([a, b, c, d])
        case .other(let text): text
        }
    }

    private static func value(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        default: nil
        }
    }

    private static func hex(_ words: [UInt64]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        return String(unsafeUninitializedCapacity: 64) { buffer in
            var i = 0
            for word in words {
                for shift in stride(from: 60, through: 0, by: -4) {
                    buffer[i] = digits[Int((word >> UInt64(shift)) & 0xf)]
                    i += 1
                }
            }
            return 64
        }
    }
}

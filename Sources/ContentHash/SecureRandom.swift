/// Cryptographically secure random bytes from OpenSSL, for PKCE verifiers, OAuth state and
/// jitter seeds that must not be guessable.
import CCrypto

public enum SecureRandom {
    public static func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard count > 0 else { return out }
        let ok = RAND_bytes(&out, Int32(count))
        precondition(ok == 1, "RAND_bytes failed: OpenSSL's generator is not seeded")
        return out
    }

    /// `count` characters drawn uniformly from `alphabet` (rejection sampling, no modulo bias).
    public static func string(count: Int, alphabet: String = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") -> String {
        let letters = Array(alphabet)
        precondition(!letters.isEmpty && letters.count <= 256)
        let limit = 256 - (256 % letters.count)
        var result = ""
        while result.count < count {
            for byte in bytes(count * 2) where Int(byte) < limit && result.count < count {
                result.append(letters[Int(byte) % letters.count])
            }
        }
        return result
    }
}

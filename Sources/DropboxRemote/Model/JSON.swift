/// A JSON value as a Sendable enum (parsed by JSONParser.swift), plus the two encodings the Dropbox API needs: plain JSON for
/// request bodies and "HTTP-header safe" JSON (every non-ASCII character and DEL as `\uXXXX`)
/// for the `Dropbox-API-Arg` header. Stone's unions and structs are decoded from this tree by
/// hand (see Models.swift), because their encoding (`.tag` plus inlined or nested fields) does not
/// map cleanly onto Codable.
import Foundation

public enum JSON: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object([String: JSON])

    // MARK: Parsing

    /// Parses a complete JSON document (any value at the top level, including `null`).
    public static func parse(_ data: Data) throws -> JSON {
        try JSONParser.parse(data)
    }

    // MARK: Accessors (nil when the shape differs)

    public subscript(key: String) -> JSON? {
        if case .object(let fields) = self { return fields[key] }
        return nil
    }
    public var string: String? { if case .string(let s) = self { return s }; return nil }
    public var bool: Bool? { if case .bool(let b) = self { return b }; return nil }
    public var array: [JSON]? { if case .array(let a) = self { return a }; return nil }
    public var object: [String: JSON]? { if case .object(let o) = self { return o }; return nil }
    public var isNull: Bool { if case .null = self { return true }; return false }
    public var int64: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d == d.rounded() && abs(d) < 9.2e18: return Int64(d)
        default: return nil
        }
    }
    public var uint64: UInt64? { int64.flatMap { $0 >= 0 ? UInt64($0) : nil } }
    public var double: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }
    /// The `.tag` of a Stone union value; a bare string is the shorthand for a void member.
    public var tag: String? {
        if case .string(let s) = self { return s }
        return self[".tag"]?.string
    }

    // MARK: Encoding

    /// Compact JSON text. With `asciiOnly`, the text is safe to put in an HTTP header.
    public func encoded(asciiOnly: Bool = false) -> String {
        var out = ""
        write(to: &out, asciiOnly: asciiOnly)
        return out
    }

    public var data: Data { Data(encoded().utf8) }

    private func write(to out: inout String, asciiOnly: Bool) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .int(let i): out += String(i)
        case .double(let d): out += d.isFinite ? "\(d)" : "null"
        case .string(let s): JSON.writeString(s, to: &out, asciiOnly: asciiOnly)
        case .array(let items):
            out += "["
            for (index, item) in items.enumerated() {
                if index > 0 { out += "," }
                item.write(to: &out, asciiOnly: asciiOnly)
            }
            out += "]"
        case .object(let fields):
            out += "{"
            // Sorted keys: deterministic output makes recorded requests and tests comparable.
            for (index, key) in fields.keys.sorted().enumerated() {
                if index > 0 { out += "," }
                JSON.writeString(key, to: &out, asciiOnly: asciiOnly)
                out += ":"
                fields[key]!.write(to: &out, asciiOnly: asciiOnly)
            }
            out += "}"
        }
    }

    private static func writeString(_ s: String, to out: inout String, asciiOnly: Bool) {
        out += "\""
        for unit in s.unicodeScalars {
            switch unit {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                let v = unit.value
                if v < 0x20 || (asciiOnly && v >= 0x7F) {
                    // UTF-16 code units, so characters outside the BMP become surrogate pairs.
                    for codeUnit in String(unit).utf16 {
                        let hexDigits = String(codeUnit, radix: 16)
                        out += "\\u" + String(repeating: "0", count: 4 - hexDigits.count) + hexDigits
                    }
                } else {
                    out.unicodeScalars.append(unit)
                }
            }
        }
        out += "\""
    }
}

extension JSON: Decodable {
    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null; return }
        // Order matters: Bool first so true/false never become numbers, Int64 before Double so
        // sizes and offsets stay exact.
        if let b = try? container.decode(Bool.self) { self = .bool(b); return }
        if let i = try? container.decode(Int64.self) { self = .int(i); return }
        if let d = try? container.decode(Double.self) { self = .double(d); return }
        if let s = try? container.decode(String.self) { self = .string(s); return }
        if let a = try? container.decode([JSON].self) { self = .array(a); return }
        if let o = try? container.decode([String: JSON].self) { self = .object(o); return }
        throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
    }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByDictionaryLiteral, ExpressibleByArrayLiteral, ExpressibleByNilLiteral {
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(dictionaryLiteral elements: (String, JSON)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
    public init(nilLiteral: ()) { self = .null }
}

/// Building request objects with optional fields: `nil` values are left out, as Stone does.
extension JSON {
    static func object(omittingNils fields: [String: JSON?]) -> JSON {
        .object(fields.compactMapValues { $0 })
    }
}

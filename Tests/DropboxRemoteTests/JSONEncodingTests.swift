/// The JSON value type: parsing keeps integers exact and booleans distinct, and the header-safe
/// encoding escapes exactly what Dropbox-API-Arg requires.
import Foundation
import Testing
@testable import DropboxRemote

@Suite struct JSONEncodingTests {
    @Test func headerSafeEncodingEscapesNonASCIIAsUTF16() {
        let arg: JSON = ["path": "/été/😀\u{7F}.txt"]
        #expect(arg.encoded(asciiOnly: true) == #"{"path":"/\u00e9t\u00e9/\ud83d\ude00\u007f.txt"}"#)
        // The body encoding keeps UTF-8 as is.
        #expect(arg.encoded() == "{\"path\":\"/été/😀\u{7F}.txt\"}")
    }

    @Test func controlCharactersAndQuotesAreEscaped() {
        let value: JSON = .string("a\"b\\c\nd\u{01}")
        #expect(value.encoded() == #""a\"b\\c\nd\u0001""#)
    }

    @Test func parsingKeepsLargeIntegersExactAndBooleansDistinct() throws {
        let json = try JSON.parse(Data(#"{"size": 9007199254740993, "flag": true, "one": 1, "f": 1.5, "n": null}"#.utf8))
        #expect(json["size"]?.uint64 == 9_007_199_254_740_993)
        #expect(json["flag"] == .bool(true))
        #expect(json["one"] == .int(1))
        #expect(json["one"]?.bool == nil)
        #expect(json["f"]?.double == 1.5)
        #expect(json["n"]?.isNull == true)
    }

    @Test func roundTripThroughParse() throws {
        let original: JSON = ["a": [1, "x", ["b": false]], "c": nil, "ü": "ß"]
        #expect(try JSON.parse(original.data) == original)
        #expect(try JSON.parse(Data(original.encoded(asciiOnly: true).utf8)) == original)
    }

    @Test func unionTagShorthand() {
        #expect(JSON.string("overwrite").tag == "overwrite")
        #expect(JSON.object([".tag": "update", "update": "abc"]).tag == "update")
    }
}

@Suite struct JSONParserTests {
    @Test func escapesAndSurrogatePairs() throws {
        let text = #"{"a":"x\"y\\z\/\n\t\u00e9\ud83d\ude00","b":[],"c":{},"d":-12,"e":1e3,"f":-0.5}"#
        let json = try JSON.parse(Data(text.utf8))
        #expect(json["a"] == "x\"y\\z/\n\té😀")
        #expect(json["b"] == .array([]) && json["c"] == .object([:]))
        #expect(json["d"] == .int(-12) && json["e"] == .double(1000) && json["f"] == .double(-0.5))
        #expect(try JSON.parse(Data("  null ".utf8)) == .null)
        #expect(try JSON.parse(Data("\"raw ünïcode\"".utf8)) == "raw ünïcode")
    }

    @Test func malformedDocumentsAreRejected() {
        for bad in ["", "{", "[1,]", "{\"a\" 1}", "tru", "\"\\ud83d\"", "\"a\u{01}\"", "1 2", "{\"a\":1,}", "-"] {
            #expect(throws: (any Error).self, "\(bad)") { try JSON.parse(Data(bad.utf8)) }
        }
    }

    @Test func timestampsMatchFoundation() throws {
        for text in ["2015-05-12T15:50:38Z", "2000-02-29T00:00:00Z", "1970-01-01T00:00:00Z", "2038-01-19T03:14:08Z", "2026-12-31T23:59:59Z"] {
            #expect(DropboxTimestamp.parse(text) == (try Date(text, strategy: .iso8601)), "\(text)")
        }
        #expect(DropboxTimestamp.parse("2015-13-12T15:50:38Z") == nil)
    }
}

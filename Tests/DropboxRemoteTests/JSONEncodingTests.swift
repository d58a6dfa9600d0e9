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

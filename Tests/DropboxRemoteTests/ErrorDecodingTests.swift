/// Error classification on recorded response bodies (shapes from the API documentation and the
/// stone spec), one per kind of failure and per union shape.
import Foundation
import Testing
@testable import DropboxRemote

@Suite struct ErrorDecodingTests {
    private func classify(_ status: Int, _ body: String, shape: RouteErrorShape = .none,
                          contentType: String? = "application/json", retryAfter: String? = nil) -> DropboxError {
        DropboxError.classify(status: status, body: Data(body.utf8), contentType: contentType,
                              retryAfterHeader: retryAfter, shape: shape)
    }

    @Test func lookupNotFound() {
        let error = classify(409, #"{"error_summary": "path/not_found/..", "error": {".tag": "path", "path": {".tag": "not_found"}}}"#, shape: .lookup)
        #expect(error == .route(.path(.notFound), summary: "path/not_found/.."))
    }

    @Test func malformedPathCarriesItsText() {
        let error = classify(409, #"{"error_summary": "path/malformed_path/", "error": {".tag": "path", "path": {".tag": "malformed_path", "malformed_path": "bad"}}}"#, shape: .lookup)
        #expect(error == .route(.path(.malformedPath("bad")), summary: "path/malformed_path/"))
    }

    @Test func uploadConflictIsInlinedUploadWriteFailed() {
        let body = #"{"error_summary":"path/conflict/file/..","error":{".tag":"path","reason":{".tag":"conflict","conflict":{".tag":"file"}},"upload_session_id":"pid_upload_session:abc"}}"#
        let error = classify(409, body, shape: .upload)
        #expect(error == .route(.pathWrite(.conflict(.file)), summary: "path/conflict/file/.."))
        if case .route(let route, _) = error { #expect(route.write == .conflict(.file)) }
    }

    @Test func createFolderConflictFolder() {
        let body = #"{"error_summary":"path/conflict/folder/...","error":{".tag":"path","path":{".tag":"conflict","conflict":{".tag":"folder"}}}}"#
        #expect(classify(409, body, shape: .write) == .route(.pathWrite(.conflict(.folder)), summary: "path/conflict/folder/..."))
    }

    @Test func appendIncorrectOffsetCarriesCorrectOffset() {
        let body = #"{"error_summary":"incorrect_offset/..","error":{".tag":"incorrect_offset","correct_offset":8388608}}"#
        #expect(classify(409, body, shape: .uploadSession) == .route(.uploadSession(.incorrectOffset(correctOffset: 8_388_608)), summary: "incorrect_offset/.."))
    }

    @Test func finishLookupFailedIsNested() {
        let body = #"{"error_summary":"lookup_failed/incorrect_offset/.","error":{".tag":"lookup_failed","lookup_failed":{".tag":"incorrect_offset","correct_offset":5}}}"#
        #expect(classify(409, body, shape: .uploadSessionFinish) == .route(.uploadSession(.incorrectOffset(correctOffset: 5)), summary: "lookup_failed/incorrect_offset/."))
        let mismatch = #"{"error_summary":"content_hash_mismatch/","error":{".tag":"content_hash_mismatch"}}"#
        #expect(classify(409, mismatch, shape: .uploadSession) == .route(.other(tag: "content_hash_mismatch"), summary: "content_hash_mismatch/"))
    }

    @Test func deleteAndRelocationUnions() {
        let delete = #"{"error_summary":"path_lookup/not_found/","error":{".tag":"path_lookup","path_lookup":{".tag":"not_found"}}}"#
        #expect(classify(409, delete, shape: .delete) == .route(.pathLookup(.notFound), summary: "path_lookup/not_found/"))
        let to = #"{"error_summary":"to/conflict/folder/","error":{".tag":"to","to":{".tag":"conflict","conflict":{".tag":"folder"}}}}"#
        #expect(classify(409, to, shape: .relocation) == .route(.to(.conflict(.folder)), summary: "to/conflict/folder/"))
        let into = #"{"error_summary":"cant_move_folder_into_itself/..","error":{".tag":"cant_move_folder_into_itself"}}"#
        #expect(classify(409, into, shape: .relocation) == .route(.other(tag: "cant_move_folder_into_itself"), summary: "cant_move_folder_into_itself/.."))
        let reset = #"{"error_summary":"reset/..","error":{".tag":"reset"}}"#
        #expect(classify(409, reset, shape: .lookup) == .route(.reset, summary: "reset/.."))
    }

    @Test func authErrors() {
        #expect(classify(401, #"{"error_summary":"expired_access_token/..","error":{".tag":"expired_access_token"}}"#)
                == .auth(.expiredAccessToken, summary: "expired_access_token/.."))
        #expect(classify(401, #"{"error_summary":"missing_scope/","error":{".tag":"missing_scope","required_scope":"files.content.write"}}"#)
                == .auth(.missingScope(requiredScope: "files.content.write"), summary: "missing_scope/"))
    }

    @Test func rateLimitFromBodyOrHeader() {
        let body = #"{"error_summary":"too_many_write_operations/..","error":{"reason":{".tag":"too_many_write_operations"},"retry_after":3}}"#
        #expect(classify(429, body, retryAfter: "9") == .rateLimited(reason: "too_many_write_operations", retryAfter: 3))
        #expect(classify(429, "slow down", contentType: "text/plain", retryAfter: "7") == .rateLimited(reason: "too_many_requests", retryAfter: 7))
    }

    @Test func badInputServerAndOthers() {
        let text = #"Error in call to API function "files/list_folder": request body: path: Specify the root folder as an empty string rather than as "/"."#
        #expect(classify(400, text, contentType: "text/plain; charset=utf-8") == .badInput(text))
        #expect(classify(503, "upstream down", contentType: "text/plain") == .server(status: 503, message: "upstream down"))
        #expect(classify(403, #"{"error_summary":"no_permission/","error":{".tag":"no_permission"}}"#) == .accessDenied(tag: "no_permission", summary: "no_permission/"))
        if case .unexpectedResponse = classify(409, "not json", contentType: "text/plain") {} else { Issue.record("409 without JSON must be unexpected") }
    }
}

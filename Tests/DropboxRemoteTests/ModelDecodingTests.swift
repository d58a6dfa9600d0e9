/// Decoding of metadata, listings, account and space usage from recorded JSON.
import Foundation
import Testing
@testable import DropboxRemote

@Suite struct ModelDecodingTests {
    private func json(_ text: String) throws -> JSON { try JSON.parse(Data(text.utf8)) }

    @Test func fileFolderDeleted() throws {
        let file = try Metadata(json: json(#"{".tag":"file","name":"Prime_Numbers.txt","id":"id:a4ayc_80_OEAAAAAAAAAXw","client_modified":"2015-05-12T15:50:38Z","server_modified":"2015-05-12T15:50:38Z","rev":"a1c10ce0dd78","size":7212,"path_lower":"/homework/math/prime_numbers.txt","path_display":"/Homework/math/Prime_Numbers.txt","is_downloadable":true,"content_hash":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}"#))
        guard case .file(let f) = file else { Issue.record("not a file"); return }
        #expect(f.size == 7212 && f.rev == "a1c10ce0dd78" && f.isDownloadable)
        #expect(f.clientModified == Date(timeIntervalSince1970: 1_431_445_838))
        #expect(DropboxTimestamp.format(f.serverModified) == "2015-05-12T15:50:38Z")
        #expect(file.pathDisplay == "/Homework/math/Prime_Numbers.txt")

        let folder = try Metadata(json: json(#"{".tag":"folder","name":"math","path_lower":"/homework/math","path_display":"/Homework/math","id":"id:a4ayc_80_OEAAAAAAAAAXz"}"#))
        #expect(folder == .folder(FolderMetadata(name: "math", id: "id:a4ayc_80_OEAAAAAAAAAXz", pathLower: "/homework/math", pathDisplay: "/Homework/math")))

        let deleted = try Metadata(json: json(#"{".tag":"deleted","name":"old","path_lower":"/old","path_display":"/old"}"#))
        #expect(deleted == .deleted(DeletedMetadata(name: "old", pathLower: "/old", pathDisplay: "/old")))
    }

    @Test func closedUnionRejectsUnknownTagAndMissingFields() throws {
        #expect(throws: DropboxError.self) { try Metadata(json: json(#"{".tag":"symlink","name":"x"}"#)) }
        #expect(throws: DropboxError.self) { try Metadata(json: json(#"{".tag":"file","name":"x","id":"id:1"}"#)) }
    }

    @Test func listingPage() throws {
        let page = try ListFolderResult(json: json(#"{"entries":[{".tag":"folder","name":"a","id":"id:1","path_lower":"/a","path_display":"/a"}],"cursor":"ZtkX9_EHj3x7PMkVuFIhwKYXEpwpLwyxp9vMKomUhllil9q7eWiAu","has_more":true}"#))
        #expect(page.entries.count == 1 && page.hasMore && page.cursor.hasPrefix("ZtkX"))
    }

    @Test func accountAndSpace() throws {
        let account = try FullAccount(json: json(#"{"account_id":"dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc","name":{"given_name":"Franz","surname":"Ferdinand","familiar_name":"Franz","display_name":"Franz Ferdinand (Personal)","abbreviated_name":"FF"},"email":"franz@example.com","email_verified":true,"disabled":false,"locale":"en","referral_link":"https://db.tt/ZITNuhtI","is_paired":false,"account_type":{".tag":"basic"},"root_info":{".tag":"user","root_namespace_id":"3235641","home_namespace_id":"3235641"},"country":"US"}"#))
        #expect(account.accountID.count == 40 && account.name.displayName == "Franz Ferdinand (Personal)")
        #expect(account.rootInfo.tag == "user" && account.accountType == "basic")
        let space = try SpaceUsage(json: json(#"{"used":314159265,"allocation":{".tag":"individual","allocated":10000000000}}"#))
        #expect(space.used == 314_159_265 && space.filesystem == (10_000_000_000, 314_159_265))
    }

    /// users.stone's TeamSpaceAllocation example: the filesystem is the team's allocation less the
    /// team's usage, or the member's stop_sync limit less their own usage when that leaves less.
    @Test func teamSpaceUsage() throws {
        let team = try SpaceUsage(json: json(#"{"used":314159265,"allocation":{".tag":"team","used":27182818284,"allocated":100000000000,"user_within_team_space_allocated":0,"user_within_team_space_limit_type":{".tag":"off"},"user_within_team_space_used_cached":314159265}}"#))
        #expect(team.filesystem == (100_000_000_000, 27_182_818_284))
        let limited = try SpaceUsage(json: json(#"{"used":314159265,"allocation":{".tag":"team","used":27182818284,"allocated":100000000000,"user_within_team_space_allocated":2000000000,"user_within_team_space_limit_type":{".tag":"stop_sync"},"user_within_team_space_used_cached":314159265}}"#))
        #expect(limited.filesystem == (2_000_000_000, 314_159_265))
        // The team is nearly full: the member's limit leaves more than the team does.
        let full = SpaceUsage(used: 10, allocation: .team(used: 990, allocated: 1000, memberLimit: 500, memberLimitType: "stop_sync"))
        #expect(full.filesystem == (500, 490))
        let overTeam = SpaceUsage(used: 10, allocation: .team(used: 1200, allocated: 1000, memberLimit: 0, memberLimitType: "off"))
        #expect(overTeam.filesystem == (1000, 1000))
    }

    @Test func sharingAndExportInfo() throws {
        let paper = try FileMetadata(json: json(#"{"name":"Plan.paper","id":"id:1","client_modified":"2015-05-12T15:50:38Z","server_modified":"2015-05-12T15:50:38Z","rev":"a1c10ce0dd78","size":7212,"is_downloadable":false,"export_info":{"export_as":"md","export_options":["md","html"]},"sharing_info":{"read_only":true,"parent_shared_folder_id":"84528192421","modified_by":"dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc"}}"#))
        #expect(!paper.isDownloadable && paper.exportInfo == ExportInfo(exportAs: "md", exportOptions: ["md", "html"]))
        #expect(paper.sharingInfo == SharingInfo(readOnly: true, parentSharedFolderID: "84528192421"))
        let folder = try FolderMetadata(json: json(#"{"name":"Shared","id":"id:2","sharing_info":{"read_only":false,"shared_folder_id":"84528192421","traverse_only":false,"no_access":false}}"#))
        #expect(folder.sharingInfo == SharingInfo(readOnly: false, sharedFolderID: "84528192421"))
    }

    @Test func pathRootHeader() throws {
        #expect(try JSON.parse(Data(PathRoot.root("7").headerValue.utf8)) == [".tag": "root", "root": "7"])
        #expect(try JSON.parse(Data(PathRoot.home.headerValue.utf8)) == [".tag": "home"])
        #expect(try JSON.parse(Data(PathRoot.namespaceID("9").headerValue.utf8)) == [".tag": "namespace_id", "namespace_id": "9"])
    }

    @Test func commitInfoEncoding() {
        let commit = CommitInfo(path: "/a.txt", mode: .update(rev: "0123456789"), clientModified: Date(timeIntervalSince1970: 1_431_445_838.7))
        let fields = commit.jsonFields
        #expect(fields["mode"] == [".tag": "update", "update": "0123456789"])
        #expect(fields["client_modified"] == "2015-05-12T15:50:38Z")
    }

    @Test func endpointsOverride() {
        let e = Endpoints(overridingAllWith: "http://127.0.0.1:8080/")
        #expect(e.api == "http://127.0.0.1:8080" && e.notify == e.api && e.content == e.api)
        #expect(e.tokenURL == "http://127.0.0.1:8080/oauth2/token")
        #expect(Endpoints.dropbox.content == "https://content.dropboxapi.com")
        let named = Endpoints(overridingAllWith: "http://127.0.0.1:8080/{host}")
        #expect(named.api == "http://127.0.0.1:8080/api" && named.content == "http://127.0.0.1:8080/content")
        #expect(named.notify == "http://127.0.0.1:8080/notify" && named.authorizeURL == "http://127.0.0.1:8080/web/oauth2/authorize")
    }

    /// Expected value from Python: base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()), unpadded.
    @Test func pkceMatchesPythonHashlib() {
        let pkce = PKCE(verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
        #expect(pkce.challenge == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
        let fresh = PKCE()
        #expect(fresh.verifier.count == 128 && fresh.verifier != PKCE().verifier)
    }

    @Test func uploadBodySlices() throws {
        let data = Data((0..<100).map { UInt8($0) })
        guard case .data(let middle) = UploadBody.data(data).slice(from: 10, count: 5) else { Issue.record("shape"); return }
        #expect(Array(middle) == [10, 11, 12, 13, 14])
        let reader = UploadBody.reader(length: 100) { offset, buffer in
            let n = min(buffer.count, 100 - Int(offset))
            for i in 0..<n { buffer[i] = UInt8(Int(offset) + i) }
            return n
        }
        guard case .reader(let length, let read) = reader.slice(from: 90, count: 4) else { Issue.record("shape"); return }
        var out = [UInt8](repeating: 0, count: 16)
        let n = try out.withUnsafeMutableBytes { try read(0, $0) }
        #expect(length == 4 && Array(out[0..<n]) == [90, 91, 92, 93])
    }
}

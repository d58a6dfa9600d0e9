/// The Dropbox data types the client returns and accepts, decoded from Stone JSON by hand.
/// `Metadata` is polymorphic (file, folder, deleted) exactly as the API's union; fields keep the
/// API's meaning (see /work/shared/dropbox-api-notes.md §4). Decoders throw
/// `DropboxError.unexpectedResponse` when a required field is missing, so a malformed server
/// answer never turns into a silently wrong value.
import Foundation

public struct FileMetadata: Sendable, Equatable {
    public var name: String
    public var id: String
    public var pathLower: String?
    public var pathDisplay: String?
    public var rev: String
    public var size: UInt64
    public var clientModified: Date
    public var serverModified: Date
    public var contentHash: String?
    /// False for Paper docs, Google Docs/Sheets/Slides and `.web` shortcuts: `files/download`
    /// refuses them (`unsupported_file`); `export` gives their content in `exportInfo`'s format.
    public var isDownloadable: Bool
    /// How a file that is not downloadable can be exported (files.stone ExportInfo).
    public var exportInfo: ExportInfo?
    /// Set inside a shared folder (files.stone FileSharingInfo).
    public var sharingInfo: SharingInfo?

    public init(name: String, id: String, pathLower: String?, pathDisplay: String?, rev: String, size: UInt64,
                clientModified: Date, serverModified: Date, contentHash: String?, isDownloadable: Bool = true,
                exportInfo: ExportInfo? = nil, sharingInfo: SharingInfo? = nil) {
        self.name = name; self.id = id; self.pathLower = pathLower; self.pathDisplay = pathDisplay
        self.rev = rev; self.size = size; self.clientModified = clientModified
        self.serverModified = serverModified; self.contentHash = contentHash; self.isDownloadable = isDownloadable
        self.exportInfo = exportInfo; self.sharingInfo = sharingInfo
    }

    /// Decodes a FileMetadata object, with or without its `.tag`.
    public init(json: JSON) throws(DropboxError) {
        name = try json.required("name")
        id = try json.required("id")
        pathLower = json["path_lower"]?.string
        pathDisplay = json["path_display"]?.string
        rev = try json.required("rev")
        guard let size = json["size"]?.uint64 else { throw .unexpectedResponse("file metadata without size") }
        self.size = size
        clientModified = try json.requiredDate("client_modified")
        serverModified = try json.requiredDate("server_modified")
        contentHash = json["content_hash"]?.string
        // The spec's default is true; Go decodes a missing field as false. We follow the spec.
        isDownloadable = json["is_downloadable"]?.bool ?? true
        exportInfo = json["export_info"].map(ExportInfo.init(json:))
        sharingInfo = json["sharing_info"].map(SharingInfo.init(json:))
    }
}

/// files.stone `ExportInfo`: the format an export gives by default (`export_as`; nil when the
/// file cannot be exported either) and the others it accepts.
public struct ExportInfo: Sendable, Equatable {
    public var exportAs: String?
    public var exportOptions: [String]

    public init(exportAs: String?, exportOptions: [String] = []) {
        self.exportAs = exportAs; self.exportOptions = exportOptions
    }

    init(json: JSON) {
        exportAs = json["export_as"]?.string
        exportOptions = json["export_options"]?.array?.compactMap(\.string) ?? []
    }
}

/// files.stone `FileSharingInfo` / `FolderSharingInfo`: set on everything inside a shared
/// folder. `readOnly`: "True if the file or folder is inside a read-only shared folder".
public struct SharingInfo: Sendable, Equatable {
    public var readOnly: Bool
    /// The shared folder that holds this entry.
    public var parentSharedFolderID: String?
    /// On a shared folder's mount point: the folder's own namespace id.
    public var sharedFolderID: String?

    public init(readOnly: Bool, parentSharedFolderID: String? = nil, sharedFolderID: String? = nil) {
        self.readOnly = readOnly; self.parentSharedFolderID = parentSharedFolderID; self.sharedFolderID = sharedFolderID
    }

    init(json: JSON) {
        readOnly = json["read_only"]?.bool ?? false
        parentSharedFolderID = json["parent_shared_folder_id"]?.string
        sharedFolderID = json["shared_folder_id"]?.string
    }
}

public struct FolderMetadata: Sendable, Equatable {
    public var name: String
    public var id: String
    public var pathLower: String?
    public var pathDisplay: String?
    /// Set on a shared folder and on every folder inside one (files.stone FolderSharingInfo).
    public var sharingInfo: SharingInfo?

    public init(name: String, id: String, pathLower: String?, pathDisplay: String?, sharingInfo: SharingInfo? = nil) {
        self.name = name; self.id = id; self.pathLower = pathLower; self.pathDisplay = pathDisplay
        self.sharingInfo = sharingInfo
    }

    public init(json: JSON) throws(DropboxError) {
        name = try json.required("name")
        id = try json.required("id")
        pathLower = json["path_lower"]?.string
        pathDisplay = json["path_display"]?.string
        sharingInfo = json["sharing_info"].map(SharingInfo.init(json:))
    }
}

public struct DeletedMetadata: Sendable, Equatable {
    public var name: String
    public var pathLower: String?
    public var pathDisplay: String?

    public init(name: String, pathLower: String?, pathDisplay: String?) {
        self.name = name; self.pathLower = pathLower; self.pathDisplay = pathDisplay
    }

    public init(json: JSON) throws(DropboxError) {
        name = try json.required("name")
        pathLower = json["path_lower"]?.string
        pathDisplay = json["path_display"]?.string
    }
}

/// Stone's closed union `Metadata`: the `.tag` decides the case; any other tag is an error.
public enum Metadata: Sendable, Equatable {
    case file(FileMetadata)
    case folder(FolderMetadata)
    case deleted(DeletedMetadata)

    public init(json: JSON) throws(DropboxError) {
        switch json[".tag"]?.string {
        case "file": self = .file(try FileMetadata(json: json))
        case "folder": self = .folder(try FolderMetadata(json: json))
        case "deleted": self = .deleted(try DeletedMetadata(json: json))
        case let other: throw .unexpectedResponse("metadata with tag \(other ?? "none")")
        }
    }

    public var name: String {
        switch self { case .file(let f): f.name; case .folder(let f): f.name; case .deleted(let d): d.name }
    }
    public var pathLower: String? {
        switch self { case .file(let f): f.pathLower; case .folder(let f): f.pathLower; case .deleted(let d): d.pathLower }
    }
    public var pathDisplay: String? {
        switch self { case .file(let f): f.pathDisplay; case .folder(let f): f.pathDisplay; case .deleted(let d): d.pathDisplay }
    }
    public var file: FileMetadata? { if case .file(let f) = self { return f }; return nil }
    public var folder: FolderMetadata? { if case .folder(let f) = self { return f }; return nil }
}

/// One page of `list_folder` or `list_folder/continue`.
public struct ListFolderResult: Sendable, Equatable {
    public var entries: [Metadata]
    public var cursor: String
    public var hasMore: Bool
    /// Entries left out of `entries` because no folder can hold their name (EntryNames.swift).
    public var refused: [RefusedEntry] = []

    public init(json: JSON) throws(DropboxError) {
        guard let entries = json["entries"]?.array else { throw .unexpectedResponse("listing without entries") }
        var decoded: [Metadata] = []
        decoded.reserveCapacity(entries.count)
        for entry in entries {
            let metadata = try Metadata(json: entry)
            if let reason = metadata.unusableNameReason {
                refused.append(RefusedEntry(name: metadata.name, path: metadata.pathDisplay ?? metadata.pathLower ?? "", reason: reason))
            } else {
                decoded.append(metadata)
            }
        }
        self.entries = decoded
        cursor = try json.required("cursor")
        hasMore = json["has_more"]?.bool ?? false
    }
}

/// Answer of `list_folder/longpoll`.
public struct LongpollResult: Sendable, Equatable {
    public var changes: Bool
    /// Seconds the server asks us to wait before the next poll.
    public var backoff: Int?
}

/// How a commit treats an existing file (Stone `WriteMode`).
public enum WriteMode: Sendable, Equatable {
    case add
    case overwrite
    case update(rev: String)

    var json: JSON {
        switch self {
        case .add: [".tag": "add"]
        case .overwrite: [".tag": "overwrite"]
        case .update(let rev): [".tag": "update", "update": .string(rev)]
        }
    }
}

/// Stone `CommitInfo`: where and how an upload is committed.
public struct CommitInfo: Sendable, Equatable {
    public var path: String
    public var mode: WriteMode
    public var autorename: Bool
    /// Sent with whole seconds, as the API stores it.
    public var clientModified: Date?
    public var mute: Bool
    public var strictConflict: Bool

    public init(path: String, mode: WriteMode = .add, autorename: Bool = false, clientModified: Date? = nil,
                mute: Bool = false, strictConflict: Bool = false) {
        self.path = path; self.mode = mode; self.autorename = autorename
        self.clientModified = clientModified; self.mute = mute; self.strictConflict = strictConflict
    }

    var jsonFields: [String: JSON] {
        var fields: [String: JSON] = [
            "path": .string(path), "mode": mode.json, "autorename": .bool(autorename),
            "mute": .bool(mute), "strict_conflict": .bool(strictConflict),
        ]
        if let clientModified { fields["client_modified"] = .string(DropboxTimestamp.format(clientModified)) }
        return fields
    }
}

/// Stone `FullAccount` (the fields a filesystem can use).
public struct FullAccount: Sendable, Equatable {
    public struct Name: Sendable, Equatable {
        public var givenName: String, surname: String, familiarName: String, displayName: String, abbreviatedName: String
    }
    public struct RootInfo: Sendable, Equatable {
        /// `user` or `team`.
        public var tag: String
        public var rootNamespaceID: String
        public var homeNamespaceID: String
        public var homePath: String?
    }
    public var accountID: String
    public var name: Name
    public var email: String
    public var emailVerified: Bool
    public var disabled: Bool
    public var locale: String
    public var referralLink: String
    public var isPaired: Bool
    /// `basic`, `pro` or `business`.
    public var accountType: String
    public var rootInfo: RootInfo
    public var country: String?

    public init(json: JSON) throws(DropboxError) {
        accountID = try json.required("account_id")
        guard let n = json["name"] else { throw .unexpectedResponse("account without name") }
        name = Name(givenName: try n.required("given_name"), surname: try n.required("surname"),
                    familiarName: try n.required("familiar_name"), displayName: try n.required("display_name"),
                    abbreviatedName: try n.required("abbreviated_name"))
        email = try json.required("email")
        emailVerified = json["email_verified"]?.bool ?? false
        disabled = json["disabled"]?.bool ?? false
        locale = json["locale"]?.string ?? ""
        referralLink = json["referral_link"]?.string ?? ""
        isPaired = json["is_paired"]?.bool ?? false
        accountType = json["account_type"]?.tag ?? "basic"
        guard let r = json["root_info"], let rootTag = r.tag else { throw .unexpectedResponse("account without root_info") }
        rootInfo = RootInfo(tag: rootTag, rootNamespaceID: try r.required("root_namespace_id"),
                            homeNamespaceID: try r.required("home_namespace_id"), homePath: r["home_path"]?.string)
        country = json["country"]?.string
    }
}

/// Stone `SpaceUsage` (users.stone).
public struct SpaceUsage: Sendable, Equatable {
    public enum Allocation: Sendable, Equatable {
        case individual(allocated: UInt64)
        /// `TeamSpaceAllocation`: the team's own `used` and `allocated`, and the member's limit
        /// inside it (`memberLimit` 0: none; `memberLimitType` off, alert_only or stop_sync).
        case team(used: UInt64, allocated: UInt64, memberLimit: UInt64, memberLimitType: String)
        case other
    }
    /// The user's own usage ("The user's total space usage").
    public var used: UInt64
    public var allocation: Allocation

    public init(used: UInt64, allocation: Allocation) { self.used = used; self.allocation = allocation }

    /// What a filesystem should report: its size and how much of it is taken. For a personal
    /// account the allocation and the user's usage. For a team member, the team's allocation and
    /// the team's usage (every member's bytes count against it), or the member's own limit and
    /// usage where the admin set one, whichever leaves less free (Maestral's convert_space_usage
    /// reads the same fields).
    public var filesystem: (size: UInt64, used: UInt64) {
        switch allocation {
        case .individual(let allocated):
            return (allocated, min(used, allocated))
        case .team(let teamUsed, let teamAllocated, let memberLimit, let limitType):
            let teamFree = teamAllocated - min(teamUsed, teamAllocated)
            guard memberLimit > 0, limitType != "off" else { return (teamAllocated, teamAllocated - teamFree) }
            let free = min(memberLimit - min(used, memberLimit), teamFree)
            return (memberLimit, memberLimit - free)
        case .other:
            return (0, 0)
        }
    }

    public init(json: JSON) throws(DropboxError) {
        guard let used = json["used"]?.uint64 else { throw .unexpectedResponse("space usage without used") }
        self.used = used
        let a = json["allocation"]
        switch a?.tag {
        case "individual": allocation = .individual(allocated: a?["allocated"]?.uint64 ?? 0)
        case "team":
            allocation = .team(used: a?["used"]?.uint64 ?? 0, allocated: a?["allocated"]?.uint64 ?? 0,
                               memberLimit: a?["user_within_team_space_allocated"]?.uint64 ?? 0,
                               memberLimitType: a?["user_within_team_space_limit_type"]?.tag ?? "off")
        default: allocation = .other
        }
    }
}

/// Stone `PathRoot` (common.stone): which namespace paths, ids and cursors are relative to, sent
/// as the `Dropbox-API-Path-Root` header. Without it Dropbox uses the home namespace, where a
/// team member sees only their member folder (developers.dropbox.com/dbx-team-files-guide).
public enum PathRoot: Sendable, Equatable {
    case home
    /// The user's root namespace, checked by Dropbox: a stale one answers 422 invalid_root.
    case root(String)
    case namespaceID(String)

    /// The header value, e.g. `{".tag": "root", "root": "7"}`.
    public var headerValue: String {
        let json: JSON = switch self {
        case .home: [".tag": "home"]
        case .root(let ns): [".tag": "root", "root": .string(ns)]
        case .namespaceID(let ns): [".tag": "namespace_id", "namespace_id": .string(ns)]
        }
        return json.encoded(asciiOnly: true)
    }
}

/// Stone `ExportMetadata`: what `files/export` produced.
public struct ExportMetadata: Sendable, Equatable {
    /// The export's name, with the format's extension (`Plan.paper` exported as md: `Plan.md`).
    public var name: String
    public var size: UInt64
    public var exportHash: String?

    init(json: JSON) throws(DropboxError) {
        name = try json.required("name")
        guard let size = json["size"]?.uint64 else { throw .unexpectedResponse("export metadata without size") }
        self.size = size
        exportHash = json["export_hash"]?.string
    }
}

/// Timestamps in the API's only format, `2015-05-12T15:50:38Z` (UTC, whole seconds).
public enum DropboxTimestamp {
    public static func format(_ date: Date) -> String {
        let seconds = Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
        return seconds.formatted(.iso8601)
    }
    /// Parses exactly `YYYY-MM-DDTHH:MM:SSZ` by hand (the Foundation ISO 8601 parser is an order
    /// of magnitude slower, and listings decode thousands of these); anything else falls back
    /// to the lenient parser.
    public static func parse(_ text: String) -> Date? {
        if let date = text.utf8.withContiguousStorageIfAvailable(parseFixed) ?? Array(text.utf8).withUnsafeBufferPointer(parseFixed) {
            return date
        }
        return try? Date(text, strategy: .iso8601)
    }

    private static func parseFixed(_ b: UnsafeBufferPointer<UInt8>) -> Date? {
        guard b.count == 20, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] == UInt8(ascii: "T"),
              b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":"), b[19] == UInt8(ascii: "Z") else { return nil }
        func number(_ from: Int, _ count: Int) -> Int? {
            var value = 0
            for i in from..<from + count {
                let digit = Int(b[i]) - 48
                guard digit >= 0 && digit <= 9 else { return nil }
                value = value * 10 + digit
            }
            return value
        }
        guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
              let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        // Days from the civil date (Howard Hinnant's algorithm), proleptic Gregorian, UTC.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + hour * 3600 + minute * 60 + second))
    }
}

extension JSON {
    func required(_ key: String) throws(DropboxError) -> String {
        guard let value = self[key]?.string else { throw .unexpectedResponse("missing field \(key)") }
        return value
    }
    func requiredDate(_ key: String) throws(DropboxError) -> Date {
        let text = try required(key)
        guard let date = DropboxTimestamp.parse(text) else { throw .unexpectedResponse("bad timestamp \(key)=\(text)") }
        return date
    }
}

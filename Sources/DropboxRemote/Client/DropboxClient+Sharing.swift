/// Shared links: `sharing/create_shared_link_with_settings` (a link to a file or folder, with an
/// expiry and a password where the account allows) and `sharing/list_shared_links` (the links
/// that exist). sharing.stone: `CreateSharedLinkWithSettingsArg`, `SharedLinkSettings`,
/// `SharedLinkMetadata`, `LinkPermissions`, `CreateSharedLinkWithSettingsError`,
/// `SharedLinkSettingsError`, `ListSharedLinksArg`, `ListSharedLinksResult`.
///
/// `sharedLink(path:expires:password:)` is what a user means by "a link to this": it makes one,
/// or, when the file already has one (`shared_link_already_exists`), finds it with
/// list_shared_links (the error carries it only when no settings were asked for) and hands that
/// back, marked as reused. Errors come back as `SharedLinkFailure`, one case per reason the stone
/// union gives, so the command line can say each in a sentence.
import Foundation

/// sharing.stone `SharedLinkMetadata` (the fields a user sees).
public struct SharedLink: Sendable, Equatable {
    public var url: String
    public var name: String
    /// Lowercased path; present when the link is the user's and the item is in their Dropbox.
    public var pathLower: String?
    public var expires: Date?
    /// `LinkPermissions.require_password`, or a resolved visibility of `password`.
    public var passwordProtected: Bool
    /// `LinkPermissions.resolved_visibility` (public, team_only, password, ...), when given.
    public var visibility: String?
    /// True when the link existed before (found, not made).
    public var reused = false

    public init(json: JSON) throws(DropboxError) {
        url = try json.required("url")
        name = json["name"]?.string ?? ""
        pathLower = json["path_lower"]?.string
        expires = json["expires"]?.string.flatMap(DropboxTimestamp.parse)
        let permissions = json["link_permissions"]
        visibility = permissions?["resolved_visibility"]?.tag
        passwordProtected = permissions?["require_password"]?.bool == true || visibility == "password" || visibility == "team_and_password"
    }
}

/// Why Dropbox would not make (or find) a link, from CreateSharedLinkWithSettingsError.
public enum SharedLinkFailure: Error, Sendable, Equatable {
    /// `path`: the item is not there (or not readable: a LookupError).
    case path(LookupError)
    /// `email_not_verified`: "only available on accounts with a verified email address".
    case emailNotVerified
    /// `settings_error/not_authorized`: "basic users can only set RequestedVisibility.public ...
    /// and cannot set expires" (nor a password).
    case settingsNotAuthorized
    /// `settings_error/invalid_settings`: an expiry in the past, a password asked for but empty, ...
    case invalidSettings
    /// `access_denied`: the file is restricted, or the user's links are banned.
    case accessDenied
    /// `banned_member`: the user is banned from sharing for abuse.
    case bannedMember
    /// `too_many_shared_folders`.
    case tooManySharedFolders
    /// A link exists with other settings than those asked for (Dropbox keeps one link per item
    /// and its settings are changed elsewhere).
    case existsWithOtherSettings(SharedLink)
    /// Anything else: the call failed (network, rate limit, token, ...).
    case call(DropboxError)
}

extension DropboxClient {
    /// A link to the file or folder at `path` (path or `id:`): a new one with `expires` and
    /// `password` if given, or the one it already has. With settings, an existing link whose
    /// expiry or password differs is `existsWithOtherSettings` (the API does not change a link's
    /// settings on create).
    public func sharedLink(path: String, expires: Date? = nil, password: String? = nil) throws(SharedLinkFailure) -> SharedLink {
        var settings: [String: JSON] = [:]
        if let expires { settings["expires"] = .string(DropboxTimestamp.format(expires)) }
        if let password {
            settings["require_password"] = .bool(true)
            settings["link_password"] = .string(password)
            settings["requested_visibility"] = [".tag": "password"]
        }
        var arg: [String: JSON] = ["path": .string(path)]
        if !settings.isEmpty { arg["settings"] = .object(settings) }
        do throws(DropboxError) {
            return try SharedLink(json: call(.rpc("sharing/create_shared_link_with_settings", errors: .sharedLink), arg: .object(arg)))
        } catch .route(.other(tag: "shared_link_already_exists"), _) {
            let existing: [SharedLink]
            do throws(DropboxError) { existing = try listSharedLinks(path: path, directOnly: true) } catch { throw .call(error) }
            guard var link = existing.first else {
                throw .call(.unexpectedResponse("shared_link_already_exists, but list_shared_links names no link"))
            }
            link.reused = true
            if (expires != nil && link.expires != DropboxTimestamp.wholeSeconds(expires!)) || (password != nil && !link.passwordProtected) {
                throw .existsWithOtherSettings(link)
            }
            return link
        } catch {
            throw Self.sharedLinkFailure(error)
        }
    }

    /// The links to `path` (and, unless `directOnly`, to the folders it is in), or with no path
    /// every link of the user, following the cursor.
    public func listSharedLinks(path: String? = nil, directOnly: Bool = false) throws(DropboxError) -> [SharedLink] {
        var links: [SharedLink] = []
        var cursor: String?
        repeat {
            var arg: [String: JSON] = [:]
            if let path { arg["path"] = .string(path); arg["direct_only"] = .bool(directOnly) }
            if let cursor { arg["cursor"] = .string(cursor) }
            let page = try call(.rpc("sharing/list_shared_links", errors: .lookup), arg: .object(arg))
            for link in page["links"]?.array ?? [] { links.append(try SharedLink(json: link)) }
            cursor = page["has_more"]?.bool == true ? page["cursor"]?.string : nil
        } while cursor != nil
        return links
    }

    /// CreateSharedLinkWithSettingsError, one case per member.
    static func sharedLinkFailure(_ error: DropboxError) -> SharedLinkFailure {
        guard case .route(let route, _) = error else { return .call(error) }
        switch route {
        case .path(let lookup): return .path(lookup)
        case .other(tag: "email_not_verified"): return .emailNotVerified
        case .settingsError(let tag): return tag == "not_authorized" ? .settingsNotAuthorized : .invalidSettings
        case .other(tag: "access_denied"): return .accessDenied
        case .other(tag: "banned_member"): return .bannedMember
        case .other(tag: "too_many_shared_folders"): return .tooManySharedFolders
        default: return .call(error)
        }
    }
}

extension DropboxTimestamp {
    /// Dropbox keeps timestamps in whole seconds.
    static func wholeSeconds(_ date: Date) -> Date {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
    }
}

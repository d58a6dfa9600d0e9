/// The config file (`$XDG_CONFIG_HOME/dbxfs/config`, or `$DBXFS_CONFIG`): defaults for the
/// command line, one `key = value` per line. `#` starts a comment line; blank lines are ignored;
/// values may be quoted with "..." (to keep leading/trailing spaces). Keys are documented in
/// docs/CLI.md and the man page.
///
/// A missing file is an empty config. An unknown key, a bad value or an unbalanced quote is an
/// error naming the file and the line, so a typo never silently does nothing.
///
/// Paths (`ca_file`, `cache_dir`, `log_file`) may start with `~/` (the home directory); a relative
/// one is relative to the config file's own folder, not to wherever dbxfs happens to be started:
/// the daemon moves to `/` once detached, so every path is made absolute here, before that.
import Foundation
import VFSCache

struct ConfigFile: Sendable {
    struct Invalid: Error, CustomStringConvertible { var description: String }

    /// The keys and what command-line option each one is a default for.
    static let mountOptionKeys: [String: String] = [
        "api_base": "--api-base", "cache_dir": "--cache-dir", "cache_size": "--cache-size",
        "ca_file": "--ca-file", "log_level": "--log-level", "log_file": "--log-file", "root": "--root",
        "profile": "--profile", "max_threads": "--max-threads", "metrics": "--metrics",
        "metrics_allow_remote": "--metrics-allow-remote", "staging_budget": "--staging-budget",
    ]
    /// Keys that are not mount options.
    static let otherKeys: Set<String> = ["app_key", "mount_options", "sync_timeout"]
    /// Keys whose values are paths, made absolute when the file is read.
    static let pathKeys: Set<String> = ["ca_file", "cache_dir", "log_file"]

    /// The path it was read from (for messages).
    let path: String
    /// key → value, in file order for repeated keys the last one wins.
    private(set) var values: [String: String] = [:]

    subscript(key: String) -> String? { values[key] }

    static func load(paths: XDGPaths = XDGPaths()) throws(Invalid) -> ConfigFile {
        let path = PathArgument.absolute(paths.configFile)
        guard FileManager.default.fileExists(atPath: path) else { return ConfigFile(path: path) }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Invalid(description: "cannot read the config file \(path)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw Invalid(description: "the config file \(path) is not UTF-8")
        }
        return try parse(text, path: path, home: paths.home)
    }

    static func parse(_ text: String, path: String, home: String = XDGPaths().home) throws(Invalid) -> ConfigFile {
        var config = ConfigFile(path: path)
        let folder = (path as NSString).deletingLastPathComponent
        for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            let at = "\(path):\(number + 1)"
            guard let equals = line.firstIndex(of: "=") else {
                throw Invalid(description: "\(at): expected 'key = value', got '\(line)'")
            }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "-", with: "_")
            var value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            let opens = value.hasPrefix("\""), closes = value.count >= 2 && value.hasSuffix("\"")
            if opens && closes {
                value = String(value.dropFirst().dropLast())
            } else if opens || value.hasSuffix("\"") {
                throw Invalid(description: "\(at): unbalanced quote in \(value) (put \" at both ends of the value, or at neither)")
            }
            guard mountOptionKeys[key] != nil || otherKeys.contains(key) else {
                throw Invalid(description: "\(at): unknown key '\(key)' (see man dbxfs, FILES)")
            }
            try validate(key: key, value: value, at: at)
            if pathKeys.contains(key) { value = PathArgument.absolute(value, relativeTo: folder, home: home) }
            config.values[key] = value
        }
        return config
    }

    private static func validate(key: String, value: String, at: String) throws(Invalid) {
        switch key {
        case "cache_size":
            do throws(ByteSize.Invalid) { _ = try ByteSize.parse(value) }
            catch { throw Invalid(description: "\(at): cache_size: \(error.description)") }
        case "sync_timeout":
            guard let seconds = Double(value), seconds > 0 else { throw Invalid(description: "\(at): sync_timeout must be a number of seconds") }
        case "profile":
            guard CredentialStore.isValidProfileName(value) else {
                throw Invalid(description: "\(at): invalid profile name '\(value)' (letters, digits, '.', '_', '-')")
            }
        case "log_level":
            guard LogLevel(name: value) != nil else {
                throw Invalid(description: "\(at): unknown log_level '\(value)' (error, warning, info, debug)")
            }
        case "api_base":
            if let problem = APIBase.problem(value) { throw Invalid(description: "\(at): api_base \(problem)") }
        case "metrics":
            do throws(MetricsAddress.Invalid) { _ = try MetricsAddress.parse(value) }
            catch { throw Invalid(description: "\(at): metrics: \(error.description.replacingOccurrences(of: "invalid --metrics ", with: "invalid value "))") }
        case "metrics_allow_remote":
            guard boolean(value) != nil else { throw Invalid(description: "\(at): metrics_allow_remote must be yes or no") }
        case "root":
            guard value.hasPrefix("/") else { throw Invalid(description: "\(at): root must start with '/' (got '\(value)')") }
        default:
            guard !value.isEmpty else { throw Invalid(description: "\(at): \(key) has an empty value") }
        }
    }

    /// yes/no, true/false, on/off, 1/0 (nil: none of these).
    static func boolean(_ value: String) -> Bool? {
        switch value.lowercased() {
        case "yes", "true", "on", "1": true
        case "no", "false", "off", "0": false
        default: nil
        }
    }

    /// The mount command's defaults as arguments, to be put before the user's own (which then
    /// win, since later options override earlier ones).
    var mountArguments: [String] {
        var arguments: [String] = []
        for (key, value) in values.sorted(by: { $0.key < $1.key }) {
            if let option = Self.mountOptionKeys[key] { arguments.append("\(option)=\(value)") }
        }
        if let options = values["mount_options"] { arguments += ["-o", options] }
        return arguments
    }
}

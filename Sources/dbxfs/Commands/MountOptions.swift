/// The mount command's options, parsed from the command line and the environment.
/// `-o` options are split into the ones dbxfs applies itself (uid=, gid=, umask=) and the ones
/// passed through to libfuse and the kernel (ro, allow_other, default_permissions, ...).
/// `allow_other` (and `allow_root`) bring `default_permissions` with them: once other users may
/// enter the mount, the kernel must check the modes dbxfs shows, or `umask=077` would only look
/// private (docs/SEMANTICS.md, "Who can use a mount").
/// Path options are made absolute here (PathArgument): the daemon later moves to `/`.
import Foundation
import VFSCache

struct MountOptions: Sendable {
    struct UsageError: Error, CustomStringConvertible { var description: String }

    enum Backend: String, Sendable { case dropbox, memory }

    var mountpoint: String = ""
    var foreground = false
    var debug = false
    var apiBase: String?
    var root: String = ""
    /// `--member-folder`: on a team-space account, mount the member's own folder (their home
    /// namespace) instead of the team root (docs/SEMANTICS.md, "Team spaces").
    var memberFolder = false
    var tokenFile: String?
    var token: String?
    /// The stored account to mount (`dbxfs auth --profile`); nil: the default rules in
    /// Account/MountCredentials.swift.
    var profile: String?
    var cacheDirectory: String?
    /// `--wait-for-cache`: when another daemon holds the cache directory (Mount/CacheDirectoryLock),
    /// wait for it to exit instead of refusing.
    var waitForCache = false
    var cacheSize: UInt64 = 10 << 30
    var caFile: String?
    var logLevel: String = "info"
    var logFile: String?
    var backend: Backend = .dropbox
    var maxThreads: UInt32 = 64
    /// The kernel's read-ahead window for this mount, in KiB (0 = leave the kernel's 128 KiB).
    var kernelReadAheadKiB = 1024
    /// Hidden `--no-readdirplus`: plain readdir only (to measure what readdirplus saves).
    var readDirectoryPlus = true
    /// `--no-passthrough`: never let the kernel read or write files by itself (FUSE passthrough).
    var passthroughAllowed = true
    /// `--no-passthrough-writes`: writers always go through dbxfs.
    var passthroughWritesAllowed = true
    /// `--staging-budget SIZE`: no new writer is handed to the kernel while more than this waits
    /// for its upload (VFSConfig.stagingBudget).
    var stagingBudget: UInt64 = 4 << 30
    /// Passthrough reads are tried: allowed, a read-only mount, and running as root (registering
    /// a backing file with the kernel needs CAP_SYS_ADMIN); whether the kernel offers it is
    /// settled at INIT. Read-only, because the kernel requires every open of a file to use the
    /// same backing file while passthrough opens of it remain: a whole cached copy cannot take a
    /// writer's bytes (docs/SEMANTICS.md).
    var passthrough: Bool { passthroughAllowed && readOnly && geteuid() == 0 }
    /// Passthrough writes are tried: allowed, a writable mount, root. The backing file is the
    /// writer's staging file, so readers opened meanwhile share it (docs/WRITEBACK.md).
    var passthroughWrites: Bool { passthroughAllowed && passthroughWritesAllowed && !readOnly && geteuid() == 0 }
    /// Options for libfuse (`fuse_session_new`'s -o), already stripped of ours.
    var fuseOptions: [String] = []
    var uid: UInt32 = getuid()
    var gid: UInt32 = getgid()
    var umask: UInt16 = 0o022
    var readOnly = false
    var showHelp = false
    /// `--metrics ADDR:PORT`: serve the metrics there for Prometheus (Metrics/MetricsEndpoint).
    var metricsAddress: MetricsAddress?
    /// `--metrics-allow-remote`: `--metrics` may bind an address other than loopback.
    var metricsAllowRemote = false
    /// Hidden `--no-metrics`: keep no metrics at all (to measure what keeping them costs).
    var keepMetrics = true

    static let usage = """
        usage: dbxfs [options] MOUNTPOINT
               dbxfs COMMAND [options]      (auth, link, unlink, status, sync: see below)
               dbxfs --version

        Mounts a Dropbox account (or one folder of it) at MOUNTPOINT.

        options:
          -f, --foreground        stay in the foreground (default: return once the mount is live)
          -o OPT[,OPT...]         mount options: ro, allow_other, default_permissions,
                                  uid=N, gid=N, umask=NNN (octal), and other libfuse options
          --api-base URL          Dropbox API base URL (env DBXFS_API_BASE; default the real Dropbox)
          --root /FOLDER          mount this Dropbox folder as the root (default: the whole account;
                                  on a team space, the team root with its team folders)
          --member-folder         on a team space, mount only your member folder (paths and --root
                                  are then relative to it)
          --profile NAME          mount the account linked with 'dbxfs auth --profile NAME'
                                  (default: $DBXFS_ACCESS_TOKEN if set, else profile "default")
          --token-file FILE       read a bare access token from FILE (no refresh)
          --cache-dir DIR         cache directory (default $XDG_CACHE_HOME/dbxfs/<account+root hash>)
          --wait-for-cache        if another dbxfs uses the cache directory (for example one
                                  still uploading after unmount), wait for it to exit instead
                                  of refusing to mount
          --cache-size SIZE       on-disk block cache budget, e.g. 512M, 10G (default 10G)
          --ca-file PEM           also trust the CA certificates in PEM (for test servers)
          --log-level LEVEL       error, warning, info (default), debug
          --log-file FILE         where the daemon logs once detached (default CACHE_DIR/dbxfs.log)
          --kernel-read-ahead SIZE  kernel read-ahead for the mount (default 1M; root only; 0 = leave)
          --no-passthrough        never let the kernel read or write files by itself (FUSE
                                  passthrough; by default when root, Linux >= 6.9: reads of fully
                                  cached files on read-only mounts, writes on writable ones)
          --no-passthrough-writes writers always go through dbxfs (slower; see docs/WRITEBACK.md)
          --staging-budget SIZE   while more than SIZE waits for its upload, writes wait for
                                  the uploads (default 4G; see docs/SEMANTICS.md)
          --metrics ADDR:PORT     serve Prometheus metrics at http://ADDR:PORT/metrics (e.g.
                                  127.0.0.1:9101, or just a port; loopback only, see the next)
          --metrics-allow-remote  let --metrics listen on an address other than loopback
          -d, --debug             log every FUSE request (implies -f and --log-level debug)
          -h, --help              this text
          -V, --version           the version

        exit status: 0 mounted (and, with -f, unmounted cleanly), 1 the mount failed, 2 bad usage.
        """

    static func parse(_ arguments: [String], environment: [String: String]) throws(UsageError) -> MountOptions {
        var options = MountOptions()
        var positional: [String] = []
        var index = 0

        func value(for name: String, inline: String?) throws(UsageError) -> String {
            if let inline { return inline }
            index += 1
            guard index < arguments.count else { throw UsageError(description: "option \(name) needs a value") }
            return arguments[index]
        }

        while index < arguments.count {
            let argument = arguments[index]
            var name = argument
            var inline: String?
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            } else if argument.hasPrefix("-o"), argument.count > 2 {
                name = "-o"; inline = String(argument.dropFirst(2))
            }
            switch name {
            case "-f", "--foreground": options.foreground = true
            case "-d", "--debug": options.debug = true; options.foreground = true; options.logLevel = "debug"
            case "-h", "--help": options.showHelp = true
            case "-o": try options.addMountOptions(try value(for: name, inline: inline))
            case "--api-base": options.apiBase = try value(for: name, inline: inline)
            case "--root": options.root = try value(for: name, inline: inline)
            case "--member-folder": options.memberFolder = true
            case "--token-file": options.tokenFile = PathArgument.absolute(try value(for: name, inline: inline))
            case "--profile":
                let raw = try value(for: name, inline: inline)
                guard CredentialStore.isValidProfileName(raw) else {
                    throw UsageError(description: "invalid profile name '\(raw)' (letters, digits, '.', '_', '-')")
                }
                options.profile = raw
            case "--cache-dir": options.cacheDirectory = PathArgument.absolute(try value(for: name, inline: inline))
            case "--wait-for-cache":
                guard inline == nil else { throw UsageError(description: "option --wait-for-cache takes no value") }
                options.waitForCache = true
            case "--cache-size":
                let raw = try value(for: name, inline: inline)
                do throws(ByteSize.Invalid) { options.cacheSize = try ByteSize.parse(raw) }
                catch { throw UsageError(description: error.description) }
            case "--ca-file": options.caFile = PathArgument.absolute(try value(for: name, inline: inline))
            case "--log-level": options.logLevel = try value(for: name, inline: inline)
            case "--log-file": options.logFile = PathArgument.absolute(try value(for: name, inline: inline))
            case "--backend":
                // Hidden: `memory` mounts an in-memory stand-in to test the FUSE glue alone.
                let raw = try value(for: name, inline: inline)
                guard let backend = Backend(rawValue: raw) else { throw UsageError(description: "unknown backend '\(raw)'") }
                options.backend = backend
            case "--kernel-read-ahead":
                let raw = try value(for: name, inline: inline)
                do throws(ByteSize.Invalid) { options.kernelReadAheadKiB = Int(try ByteSize.parse(raw) / 1024) }
                catch { throw UsageError(description: error.description) }
            case "--no-readdirplus": options.readDirectoryPlus = false
            case "--no-passthrough": options.passthroughAllowed = false
            case "--no-passthrough-writes": options.passthroughWritesAllowed = false
            case "--staging-budget":
                let raw = try value(for: name, inline: inline)
                do throws(ByteSize.Invalid) { options.stagingBudget = try ByteSize.parse(raw) }
                catch { throw UsageError(description: error.description) }
            case "--metrics":
                let raw = try value(for: name, inline: inline)
                do throws(MetricsAddress.Invalid) { options.metricsAddress = try MetricsAddress.parse(raw) }
                catch { throw UsageError(description: error.description) }
            case "--metrics-allow-remote":
                // `=yes`/`=no` too, for the config file's metrics_allow_remote.
                guard let allowed = inline == nil ? true : ConfigFile.boolean(inline!) else {
                    throw UsageError(description: "invalid --metrics-allow-remote=\(inline ?? "") (yes or no)")
                }
                options.metricsAllowRemote = allowed
            case "--no-metrics": options.keepMetrics = false
            case "--max-threads":
                let raw = try value(for: name, inline: inline)
                guard let n = UInt32(raw), n >= 2 else { throw UsageError(description: "invalid --max-threads '\(raw)'") }
                options.maxThreads = n
            default:
                if argument.hasPrefix("-") && argument != "-" {
                    throw UsageError(description: "unknown option '\(argument)' (see dbxfs --help)")
                }
                positional.append(argument)
            }
            index += 1
        }
        if options.showHelp { return options }

        guard positional.count == 1 else {
            throw UsageError(description: positional.isEmpty ? "missing MOUNTPOINT (see dbxfs --help)"
                             : "too many arguments: \(positional.joined(separator: " "))")
        }
        options.mountpoint = positional[0]
        // The config file's api_base comes as an --api-base before the user's own.
        do throws(APIBase.Refused) { options.apiBase = try APIBase.chosen(option: options.apiBase, environment: environment) }
        catch { throw UsageError(description: error.description) }
        if options.tokenFile == nil, let token = environment["DBXFS_ACCESS_TOKEN"], !token.isEmpty {
            options.token = token
        }
        guard LogLevel(name: options.logLevel) != nil else {
            throw UsageError(description: "unknown log level '\(options.logLevel)' (error, warning, info, debug)")
        }
        options.root = try normalizedRoot(options.root)
        if let address = options.metricsAddress, !address.isLoopback, !options.metricsAllowRemote {
            throw UsageError(description: "--metrics \(address) is not a loopback address: anyone who can reach it could read "
                             + "this mount's metrics; add --metrics-allow-remote to serve them there anyway")
        }
        if options.metricsAddress != nil && !options.keepMetrics {
            throw UsageError(description: "--metrics and --no-metrics contradict each other")
        }
        if options.fuseOptions.contains(where: { $0 == "allow_other" || $0 == "allow_root" }),
           !options.fuseOptions.contains("default_permissions") {
            options.fuseOptions.append("default_permissions")
        }
        return options
    }

    /// "/Some/Folder/" → "/Some/Folder"; "" and "/" → "" (the account root).
    static func normalizedRoot(_ root: String) throws(UsageError) -> String {
        var trimmed = root
        while trimmed.hasSuffix("/") { trimmed.removeLast() }
        if trimmed.isEmpty { return "" }
        guard trimmed.hasPrefix("/") else { throw UsageError(description: "--root must start with '/' (got '\(root)')") }
        return trimmed
    }

    private mutating func addMountOptions(_ list: String) throws(UsageError) {
        for option in list.split(separator: ",").map(String.init) where !option.isEmpty {
            let parts = option.split(separator: "=", maxSplits: 1).map(String.init)
            switch parts[0] {
            case "uid":
                guard parts.count == 2, let uid = UInt32(parts[1]) else { throw UsageError(description: "invalid -o \(option)") }
                self.uid = uid
            case "gid":
                guard parts.count == 2, let gid = UInt32(parts[1]) else { throw UsageError(description: "invalid -o \(option)") }
                self.gid = gid
            case "umask":
                guard parts.count == 2, let umask = UInt16(parts[1], radix: 8), umask <= 0o777 else {
                    throw UsageError(description: "invalid -o \(option) (expected octal, e.g. umask=022)")
                }
                self.umask = umask
            case "ro":
                readOnly = true
                fuseOptions.append(option)
            case "rw":
                readOnly = false
                fuseOptions.removeAll { $0 == "ro" }
            // Options mount(8) passes that mean nothing to a FUSE mount.
            case "defaults", "auto", "noauto", "user", "nouser", "users", "_netdev", "nofail": break
            default:
                fuseOptions.append(option)
            }
        }
    }
}

extension LogLevel {
    /// `--log-level` names ("trace" is accepted as debug, "warn" as warning).
    init?(name: String) {
        switch name.lowercased() {
        case "error": self = .error
        case "warning", "warn": self = .warning
        case "info": self = .info
        case "debug", "trace": self = .debug
        default: return nil
        }
    }
}

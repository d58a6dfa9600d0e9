/// Checks the `-o` options libfuse will be given before anything else happens, so an option
/// libfuse does not know (`-o nosuchopt`) is bad usage (exit status 2, one line) and not a mount
/// that fails after it has forked, reached Dropbox and created its cache directory.
///
/// libfuse is the authority on its own options, so they are checked the way the mount will use
/// them: `fuse_session_new` parses them (and nothing more: no mount, no thread, no /dev/fuse), and
/// the session is destroyed at once. libfuse prints its complaint itself; it is caught through
/// `fuse_set_log_func` and turned into our one line. Options the kernel or fusermount3 refuse later
/// (`allow_other` without `user_allow_other` in /etc/fuse.conf) still fail at mount time.
import CFuse
import Foundation
import Synchronization

enum FuseOptionCheck {
    /// nil when libfuse accepts `mountOptions`, else the line to show.
    static func problem(mountOptions: [String], debug: Bool) -> String? {
        var cArguments = FuseSession.arguments(mountOptions: mountOptions, debug: debug).map { strdup($0) }
        defer { cArguments.forEach { free($0) } }
        var ops = fuse_lowlevel_ops()
        capturedMessages.withLock { $0 = "" }
        fuse_set_log_func(captureMessage)
        defer { fuse_set_log_func(nil) }
        let session: OpaquePointer? = cArguments.withUnsafeMutableBufferPointer { argv in
            var args = dbxfs_args_init(Int32(argv.count), argv.baseAddress)
            defer { fuse_opt_free_args(&args) }
            return fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, nil)
        }
        if let session {
            fuse_session_destroy(session)
            return nil
        }
        let said = capturedMessages.withLock { $0 }.trimmingCharacters(in: .whitespacesAndNewlines)
        // libfuse: "fuse: unknown option(s): `-o nosuchopt'"
        if let start = said.range(of: "`-o "), let end = said.range(of: "'", range: start.upperBound..<said.endIndex) {
            let unknown = said[start.upperBound..<end.lowerBound]
            return "unknown mount option -o \(unknown) (see dbxfs --help and man mount.fuse3 for the options there are)"
        }
        let reason = said.isEmpty ? "libfuse refused them" : said.replacingOccurrences(of: "\n", with: "; ")
        return "bad mount options -o \(mountOptions.joined(separator: ",")): \(reason)"
    }

    /// What libfuse said during the check (its log callback has no context argument).
    private static let capturedMessages = Mutex<String>("")

    private static let captureMessage: fuse_log_func_t = { _, format, arguments in
        guard let format, let arguments else { return }
        var buffer = [CChar](repeating: 0, count: 1024)
        _ = vsnprintf(&buffer, buffer.count, format, arguments)
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        FuseOptionCheck.capturedMessages.withLock { $0 += text }
    }
}

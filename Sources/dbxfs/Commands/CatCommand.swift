/// `dbxfs cat --rev REV PATH`: writes an old revision of a file on the mount to stdout, without
/// changing the current one (keep it beside the file with `dbxfs cat --rev REV f > f.old`). The
/// daemon streams the revision from Dropbox (Control/ControlClient+Stream.swift); the bytes are
/// checked against the revision's content hash, and a stream that breaks off is an error.
import ContentHash
import Foundation

enum CatCommand {
    static let usage = """
        usage: dbxfs cat --rev REV PATH

        Writes revision REV of the file at PATH (on a dbxfs mount) to standard output, without
        changing the file. REV is one of the revisions dbxfs history PATH lists; PATH may be a
        deleted file.

        options:
          --rev REV           the revision (required)
          -h, --help          this text

        exit status: 0 written (and its content hash checked), 1 failed (no such revision,
        Dropbox cannot be reached, the download broke off), 2 bad usage, 3 PATH is not on a
        dbxfs mount.
        """

    static let subcommand = Subcommand(name: "cat", summary: "write an old revision of a file to stdout", run: run)

    static func run(_ arguments: [String]) -> Int32 {
        let options: FileCommand.Arguments, target: MountPath
        switch FileCommand.prepare(arguments, command: "cat", usage: usage, accepts: ["--rev"], requiresRev: true,
                                   refuse: FileCommand.refuseFolder) {
        case .exit(let status): return status
        case .value(let prepared): (options, target) = prepared
        }
        let rev = options.rev ?? ""
        let output = FileHandle.standardOutput
        var hasher = DropboxContentHasher()
        var written: UInt64 = 0
        let header: CatHeader
        do {
            header = try ControlClient.stream(ControlRequest(command: "cat", file: FileRequest(path: target.relative, rev: rev)),
                                              socket: target.socket, timeout: 600) { bytes in
                hasher.update(bytes)
                written += UInt64(bytes.count)
                do { try output.write(contentsOf: Data(bytes)) } catch { return false }
                return true
            }
        } catch {
            printError(FileCommand.sentence(error, command: "cat", target: target))
            return error.notMounted ? 3 : 1
        }
        guard written == header.size else {
            printError("the revision \(rev) of \(target.shown) broke off after \(written) of \(header.size) bytes (the mount's log says why); what was written is incomplete")
            return 1
        }
        if let expected = header.contentHash, hasher.finalize() != expected {
            printError("the bytes of revision \(rev) of \(target.shown) do not match its content hash: what was written is damaged")
            return 1
        }
        return 0
    }
}

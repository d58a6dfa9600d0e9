/// dbxfs's entry point: picks the subcommand and runs it. `dbxfs [options] MOUNTPOINT` (no
/// subcommand) mounts. Other subcommands (auth, unlink, status, sync) register in
/// `Subcommand.all`, one file each under Commands/.
import CFuse
import Foundation

// Reads move 1 MiB replies and 4 MiB blocks through freshly allocated buffers. Above glibc's
// default mmap threshold each of those is an mmap + page faults + zeroing + munmap, which cost
// more CPU than the copy itself (measured with perf on a cold 1 GiB read). Keeping them on the
// heap lets freed buffers be reused.
dbxfs_tune_malloc(64 << 20, 256 << 20)

let arguments = Array(CommandLine.arguments.dropFirst())
exit(Subcommand.run(arguments))

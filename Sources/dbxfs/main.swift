/// dbxfs's entry point: picks the subcommand and runs it. `dbxfs [options] MOUNTPOINT` (no
/// subcommand) mounts. Other subcommands (auth, unlink, status, sync) register in
/// `Subcommand.all`, one file each under Commands/.
import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
exit(Subcommand.run(arguments))

"""scripts/bench-vs-rclone: dbxfs and `rclone mount` side by side on one emulator over TLS.

Modules: `network` (the private namespace with Dropbox's real host names and a test CA),
`server` (the shared emulator, network profiles, the harness's own calls kept out of the counts),
`clients` (mounting dbxfs and rclone, their CPU, memory and upload queues), `direct` (plain HTTP
clients and curl: the limits), `fixtures` (the local files and server trees the workloads use),
`workloads` (one function per measured case), `report` (medians and the table), `main` (the
command line and the run). docs/BENCHMARKS.md ("dbxfs against rclone") says how to read it.
"""

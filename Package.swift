// swift-tools-version:6.0
// dbxfs: a FUSE3 filesystem for Dropbox.
//
// Layers, bottom up (each in its own folder under Sources/):
//   C shims      CFuse (+ CFusePassthrough), CCurl + CCurlShim, CCrypto, CSQLite: module maps over
//                Debian's -dev packages, and three small C targets for what Swift cannot call
//                directly (CFusePassthrough, CCurlShim, CFileSync).
//   ContentHash  Dropbox's 4 MiB-block content hash and secure random bytes (libcrypto).
//   DropboxRemote  the Dropbox API v2 client over libcurl. Knows nothing of FUSE.
//   VFSCache     inodes, metadata cache, block cache, write-back, upload journal. No FUSE, no HTTP:
//                it reaches Dropbox only through the `RemoteStore` protocol.
//   dbxfs        the command line and the thin FUSE glue.
import PackageDescription

let package = Package(
    name: "dbxfs",
    products: [
        .executable(name: "dbxfs", targets: ["dbxfs"]),
    ],
    targets: [
        .systemLibrary(name: "CFuse", pkgConfig: "fuse3", providers: [.apt(["libfuse3-dev"])]),
        .target(name: "CFusePassthrough", dependencies: ["CFuse"]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .target(name: "CCurlShim", dependencies: ["CCurl"]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),

        .target(name: "ContentHash", dependencies: ["CCrypto"]),
        .target(name: "DropboxRemote", dependencies: ["CCurlShim", "ContentHash"]),
        .target(name: "CFileSync"),
        .target(name: "VFSCache", dependencies: ["CSQLite", "CCrypto", "CFileSync", "ContentHash"]),
        .executableTarget(name: "dbxfs", dependencies: ["CFuse", "CFusePassthrough", "DropboxRemote", "VFSCache"]),
        .executableTarget(name: "dbxfs-client-bench", dependencies: ["DropboxRemote"]),

        .testTarget(name: "ContentHashTests", dependencies: ["ContentHash"]),
        .testTarget(name: "DropboxRemoteTests", dependencies: ["DropboxRemote"]),
        .testTarget(name: "VFSCacheTests", dependencies: ["VFSCache"]),
        .testTarget(name: "dbxfsTests", dependencies: ["dbxfs", "DropboxRemote", "VFSCache"]),
    ]
)

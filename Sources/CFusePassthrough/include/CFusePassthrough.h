/* FUSE passthrough (Linux >= 6.9) over libfuse 3.14, which predates it.
 *
 * With passthrough, the kernel serves reads of an open file straight from a "backing" file the
 * daemon names (a whole, verified copy in the disk cache; a writer's staging file), at local-file
 * speed, without a FUSE round trip per read or write. libfuse 3.14 can neither ask for it in INIT nor say it in an open
 * reply, so this shim installs libfuse's custom I/O hooks and edits those two replies on their
 * way to /dev/fuse: INIT gets FUSE_PASSTHROUGH (only when the kernel offered it) and a stack
 * depth of 1; the one open reply a thread marks gets FOPEN_PASSTHROUGH and the backing id.
 * Everything else passes through unchanged. Registering a backing file needs CAP_SYS_ADMIN.
 *
 * The decisions (which opens, which file, the per-inode rules) live in Swift
 * (Sources/dbxfs/Fuse/PassthroughOpens.swift); this file only moves bytes. */
#ifndef DBXFS_CFUSE_PASSTHROUGH_H
#define DBXFS_CFUSE_PASSTHROUGH_H
#include <stdbool.h>

/* The libfuse types are passed as plain pointers (struct fuse_session *, fuse_req_t,
 * const struct fuse_file_info *), so this header does not include libfuse's a second time next to
 * CFuse's: Swift would see two unrelated copies of every libfuse type. */

/* Installs the I/O hooks on a mounted session, before its loop starts. 0, or -errno. */
int dbxfs_passthrough_install(void *session);

/* Whether INIT negotiated passthrough (the kernel offered it and the reply asked for it). */
bool dbxfs_passthrough_negotiated(void);

/* Registers `fd` as a backing file; the id (> 0), or -errno. The kernel keeps its own reference,
 * so the caller may close `fd` afterwards. */
int dbxfs_passthrough_backing_open(void *session, int fd);

/* Forgets a backing id once no open that uses it is left. 0, or -errno. */
int dbxfs_passthrough_backing_close(void *session, int backing_id);

/* fuse_reply_open, with FOPEN_PASSTHROUGH and `backing_id` in the reply. */
int dbxfs_passthrough_reply_open(void *req, const void *fi, int backing_id);

/* fuse_reply_create (`entry`: a const struct fuse_entry_param *), with FOPEN_PASSTHROUGH and
 * `backing_id` in its open part (a passthrough write of a new file). */
int dbxfs_passthrough_reply_create(void *req, const void *entry, const void *fi, int backing_id);

#endif

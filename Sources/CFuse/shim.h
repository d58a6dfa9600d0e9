/* Imports libfuse3's low-level API into Swift.
 * FUSE_USE_VERSION must be set before the include (fuse_lowlevel.h stops with #error otherwise).
 * Function-like macros, bit-field structs and #define'd flags are awkward or invisible in Swift,
 * so each one the glue needs gets a static inline twin or a typed constant here. Nothing in this
 * file holds state or decides anything: the decisions live in Sources/dbxfs/Fuse. */
#ifndef DBXFS_CFUSE_SHIM_H
#define DBXFS_CFUSE_SHIM_H
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <stdbool.h>
#include <malloc.h>

/* --- Session loop --------------------------------------------------------------------------- */

/* `fuse_session_loop_mt` is a macro that picks the 3.12 ABI symbol for our FUSE_USE_VERSION. */
static inline int dbxfs_session_loop_mt(struct fuse_session *se, struct fuse_loop_config *config) {
    return fuse_session_loop_mt(se, config);
}

/* FUSE_ARGS_INIT is a brace initializer; Swift needs a function. */
static inline struct fuse_args dbxfs_args_init(int argc, char **argv) {
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    return args;
}

/* --- Connection capabilities (init) ---------------------------------------------------------- */

static const unsigned DBXFS_CAP_ASYNC_READ = FUSE_CAP_ASYNC_READ;
static const unsigned DBXFS_CAP_ATOMIC_O_TRUNC = FUSE_CAP_ATOMIC_O_TRUNC;
static const unsigned DBXFS_CAP_PARALLEL_DIROPS = FUSE_CAP_PARALLEL_DIROPS;
static const unsigned DBXFS_CAP_READDIRPLUS = FUSE_CAP_READDIRPLUS;
static const unsigned DBXFS_CAP_READDIRPLUS_AUTO = FUSE_CAP_READDIRPLUS_AUTO;
static const unsigned DBXFS_CAP_AUTO_INVAL_DATA = FUSE_CAP_AUTO_INVAL_DATA;
static const unsigned DBXFS_CAP_EXPLICIT_INVAL_DATA = FUSE_CAP_EXPLICIT_INVAL_DATA;
static const unsigned DBXFS_CAP_WRITEBACK_CACHE = FUSE_CAP_WRITEBACK_CACHE;
static const unsigned DBXFS_CAP_SPLICE_READ = FUSE_CAP_SPLICE_READ;
static const unsigned DBXFS_CAP_SPLICE_WRITE = FUSE_CAP_SPLICE_WRITE;
static const unsigned DBXFS_CAP_SPLICE_MOVE = FUSE_CAP_SPLICE_MOVE;
static const unsigned DBXFS_CAP_POSIX_LOCKS = FUSE_CAP_POSIX_LOCKS;
static const unsigned DBXFS_CAP_FLOCK_LOCKS = FUSE_CAP_FLOCK_LOCKS;

/* Turns a capability on if the kernel offers it; returns whether it is now on.
 * (libfuse 3.14 has no fuse_set_feature_flag: `want` must stay a subset of `capable`.) */
static inline bool dbxfs_conn_want(struct fuse_conn_info *conn, unsigned cap) {
    if (conn->capable & cap) { conn->want |= cap; return true; }
    return false;
}

static inline void dbxfs_conn_unwant(struct fuse_conn_info *conn, unsigned cap) {
    conn->want &= ~cap;
}

/* --- setattr's to_set bits -------------------------------------------------------------------- */

static const int DBXFS_SET_ATTR_MODE = FUSE_SET_ATTR_MODE;
static const int DBXFS_SET_ATTR_UID = FUSE_SET_ATTR_UID;
static const int DBXFS_SET_ATTR_GID = FUSE_SET_ATTR_GID;
static const int DBXFS_SET_ATTR_SIZE = FUSE_SET_ATTR_SIZE;
static const int DBXFS_SET_ATTR_ATIME = FUSE_SET_ATTR_ATIME;
static const int DBXFS_SET_ATTR_MTIME = FUSE_SET_ATTR_MTIME;
static const int DBXFS_SET_ATTR_ATIME_NOW = FUSE_SET_ATTR_ATIME_NOW;
static const int DBXFS_SET_ATTR_MTIME_NOW = FUSE_SET_ATTR_MTIME_NOW;

/* renameat2 flags (from linux/fs.h, which clashes with glibc headers if included here). */
static const unsigned DBXFS_RENAME_NOREPLACE = 1u << 0;
static const unsigned DBXFS_RENAME_EXCHANGE = 1u << 1;
static const unsigned DBXFS_RENAME_WHITEOUT = 1u << 2;

/* --- fuse_file_info bit-fields ----------------------------------------------------------------- */

static inline void dbxfs_fi_set_keep_cache(struct fuse_file_info *fi, bool on) { fi->keep_cache = on ? 1 : 0; }
static inline void dbxfs_fi_set_direct_io(struct fuse_file_info *fi, bool on) { fi->direct_io = on ? 1 : 0; }
static inline void dbxfs_fi_set_cache_readdir(struct fuse_file_info *fi, bool on) { fi->cache_readdir = on ? 1 : 0; }

/* --- Process helpers for daemonizing ------------------------------------------------------------ */

/* Swift marks fork() unavailable on some platforms; the daemon path forks before any thread
 * starts, which is the one safe moment. */
/* Starts `path` as the leader of a new session (the detached mount daemon), with `close_fd`
 * closed in it. A spawned process, not a fork: the Swift runtime caches each thread's id in a
 * thread-local for its locks, so a forked child's main thread would lock with its parent's id,
 * and a lock it then shares with another thread spins forever (Sources/dbxfs/Mount/Daemon.swift). */
static inline int dbxfs_spawn_session(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                                      int close_fd) {
    posix_spawnattr_t attributes;
    posix_spawn_file_actions_t actions;
    if (posix_spawnattr_init(&attributes) != 0) return -1;
#ifdef POSIX_SPAWN_SETSID
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID);
#else
    posix_spawnattr_setflags(&attributes, 0x80);   /* glibc's POSIX_SPAWN_SETSID, shown only under _GNU_SOURCE */
#endif
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addclose(&actions, close_fd);
    int result = posix_spawn(pid, path, &actions, &attributes, argv, envp);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    return result;
}

/* Keeps large buffers (1 MiB replies, 4 MiB blocks) on the heap instead of a fresh mmap each:
 * see main.swift for the measurement. malloc.h is not part of Swift's Glibc module. */
static inline void dbxfs_tune_malloc(int mmap_threshold, int trim_threshold) {
    mallopt(M_MMAP_THRESHOLD, mmap_threshold);
    mallopt(M_TRIM_THRESHOLD, trim_threshold);
}

/* st_mode file type bits, as plain constants. */
static const mode_t DBXFS_S_IFREG = S_IFREG;
static const mode_t DBXFS_S_IFDIR = S_IFDIR;

#endif

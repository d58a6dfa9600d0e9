/* onefile.h: what the benchmark filesystems (memfs.c, httpfs.c, sinkfs.c) share. Each serves one
 * file, /data, and is set up like dbxfs, so the comparison is like for like: low-level API,
 * multi-threaded loop (16 threads), 1 MiB requests through max_write (libfuse then asks for
 * FUSE_MAX_PAGES itself), async reads, 64 background requests.
 *
 * memfs and httpfs also share the read-only namespace: the root folder and /data, of
 * `onefile_size` bytes, mode 0444, attributes valid for 60 s. sinkfs has its own (writable).
 */
#ifndef ONEFILE_H
#define ONEFILE_H
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#define ONEFILE_UNUSED __attribute__((unused))

static unsigned onefile_request_size = 1u << 20;
static off_t onefile_size;

static void onefile_init(void *userdata, struct fuse_conn_info *conn) {
    (void)userdata;
    if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
    conn->max_write = onefile_request_size;
    conn->max_read = 0;
    conn->max_background = 64;
    conn->congestion_threshold = 48;
}

static ONEFILE_UNUSED void onefile_stat(fuse_ino_t ino, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino == 1) { st->st_mode = S_IFDIR | 0755; st->st_nlink = 2; }
    else { st->st_mode = S_IFREG | 0444; st->st_nlink = 1; st->st_size = onefile_size; }
}

static ONEFILE_UNUSED void onefile_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    if (parent != 1 || strcmp(name, "data") != 0) { fuse_reply_err(req, ENOENT); return; }
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = 2; e.attr_timeout = 60; e.entry_timeout = 60;
    onefile_stat(2, &e.attr);
    fuse_reply_entry(req, &e);
}

static ONEFILE_UNUSED void onefile_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    struct stat st;
    if (ino != 1 && ino != 2) { fuse_reply_err(req, ENOENT); return; }
    onefile_stat(ino, &st);
    fuse_reply_attr(req, &st, 60);
}

/* Mounts at `mountpoint` with `-o options`, answers requests until unmounted, then cleans up.
 * `ops.init` is set here. Returns the exit status. */
static int onefile_run(char *program, const char *mountpoint, char *options, struct fuse_lowlevel_ops *ops) {
    ops->init = onefile_init;
    char *args_v[] = { program, "-o", options, NULL };
    struct fuse_args args = FUSE_ARGS_INIT(3, args_v);
    struct fuse_session *se = fuse_session_new(&args, ops, sizeof *ops, NULL);
    if (!se) return 1;
    if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, mountpoint) != 0) return 1;
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(config, 16);
    int ret = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return ret ? 1 : 0;
}
#endif

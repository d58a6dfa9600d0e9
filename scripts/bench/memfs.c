/* memfs: the smallest FUSE filesystem that serves one file, /data, from memory. It measures the
 * kernel's FUSE ceiling on this machine: a cold sequential read through it costs only the FUSE
 * round trips and copies, no network and no cache logic. scripts/bench-read compares dbxfs with it.
 *
 * It is set up like dbxfs (low-level API, multi-threaded loop, 1 MiB requests through
 * max_write/FUSE_MAX_PAGES, async reads), so the comparison is like for like. The bytes are a
 * repeating 1 MiB pattern, so any size costs 1 MiB of memory.
 *
 *   cc -O2 -o memfs memfs.c $(pkg-config --cflags --libs fuse3)
 *   memfs MOUNTPOINT SIZE_MIB [REQUEST_KIB]      (foreground; fusermount3 -u to stop)
 */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PATTERN_SIZE (1u << 20)
static char pattern[PATTERN_SIZE];
static off_t file_size;
static unsigned request_size = 1u << 20;

static void fill_stat(fuse_ino_t ino, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino == 1) { st->st_mode = S_IFDIR | 0755; st->st_nlink = 2; }
    else { st->st_mode = S_IFREG | 0444; st->st_nlink = 1; st->st_size = file_size; }
}

static void op_init(void *userdata, struct fuse_conn_info *conn) {
    (void)userdata;
    if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
    conn->max_write = request_size;
    conn->max_read = 0;
    conn->max_background = 64;
    conn->congestion_threshold = 48;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    if (parent != 1 || strcmp(name, "data") != 0) { fuse_reply_err(req, ENOENT); return; }
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = 2; e.attr_timeout = 60; e.entry_timeout = 60;
    fill_stat(2, &e.attr);
    fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    struct stat st;
    if (ino != 1 && ino != 2) { fuse_reply_err(req, ENOENT); return; }
    fill_stat(ino, &st);
    fuse_reply_attr(req, &st, 60);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    if (ino != 2) { fuse_reply_err(req, EISDIR); return; }
    fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)ino; (void)fi;
    if (off >= file_size) { fuse_reply_buf(req, NULL, 0); return; }
    if ((off_t)size > file_size - off) size = (size_t)(file_size - off);
    /* Up to two iovecs: the pattern wraps at most once for requests <= PATTERN_SIZE. */
    size_t start = (size_t)(off % PATTERN_SIZE);
    struct iovec iov[2];
    int n = 0;
    size_t first = size < PATTERN_SIZE - start ? size : PATTERN_SIZE - start;
    iov[n].iov_base = pattern + start; iov[n].iov_len = first; n++;
    if (size > first) { iov[n].iov_base = pattern; iov[n].iov_len = size - first; n++; }
    fuse_reply_iov(req, iov, n);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s MOUNTPOINT SIZE_MIB [REQUEST_KIB]\n", argv[0]); return 2; }
    file_size = (off_t)atoll(argv[2]) << 20;
    if (argc > 3) request_size = (unsigned)atoi(argv[3]) << 10;
    for (unsigned i = 0; i < PATTERN_SIZE; i++) pattern[i] = (char)(i * 2654435761u >> 24);

    struct fuse_lowlevel_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.init = op_init; ops.lookup = op_lookup; ops.getattr = op_getattr;
    ops.open = op_open; ops.read = op_read;

    char *args_v[] = { argv[0], "-o", "fsname=memfs,ro", NULL };
    struct fuse_args args = FUSE_ARGS_INIT(3, args_v);
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!se) return 1;
    if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, argv[1]) != 0) return 1;
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(config, 16);
    int ret = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return ret ? 1 : 0;
}

/* sinkfs: the smallest writable FUSE filesystem, for scripts/bench-write. It holds one file,
 * /data, whose writes are acknowledged and thrown away (only the size is kept), so writing
 * through it costs only the FUSE round trips and copies: the kernel's FUSE write ceiling on this
 * machine. It is set up like dbxfs (onefile.h), so the comparison is like for like.
 *
 *   cc -O2 -o sinkfs sinkfs.c $(pkg-config --cflags --libs fuse3)
 *   sinkfs MOUNTPOINT            (foreground; fusermount3 -u to stop)
 */
#include "onefile.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static off_t file_size;
static int file_exists;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void fill_stat(fuse_ino_t ino, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino == 1) { st->st_mode = S_IFDIR | 0755; st->st_nlink = 2; }
    else { st->st_mode = S_IFREG | 0644; st->st_nlink = 1; pthread_mutex_lock(&lock); st->st_size = file_size; pthread_mutex_unlock(&lock); }
}

static void reply_entry(fuse_req_t req) {
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = 2; e.attr_timeout = 1; e.entry_timeout = 1;
    fill_stat(2, &e.attr);
    fuse_reply_entry(req, &e);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    if (parent != 1 || strcmp(name, "data") != 0 || !file_exists) { fuse_reply_err(req, ENOENT); return; }
    reply_entry(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    struct stat st;
    if (ino != 1 && ino != 2) { fuse_reply_err(req, ENOENT); return; }
    fill_stat(ino, &st);
    fuse_reply_attr(req, &st, 1);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi) {
    (void)fi;
    if (ino == 2 && (to_set & FUSE_SET_ATTR_SIZE)) { pthread_mutex_lock(&lock); file_size = attr->st_size; pthread_mutex_unlock(&lock); }
    struct stat st;
    fill_stat(ino, &st);
    fuse_reply_attr(req, &st, 1);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi) {
    (void)mode;
    if (parent != 1 || strcmp(name, "data") != 0) { fuse_reply_err(req, EPERM); return; }
    pthread_mutex_lock(&lock); file_exists = 1; file_size = 0; pthread_mutex_unlock(&lock);
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = 2; e.attr_timeout = 1; e.entry_timeout = 1;
    fill_stat(2, &e.attr);
    fuse_reply_create(req, &e, fi);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    if (ino != 2) { fuse_reply_err(req, EISDIR); return; }
    if (fi->flags & O_TRUNC) { pthread_mutex_lock(&lock); file_size = 0; pthread_mutex_unlock(&lock); }
    fuse_reply_open(req, fi);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)ino; (void)buf; (void)fi;
    pthread_mutex_lock(&lock);
    if (off + (off_t)size > file_size) file_size = off + (off_t)size;
    pthread_mutex_unlock(&lock);
    fuse_reply_write(req, size);
}

static void op_ok(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) { (void)ino; (void)fi; fuse_reply_err(req, 0); }
static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) { (void)datasync; op_ok(req, ino, fi); }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s MOUNTPOINT\n", argv[0]); return 2; }
    struct fuse_lowlevel_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.lookup = op_lookup; ops.getattr = op_getattr; ops.setattr = op_setattr;
    ops.create = op_create; ops.open = op_open; ops.write = op_write;
    ops.flush = op_ok; ops.release = op_ok; ops.fsync = op_fsync;
    return onefile_run(argv[0], argv[1], "fsname=sinkfs", &ops);
}

/* memfs: the smallest FUSE filesystem that serves one file, /data, from memory. It measures the
 * kernel's FUSE ceiling on this machine: a cold sequential read through it costs only the FUSE
 * round trips and copies, no network and no cache logic. scripts/bench-read compares dbxfs with it.
 *
 * It is set up like dbxfs (onefile.h), so the comparison is like for like. The bytes are a
 * repeating 1 MiB pattern, so any size costs 1 MiB of memory.
 *
 *   cc -O2 -o memfs memfs.c $(pkg-config --cflags --libs fuse3)
 *   memfs MOUNTPOINT SIZE_MIB [REQUEST_KIB]      (foreground; fusermount3 -u to stop)
 */
#include "onefile.h"
#include <stdio.h>
#include <stdlib.h>

#define PATTERN_SIZE (1u << 20)
static char pattern[PATTERN_SIZE];

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    if (ino != 2) { fuse_reply_err(req, EISDIR); return; }
    fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)ino; (void)fi;
    if (off >= onefile_size) { fuse_reply_buf(req, NULL, 0); return; }
    if ((off_t)size > onefile_size - off) size = (size_t)(onefile_size - off);
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
    onefile_size = (off_t)atoll(argv[2]) << 20;
    if (argc > 3) onefile_request_size = (unsigned)atoi(argv[3]) << 10;
    for (unsigned i = 0; i < PATTERN_SIZE; i++) pattern[i] = (char)(i * 2654435761u >> 24);

    struct fuse_lowlevel_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.lookup = onefile_lookup; ops.getattr = onefile_getattr; ops.open = op_open; ops.read = op_read;
    return onefile_run(argv[0], argv[1], "fsname=memfs,ro", &ops);
}

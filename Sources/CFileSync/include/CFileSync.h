/* Linux file calls Swift cannot reach through its Glibc module: sync_file_range and its flags are
 * declared only under _GNU_SOURCE, which that module is built without. */
#ifndef DBXFS_CFILESYNC_H
#define DBXFS_CFILESYNC_H
#include <stdint.h>

/* Starts the disk writeback of `count` bytes of `fd` from `offset` without waiting for it
 * (sync_file_range with SYNC_FILE_RANGE_WRITE only: nothing is made durable by this). 0, or -errno. */
int dbxfs_start_writeback(int fd, int64_t offset, int64_t count);

#endif

/* See include/CFileSync.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include "CFileSync.h"

int dbxfs_start_writeback(int fd, int64_t offset, int64_t count) {
    return sync_file_range(fd, offset, count, SYNC_FILE_RANGE_WRITE) == 0 ? 0 : -errno;
}

/* See include/CFusePassthrough.h. The layouts below are the kernel's FUSE protocol
 * (include/uapi/linux/fuse.h, protocol 7.40 and later), which libfuse 3.14's own copy predates. */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include "CFusePassthrough.h"
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#define FUSE_INIT_OPCODE 26
#define FUSE_INIT_EXT_FLAG (1u << 30)
#define FUSE_PASSTHROUGH_FLAGS2 (1u << 5)        /* FUSE_PASSTHROUGH = 1ULL << 37 */
#define FOPEN_PASSTHROUGH_FLAG (1u << 7)
#define OUT_HEADER_SIZE 16
#define INIT_OUT_SIZE 64                         /* struct fuse_init_out, minor >= 23 */
#define INIT_OUT_FLAGS 12
#define INIT_OUT_FLAGS2 32
#define INIT_OUT_MAX_STACK_DEPTH 36
#define OPEN_OUT_SIZE 16                         /* struct fuse_open_out */
#define ENTRY_OUT_SIZE 128                       /* struct fuse_entry_out, before a create's open_out */
#define OPEN_OUT_FLAGS 8
#define OPEN_OUT_BACKING_ID 12
#define IN_HEADER_OPCODE 4                       /* struct fuse_in_header: len, opcode, ... */
#define IN_HEADER_SIZE 40
#define INIT_IN_FLAGS 12                         /* struct fuse_init_in: major, minor, max_readahead, flags */
#define INIT_IN_FLAGS2 16
/* _IOW(229, 1, struct fuse_backing_map) and _IOW(229, 2, uint32_t) */
#define FUSE_DEV_IOC_BACKING_OPEN 0x4010e501u
#define FUSE_DEV_IOC_BACKING_CLOSE 0x4004e502u

struct backing_map { int32_t fd; uint32_t flags; uint64_t padding; };

static volatile int kernel_offers = 0;   /* set while reading INIT, before any reply is written */
static volatile int negotiated = 0;
static volatile int init_answered = 0;
static __thread int32_t pending_backing_id = 0;
static __thread size_t pending_open_at = 0;      /* where the fuse_open_out starts in the reply */

static ssize_t hook_read(int fd, void *buf, size_t len, void *userdata) {
    (void)userdata;
    ssize_t n = read(fd, buf, len);
    if (!init_answered && n >= IN_HEADER_SIZE + INIT_IN_FLAGS2 + 4) {
        const char *bytes = buf;
        uint32_t opcode, flags, flags2;
        memcpy(&opcode, bytes + IN_HEADER_OPCODE, 4);
        if (opcode == FUSE_INIT_OPCODE) {
            memcpy(&flags, bytes + IN_HEADER_SIZE + INIT_IN_FLAGS, 4);
            memcpy(&flags2, bytes + IN_HEADER_SIZE + INIT_IN_FLAGS2, 4);
            kernel_offers = (flags & FUSE_INIT_EXT_FLAG) && (flags2 & FUSE_PASSTHROUGH_FLAGS2);
        }
    }
    return n;
}

static ssize_t hook_writev(int fd, struct iovec *iov, int count, void *userdata) {
    (void)userdata;
    if (!init_answered && count >= 2 && iov[0].iov_len == OUT_HEADER_SIZE && iov[1].iov_len == INIT_OUT_SIZE) {
        /* The first reply of a session is INIT's. */
        init_answered = 1;
        if (kernel_offers) {
            char *out = iov[1].iov_base;
            uint32_t flags, flags2, depth = 1;
            memcpy(&flags, out + INIT_OUT_FLAGS, 4);
            memcpy(&flags2, out + INIT_OUT_FLAGS2, 4);
            flags |= FUSE_INIT_EXT_FLAG;
            flags2 |= FUSE_PASSTHROUGH_FLAGS2;
            memcpy(out + INIT_OUT_FLAGS, &flags, 4);
            memcpy(out + INIT_OUT_FLAGS2, &flags2, 4);
            memcpy(out + INIT_OUT_MAX_STACK_DEPTH, &depth, 4);
            negotiated = 1;
        }
    } else if (pending_backing_id > 0 && count >= 2 && iov[0].iov_len == OUT_HEADER_SIZE
               && iov[1].iov_len == pending_open_at + OPEN_OUT_SIZE) {
        char *out = (char *)iov[1].iov_base + pending_open_at;
        uint32_t open_flags;
        memcpy(&open_flags, out + OPEN_OUT_FLAGS, 4);
        open_flags |= FOPEN_PASSTHROUGH_FLAG;
        memcpy(out + OPEN_OUT_FLAGS, &open_flags, 4);
        memcpy(out + OPEN_OUT_BACKING_ID, (const int32_t *)&pending_backing_id, 4);
        pending_backing_id = 0;
    }
    return writev(fd, iov, count);
}

int dbxfs_passthrough_install(void *session) {
    struct fuse_session *se = session;
    static const struct fuse_custom_io io = { .writev = hook_writev, .read = hook_read };
    return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

bool dbxfs_passthrough_negotiated(void) { return negotiated != 0; }

int dbxfs_passthrough_backing_open(void *session, int fd) {
    struct fuse_session *se = session;
    struct backing_map map = { .fd = fd, .flags = 0, .padding = 0 };
    int id = ioctl(fuse_session_fd(se), FUSE_DEV_IOC_BACKING_OPEN, &map);
    return id > 0 ? id : (id == 0 ? -EIO : -errno);
}

int dbxfs_passthrough_backing_close(void *session, int backing_id) {
    struct fuse_session *se = session;
    uint32_t id = (uint32_t)backing_id;
    return ioctl(fuse_session_fd(se), FUSE_DEV_IOC_BACKING_CLOSE, &id) == 0 ? 0 : -errno;
}

int dbxfs_passthrough_reply_open(void *req, const void *fi, int backing_id) {
    pending_backing_id = backing_id;
    pending_open_at = 0;
    int result = fuse_reply_open((fuse_req_t)req, (const struct fuse_file_info *)fi);
    pending_backing_id = 0;
    return result;
}

int dbxfs_passthrough_reply_create(void *req, const void *entry, const void *fi, int backing_id) {
    pending_backing_id = backing_id;
    pending_open_at = ENTRY_OUT_SIZE;
    int result = fuse_reply_create((fuse_req_t)req, (const struct fuse_entry_param *)entry,
                                   (const struct fuse_file_info *)fi);
    pending_backing_id = 0;
    pending_open_at = 0;
    return result;
}

/* httpfs: the smallest FUSE filesystem that serves one file, /data, downloaded over HTTP. It
 * measures the floor of a network filesystem on this machine: what a cold sequential read costs
 * when the bytes must come from the emulator and go out through FUSE, with nothing else done to
 * them (no content-hash check, no cache, no block logic). scripts/bench-read prints it beside
 * dbxfs, so the gap between the two is dbxfs's own work and the gap between httpfs and curl is
 * the price of FUSE itself.
 *
 * It is deliberately generous to itself, so its figure is an upper bound for any design:
 *   - one streaming download of the whole file, started at open (no ranges, no round trips);
 *   - the whole file's memory is allocated and touched before mounting (dbxfs pays for its
 *     memory during the read);
 *   - reads only wait until the stream has passed their end, then reply from that memory.
 * FUSE is set up like dbxfs and memfs.c (low-level API, multi-threaded loop, 1 MiB requests
 * through max_write/FUSE_MAX_PAGES, async reads).
 *
 *   cc -O2 -o httpfs httpfs.c $(pkg-config --cflags --libs fuse3 libcurl) -lpthread
 *   httpfs MOUNTPOINT API_BASE TOKEN DROPBOX_PATH SIZE_BYTES   (foreground; fusermount3 -u to stop)
 */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

static char *data;                 /* the whole file, filled by the download */
static off_t file_size;
static const char *api_base, *token, *dropbox_path;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t arrived = PTHREAD_COND_INITIALIZER;
static off_t received;             /* bytes [0, received) are in `data` */
static int started, finished, failed;

static size_t on_body(char *bytes, size_t one, size_t count, void *unused) {
    (void)unused;
    size_t n = one * count;
    pthread_mutex_lock(&lock);
    off_t at = received;
    pthread_mutex_unlock(&lock);
    if (at + (off_t)n > file_size) return 0;          /* more than announced: fail the transfer */
    memcpy(data + at, bytes, n);
    pthread_mutex_lock(&lock);
    received = at + (off_t)n;
    /* Reads are 1 MiB requests on 1 MiB boundaries: waking the waiters for every TCP-sized
     * piece would cost more than the copies. */
    if ((at >> 20) != (received >> 20)) pthread_cond_broadcast(&arrived);
    pthread_mutex_unlock(&lock);
    return n;
}

static void *download(void *unused) {
    (void)unused;
    char url[4096], auth[4096], arg[4096];
    snprintf(url, sizeof url, "%s/2/files/download", api_base);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    snprintf(arg, sizeof arg, "Dropbox-API-Arg: {\"path\":\"%s\"}", dropbox_path);
    struct curl_slist *headers = curl_slist_append(NULL, auth);
    headers = curl_slist_append(headers, arg);
    CURL *curl = curl_easy_init();
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, 0L);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);
    CURLcode rc = curl_easy_perform(curl);
    if (rc != CURLE_OK) fprintf(stderr, "httpfs: download failed: %s\n", curl_easy_strerror(rc));
    curl_easy_cleanup(curl);
    curl_slist_free_all(headers);
    pthread_mutex_lock(&lock);
    finished = 1;
    failed = rc != CURLE_OK || received != file_size;
    pthread_cond_broadcast(&arrived);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void fill_stat(fuse_ino_t ino, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino == 1) { st->st_mode = S_IFDIR | 0755; st->st_nlink = 2; }
    else { st->st_mode = S_IFREG | 0444; st->st_nlink = 1; st->st_size = file_size; }
}

static void op_init(void *userdata, struct fuse_conn_info *conn) {
    (void)userdata;
    if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
    conn->max_write = 1u << 20;
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

/* The first open starts the one download; later opens read what it brings. */
static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    if (ino != 2) { fuse_reply_err(req, EISDIR); return; }
    pthread_mutex_lock(&lock);
    int start = !started;
    started = 1;
    pthread_mutex_unlock(&lock);
    if (start) {
        pthread_t thread;
        pthread_create(&thread, NULL, download, NULL);
        pthread_detach(thread);
    }
    fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)ino; (void)fi;
    if (off >= file_size) { fuse_reply_buf(req, NULL, 0); return; }
    if ((off_t)size > file_size - off) size = (size_t)(file_size - off);
    pthread_mutex_lock(&lock);
    while (received < off + (off_t)size && !finished) pthread_cond_wait(&arrived, &lock);
    int ok = received >= off + (off_t)size;
    pthread_mutex_unlock(&lock);
    if (!ok) { fuse_reply_err(req, EIO); return; }
    fuse_reply_buf(req, data + off, size);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s MOUNTPOINT API_BASE TOKEN DROPBOX_PATH SIZE_BYTES\n", argv[0]);
        return 2;
    }
    api_base = argv[2]; token = argv[3]; dropbox_path = argv[4];
    file_size = (off_t)atoll(argv[5]);
    /* Populated now, not during the timed read (malloc + memset(0) would be folded into a
     * calloc of untouched pages). */
    data = mmap(NULL, (size_t)file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (data == MAP_FAILED) { perror("httpfs: mmap"); return 1; }
    curl_global_init(CURL_GLOBAL_DEFAULT);

    struct fuse_lowlevel_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.init = op_init; ops.lookup = op_lookup; ops.getattr = op_getattr;
    ops.open = op_open; ops.read = op_read;

    char *args_v[] = { argv[0], "-o", "fsname=httpfs,ro", NULL };
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

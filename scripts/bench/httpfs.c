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
 * FUSE is set up like dbxfs and memfs.c (onefile.h).
 *
 *   cc -O2 -o httpfs httpfs.c $(pkg-config --cflags --libs fuse3 libcurl) -lpthread
 *   httpfs MOUNTPOINT API_BASE TOKEN DROPBOX_PATH SIZE_BYTES   (foreground; fusermount3 -u to stop)
 */
#include "onefile.h"
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static char *data;                 /* the whole file, filled by the download */
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
    if (at + (off_t)n > onefile_size) return 0;          /* more than announced: fail the transfer */
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
    failed = rc != CURLE_OK || received != onefile_size;
    pthread_cond_broadcast(&arrived);
    pthread_mutex_unlock(&lock);
    return NULL;
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
    if (off >= onefile_size) { fuse_reply_buf(req, NULL, 0); return; }
    if ((off_t)size > onefile_size - off) size = (size_t)(onefile_size - off);
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
    onefile_size = (off_t)atoll(argv[5]);
    /* Populated now, not during the timed read (malloc + memset(0) would be folded into a
     * calloc of untouched pages). */
    data = mmap(NULL, (size_t)onefile_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (data == MAP_FAILED) { perror("httpfs: mmap"); return 1; }
    curl_global_init(CURL_GLOBAL_DEFAULT);

    struct fuse_lowlevel_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.lookup = onefile_lookup; ops.getattr = onefile_getattr; ops.open = op_open; ops.read = op_read;
    return onefile_run(argv[0], argv[1], "fsname=httpfs,ro", &ops);
}

/* Implementation of the typed libcurl wrappers declared in CCurlShim.h. */
#include "CCurlShim.h"
#include <pthread.h>

CURLcode dbx_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
CURLcode dbx_setopt_off_t(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
CURLcode dbx_setopt_str(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
CURLcode dbx_setopt_ptr(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
CURLcode dbx_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
CURLcode dbx_setopt_share(CURL *h, CURLSH *s) { return curl_easy_setopt(h, CURLOPT_SHARE, s); }

CURLcode dbx_set_write_callback(CURL *h, curl_write_callback cb, void *ud) {
    CURLcode rc = curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, cb);
    return rc != CURLE_OK ? rc : curl_easy_setopt(h, CURLOPT_WRITEDATA, ud);
}
CURLcode dbx_set_header_callback(CURL *h, curl_write_callback cb, void *ud) {
    CURLcode rc = curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, cb);
    return rc != CURLE_OK ? rc : curl_easy_setopt(h, CURLOPT_HEADERDATA, ud);
}
CURLcode dbx_set_read_callback(CURL *h, curl_read_callback cb, void *ud) {
    CURLcode rc = curl_easy_setopt(h, CURLOPT_READFUNCTION, cb);
    return rc != CURLE_OK ? rc : curl_easy_setopt(h, CURLOPT_READDATA, ud);
}
CURLcode dbx_set_xferinfo_callback(CURL *h, curl_xferinfo_callback cb, void *ud) {
    CURLcode rc = curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, cb);
    if (rc != CURLE_OK) return rc;
    rc = curl_easy_setopt(h, CURLOPT_XFERINFODATA, ud);
    return rc != CURLE_OK ? rc : curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
}

CURLcode dbx_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
CURLcode dbx_getinfo_off_t(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
CURLcode dbx_getinfo_double(CURL *h, CURLINFO i, double *v) { return curl_easy_getinfo(h, i, v); }

static pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud) {
    (void)h; (void)access; (void)ud;
    pthread_mutex_lock(&share_locks[data]);
}
static void share_unlock(CURL *h, curl_lock_data data, void *ud) {
    (void)h; (void)ud;
    pthread_mutex_unlock(&share_locks[data]);
}

static pthread_once_t share_locks_once = PTHREAD_ONCE_INIT;
static void share_locks_init(void) {
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_init(&share_locks[i], NULL);
}

CURLSH *dbx_share_new(void) {
    pthread_once(&share_locks_once, share_locks_init);
    CURLSH *share = curl_share_init();
    if (!share) return NULL;
    curl_share_setopt(share, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    return share;
}

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_result = CURLE_OK;
static void global_init(void) { global_result = curl_global_init(CURL_GLOBAL_ALL); }
CURLcode dbx_global_init_once(void) {
    pthread_once(&global_once, global_init);
    return global_result;
}

long dbx_http_version_2tls(void) { return CURL_HTTP_VERSION_2TLS; }
long dbx_readfunc_abort(void) { return CURL_READFUNC_ABORT; }
long dbx_writefunc_error(void) { return 0; }

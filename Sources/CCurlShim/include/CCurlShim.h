/* Typed wrappers over libcurl's variadic curl_easy_setopt/curl_easy_getinfo and curl_share_setopt,
 * which Swift cannot call, plus a share handle whose locks live in C so Swift needs no lock
 * callbacks. Every function is a one-line forward: the types are the only point. */
#ifndef DBXFS_CCURLSHIM_H
#define DBXFS_CCURLSHIM_H
#include <curl/curl.h>

/* setopt, one per argument type libcurl accepts. */
CURLcode dbx_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode dbx_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value);
CURLcode dbx_setopt_str(CURL *handle, CURLoption option, const char *value);
CURLcode dbx_setopt_ptr(CURL *handle, CURLoption option, void *value);
CURLcode dbx_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value);
CURLcode dbx_setopt_share(CURL *handle, CURLSH *share);

/* Callback setters: each sets the function and its user-data pointer together. */
CURLcode dbx_set_write_callback(CURL *handle, curl_write_callback callback, void *userdata);
CURLcode dbx_set_header_callback(CURL *handle, curl_write_callback callback, void *userdata);
CURLcode dbx_set_read_callback(CURL *handle, curl_read_callback callback, void *userdata);
CURLcode dbx_set_xferinfo_callback(CURL *handle, curl_xferinfo_callback callback, void *userdata);

/* getinfo, one per result type. */
CURLcode dbx_getinfo_long(CURL *handle, CURLINFO info, long *value);
CURLcode dbx_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *value);
CURLcode dbx_getinfo_double(CURL *handle, CURLINFO info, double *value);

/* A share handle for DNS and TLS sessions, locked by pthread mutexes owned by the shim.
 * Lives for the whole process (never freed), so the lock callbacks need no teardown. */
CURLSH *dbx_share_new(void);

/* curl_global_init(CURL_GLOBAL_ALL) exactly once per process, thread-safe; returns its code. */
CURLcode dbx_global_init_once(void);

/* The option constants Swift sees as plain enum values, re-exported as longs where the header
 * defines them through macros Swift cannot import. */
long dbx_http_version_2tls(void);
long dbx_readfunc_abort(void);
long dbx_writefunc_error(void);

#endif

/* Typed wrappers over libcurl's variadic curl_easy_setopt/curl_easy_getinfo, which Swift cannot call. */
#ifndef DBXFS_CCURLSHIM_H
#define DBXFS_CCURLSHIM_H
#include <curl/curl.h>
#endif

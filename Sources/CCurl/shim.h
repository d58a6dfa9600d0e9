/* Imports libcurl. Its variadic setopt/getinfo are wrapped by the CCurlShim target. */
#include <curl/curl.h>

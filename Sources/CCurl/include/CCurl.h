#ifndef ABROVA_CCURL_H
#define ABROVA_CCURL_H

// A small non-variadic face of libcurl's easy interface for Swift. curl_easy_setopt and
// curl_easy_getinfo are variadic, which Swift cannot call, so each kind of argument gets a wrapper
// here. libcurl's own header is included, so Swift sees its types and constants (CURLoption,
// CURLcode, CURLINFO) by their names.

#include <curl/curl.h>
#include <stddef.h>

/// The shape of libcurl's header, write and read callbacks.
typedef size_t (*abrova_curl_data_callback)(char *buffer, size_t size, size_t count, void *context);

/// The shape of libcurl's transfer-progress callback (CURLOPT_XFERINFOFUNCTION): non-zero aborts.
typedef int (*abrova_curl_progress_callback)(void *context, curl_off_t download_total, curl_off_t downloaded,
                                             curl_off_t upload_total, curl_off_t uploaded);

/// curl_global_init(CURL_GLOBAL_DEFAULT); call it once, before any other libcurl call.
CURLcode abrova_curl_global_init(void);

/// curl_easy_setopt for options that take a long (flags, counts, milliseconds).
CURLcode abrova_curl_set_long(CURL *handle, CURLoption option, long value);

/// curl_easy_setopt for options that take a pointer: a string (copied by libcurl), a curl_slist or
/// a buffer that must outlive the transfer, a callback's context.
CURLcode abrova_curl_set_pointer(CURL *handle, CURLoption option, void *value);

/// curl_easy_setopt for options that take a curl_off_t (the _LARGE sizes).
CURLcode abrova_curl_set_offset(CURL *handle, CURLoption option, curl_off_t value);

/// curl_easy_setopt for CURLOPT_HEADERFUNCTION, CURLOPT_WRITEFUNCTION and CURLOPT_READFUNCTION.
CURLcode abrova_curl_set_data_callback(CURL *handle, CURLoption option, abrova_curl_data_callback callback);

/// Sets CURLOPT_XFERINFOFUNCTION to `callback` and turns progress calls on (CURLOPT_NOPROGRESS 0).
CURLcode abrova_curl_set_progress_callback(CURL *handle, abrova_curl_progress_callback callback, void *context);

/// Sends `count` bytes from `bytes` as the request body, not copied: they must outlive the
/// transfer. `bytes` may be NULL when `count` is 0 (an empty body, never one read from stdin).
CURLcode abrova_curl_set_body(CURL *handle, const void *bytes, curl_off_t count);

/// curl_easy_getinfo for information given as a long (CURLINFO_RESPONSE_CODE, CURLINFO_OS_ERRNO).
CURLcode abrova_curl_get_long(CURL *handle, CURLINFO info, long *value);

/// curl_easy_getinfo for information given as a curl_off_t (the _T sizes and times).
CURLcode abrova_curl_get_offset(CURL *handle, CURLINFO info, curl_off_t *value);

#endif

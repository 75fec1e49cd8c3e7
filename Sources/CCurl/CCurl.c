#include "CCurl.h"

CURLcode abrova_curl_global_init(void) {
    return curl_global_init(CURL_GLOBAL_DEFAULT);
}

CURLcode abrova_curl_set_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode abrova_curl_set_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode abrova_curl_set_offset(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode abrova_curl_set_data_callback(CURL *handle, CURLoption option, abrova_curl_data_callback callback) {
    return curl_easy_setopt(handle, option, callback);
}

CURLcode abrova_curl_set_progress_callback(CURL *handle, abrova_curl_progress_callback callback, void *context) {
    CURLcode code = curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback);
    if (code == CURLE_OK) code = curl_easy_setopt(handle, CURLOPT_XFERINFODATA, context);
    if (code == CURLE_OK) code = curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L);
    return code;
}

CURLcode abrova_curl_set_body(CURL *handle, const void *bytes, curl_off_t count) {
    // With no CURLOPT_POSTFIELDS, libcurl would read the body from its read callback, stdin by
    // default: an empty body still points somewhere.
    static const char empty[1] = "";
    CURLcode code = curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, count);
    if (code == CURLE_OK) code = curl_easy_setopt(handle, CURLOPT_POSTFIELDS, bytes != NULL ? bytes : (const void *)empty);
    return code;
}

CURLcode abrova_curl_get_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

CURLcode abrova_curl_get_offset(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}

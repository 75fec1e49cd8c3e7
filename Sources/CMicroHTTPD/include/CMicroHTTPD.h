#ifndef ABROVA_CMICROHTTPD_H
#define ABROVA_CMICROHTTPD_H

// A small non-variadic face of libmicrohttpd for Swift. MHD_start_daemon is variadic, and some
// of libmicrohttpd's enums (the response memory modes) do not import into Swift by name, so those
// calls live in CMicroHTTPD.c. This header only forward-declares libmicrohttpd's types: Swift sees
// them as opaque pointers and never imports microhttpd.h itself.

#include <stddef.h>
#include <stdint.h>

struct MHD_Connection;
struct MHD_Response;

/// A running daemon together with the application's callbacks.
typedef struct abrova_http_daemon abrova_http_daemon;

/// Called for each part of a request, as MHD_AccessHandlerCallback is (without the HTTP version),
/// on the daemon's threads. Returns 1 to go on, 0 to close the connection.
typedef int (*abrova_http_access_callback)(void *context,
                                           struct MHD_Connection *connection,
                                           const char *url,
                                           const char *method,
                                           const char *upload_data,
                                           size_t *upload_data_size,
                                           void **request_context);

/// Called once a request is over: answered, failed, timed out or cut off by the daemon stopping.
/// `termination_code` is libmicrohttpd's MHD_RequestTerminationCode (0: answered).
typedef void (*abrova_http_completed_callback)(void *context,
                                               void **request_context,
                                               int termination_code);

/// Called on the pacer's thread when the client of a suspended connection has hung up (ended its
/// side or reset the connection), with the token given to `abrova_http_suspend`. By then the
/// connection may have been resumed, even suspended again under another token: the callback
/// checks. It must not block, nor stop the daemon (whose stop waits for this thread).
typedef void (*abrova_http_gone_callback)(void *context, uint64_t suspension);

/// Called once per header or query argument. `value` is NULL for a query key without `=`.
typedef void (*abrova_http_value_visitor)(void *context, const char *key, const char *value);

/// Starts a daemon with an internal polling thread (or a pool of `thread_pool_size` of them).
///
/// On Linux a thread of its own (the pacer) looks at every connection four times a second. With
/// `minimum_bytes_per_second` above 0 it shuts down each connection whose request arrives, or whose
/// answer is taken, slower than that on average once `slow_client_grace_seconds` have passed
/// since it began (by the TCP counters). And it calls `gone` for each suspended connection whose
/// client has hung up. Elsewhere there is no such thread: neither happens.
///
/// Port 0 binds any free port. `loopback_only` binds 127.0.0.1 instead of every IPv4 address.
/// Paths reach `access` as sent (not percent-decoded); query arguments arrive with `+` turned into
/// a space but otherwise still percent-encoded. Returns NULL when the daemon cannot start, with
/// `*error_number` set to the errno seen then (0 when there was none).
abrova_http_daemon *abrova_http_start(uint16_t port,
                                      int loopback_only,
                                      unsigned int thread_pool_size,
                                      unsigned int connection_timeout_seconds,
                                      size_t connection_memory_limit,
                                      unsigned int per_address_connection_limit,
                                      unsigned int connection_limit,
                                      unsigned int minimum_bytes_per_second,
                                      unsigned int slow_client_grace_seconds,
                                      abrova_http_access_callback access,
                                      abrova_http_completed_callback completed,
                                      abrova_http_gone_callback gone,
                                      void *context,
                                      int *error_number);

/// How many connections the pacer has shut down for being too slow.
unsigned long abrova_http_cut_connections(abrova_http_daemon *daemon);

/// The port the daemon listens on.
uint16_t abrova_http_bound_port(abrova_http_daemon *daemon);

/// Stops accepting new connections where that is safe (not with epoll, on Linux, where the
/// daemon listens until it stops); open connections are still served. Safe to call twice.
void abrova_http_quiesce(abrova_http_daemon *daemon);

/// Stops the daemon (closing every connection, after joining its threads) and frees it.
void abrova_http_stop(abrova_http_daemon *daemon);

/// Visits the request's headers. Only valid inside the access callback.
void abrova_http_visit_headers(struct MHD_Connection *connection,
                               abrova_http_value_visitor visitor,
                               void *context);

/// Visits the request's query arguments. Only valid inside the access callback.
void abrova_http_visit_query(struct MHD_Connection *connection,
                             abrova_http_value_visitor visitor,
                             void *context);

/// A response whose body is a copy of `size` bytes at `body` (which may be NULL when size is 0).
/// NULL when out of memory.
struct MHD_Response *abrova_http_make_response(const void *body, size_t size);

/// Adds a header to a response. Returns 0 when libmicrohttpd refuses it (a malformed header, or
/// one it sets itself, such as Content-Length).
int abrova_http_add_header(struct MHD_Response *response, const char *name, const char *value);

/// Stops processing the connection's request until `abrova_http_resume`: it holds no thread, does
/// not time out (libmicrohttpd restarts the idle timeout when it is resumed), and is not paced.
/// libmicrohttpd reads nothing from it meanwhile; the pacer reports its client hanging up to the
/// `gone` callback with `suspension` (a token unique to this suspension). Only valid inside the
/// access callback. Every suspended connection must be resumed before `abrova_http_stop`.
void abrova_http_suspend(struct MHD_Connection *connection, uint64_t suspension);

/// Resumes a suspended connection: libmicrohttpd calls the access callback again for its request
/// (with no upload data), on the connection's own thread. Callable from any thread, but only on a
/// connection that is suspended (and only once per suspension).
void abrova_http_resume(struct MHD_Connection *connection);

/// Queues `response` with `status` on the connection and releases the caller's reference to it.
/// Only valid inside the access callback, when no upload data is being delivered. Returns 0 on
/// failure.
int abrova_http_queue_response(struct MHD_Connection *connection,
                               unsigned int status,
                               struct MHD_Response *response);

#endif

// microhttpd.h expects these system headers to come first.
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <stdint.h>
#include <stdarg.h>
#include <microhttpd.h>

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "CMicroHTTPD.h"

struct abrova_http_daemon {
    struct MHD_Daemon *daemon;
    abrova_http_access_callback access;
    abrova_http_completed_callback completed;
    void *context;
    // The listening socket handed back by MHD_quiesce_daemon; closed only after MHD_stop_daemon,
    // as libmicrohttpd asks, because its threads may still hold it until then.
    MHD_socket quiesced_socket;
};

static enum MHD_Result access_trampoline(void *cls,
                                         struct MHD_Connection *connection,
                                         const char *url,
                                         const char *method,
                                         const char *version,
                                         const char *upload_data,
                                         size_t *upload_data_size,
                                         void **con_cls) {
    (void)version;
    struct abrova_http_daemon *daemon = cls;
    return daemon->access(daemon->context, connection, url, method, upload_data, upload_data_size, con_cls)
        ? MHD_YES : MHD_NO;
}

static void completed_trampoline(void *cls,
                                 struct MHD_Connection *connection,
                                 void **con_cls,
                                 enum MHD_RequestTerminationCode code) {
    (void)connection;
    struct abrova_http_daemon *daemon = cls;
    daemon->completed(daemon->context, con_cls, (int)code);
}

// Leaves the text as sent. libmicrohttpd would otherwise percent-decode the path, and the server
// hands out the raw path; query values are decoded in Swift instead.
static size_t keep_escaped(void *cls, struct MHD_Connection *connection, char *text) {
    (void)cls;
    (void)connection;
    return strlen(text);
}

abrova_http_daemon *abrova_http_start(uint16_t port,
                                      int loopback_only,
                                      unsigned int thread_pool_size,
                                      unsigned int connection_timeout_seconds,
                                      size_t connection_memory_limit,
                                      unsigned int per_address_connection_limit,
                                      abrova_http_access_callback access,
                                      abrova_http_completed_callback completed,
                                      void *context,
                                      int *error_number) {
    *error_number = 0;
    struct abrova_http_daemon *daemon = calloc(1, sizeof *daemon);
    if (daemon == NULL) {
        *error_number = ENOMEM;
        return NULL;
    }
    daemon->access = access;
    daemon->completed = completed;
    daemon->context = context;
    daemon->quiesced_socket = MHD_INVALID_SOCKET;

    struct sockaddr_in loopback;
    memset(&loopback, 0, sizeof loopback);
    loopback.sin_family = AF_INET;
    loopback.sin_port = htons(port);
    loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    // MHD_USE_ITC is what MHD_quiesce_daemon needs in threaded modes; MHD_USE_AUTO picks epoll on
    // Linux, so connections are not limited by FD_SETSIZE.
    unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ITC;
    errno = 0;
    daemon->daemon = MHD_start_daemon(
        flags, port, NULL, NULL, access_trampoline, daemon,
        MHD_OPTION_THREAD_POOL_SIZE, thread_pool_size > 1 ? thread_pool_size : 0u,
        MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
        // 0 is no limit.
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_address_connection_limit,
        MHD_OPTION_NOTIFY_COMPLETED, completed_trampoline, daemon,
        MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL,
        // An MHD_OPTION_SOCK_ADDR of NULL is ignored, so one argument list serves both cases.
        MHD_OPTION_SOCK_ADDR, loopback_only ? (struct sockaddr *)&loopback : (struct sockaddr *)NULL,
        MHD_OPTION_END);
    if (daemon->daemon == NULL) {
        *error_number = errno;
        free(daemon);
        return NULL;
    }
    return daemon;
}

uint16_t abrova_http_bound_port(abrova_http_daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon->daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

void abrova_http_quiesce(abrova_http_daemon *daemon) {
    if (daemon->quiesced_socket != MHD_INVALID_SOCKET) {
        return;
    }
    MHD_socket listening = MHD_quiesce_daemon(daemon->daemon);
    if (listening == MHD_INVALID_SOCKET) {
        return;
    }
    daemon->quiesced_socket = listening;
    // On Linux this takes the socket out of the listening state while its descriptor stays open,
    // so new clients are refused at once instead of waiting in the backlog until the stop.
    // Elsewhere it fails harmlessly.
    (void)shutdown(listening, SHUT_RD);
}

void abrova_http_stop(abrova_http_daemon *daemon) {
    MHD_stop_daemon(daemon->daemon);
    if (daemon->quiesced_socket != MHD_INVALID_SOCKET) {
        close(daemon->quiesced_socket);
    }
    free(daemon);
}

struct visit {
    abrova_http_value_visitor visitor;
    void *context;
};

static enum MHD_Result visit_value(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    struct visit *visit = cls;
    if (key != NULL) {
        visit->visitor(visit->context, key, value);
    }
    return MHD_YES;
}

void abrova_http_visit_headers(struct MHD_Connection *connection,
                               abrova_http_value_visitor visitor,
                               void *context) {
    struct visit visit = { visitor, context };
    (void)MHD_get_connection_values(connection, MHD_HEADER_KIND, visit_value, &visit);
}

void abrova_http_visit_query(struct MHD_Connection *connection,
                             abrova_http_value_visitor visitor,
                             void *context) {
    struct visit visit = { visitor, context };
    (void)MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, visit_value, &visit);
}

struct MHD_Response *abrova_http_make_response(const void *body, size_t size) {
    // MUST_COPY: the Swift array behind `body` is gone once the access callback returns.
    return MHD_create_response_from_buffer(size, (void *)(size == 0 ? "" : body), MHD_RESPMEM_MUST_COPY);
}

int abrova_http_add_header(struct MHD_Response *response, const char *name, const char *value) {
    return MHD_add_response_header(response, name, value) == MHD_YES;
}

int abrova_http_queue_response(struct MHD_Connection *connection,
                               unsigned int status,
                               struct MHD_Response *response) {
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);  // the connection holds its own reference once queued
    return result == MHD_YES;
}

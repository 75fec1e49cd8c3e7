// For POLLRDHUP, Linux's "the peer has shut down its side" poll event.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
// microhttpd.h expects these system headers to come first.
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <stdint.h>
#include <stdarg.h>
#include <microhttpd.h>

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <stddef.h>
#include <sys/ioctl.h>
#ifdef __linux__
#include <linux/sockios.h>
#include <linux/tcp.h>
#endif

#include "CMicroHTTPD.h"

// The pacer: libmicrohttpd closes a connection idle past its timeout, but not one that trickles a
// byte before each timeout. So a thread of ours looks at every connection's TCP counters four
// times a second (Linux's TCP_INFO: bytes received, bytes the client acknowledged), and shuts
// down a connection whose request, or whose answer, moves slower than the minimum rate once the
// grace has passed. Only the descriptor is shut down; libmicrohttpd then sees the connection end
// and closes it as it would any other. A connection is in the list from libmicrohttpd's
// "started" notice to its "closed" one, which comes before it closes the descriptor, so the
// pacer never touches a descriptor that has been handed on.
//
// The same looks find the clients that hang up while their request is suspended, which
// libmicrohttpd does not watch: a FIN or a reset on the descriptor (poll's POLLRDHUP, POLLHUP or
// POLLERR) is reported through the `gone` callback with the suspension's token, after the lock is
// released (the callback resumes the connection, which takes the lock). An HTTP/1.1 client that
// ends its side while it waits for an answer has left, so a half close counts as gone too.

enum pace_phase {
    PACE_IDLE,       // between requests: libmicrohttpd's idle timeout applies
    PACE_RECEIVING,  // a request has begun to arrive and is not whole
    PACE_HANDLING,   // the request is whole and the handler runs, or its connection is suspended
                     // until a deferred answer comes: not the client's to pace
    PACE_SENDING,    // an answer is queued: the client must take it at the minimum rate
};

struct abrova_http_daemon;

struct paced_connection {
    struct abrova_http_daemon *daemon;
    int fd;
    enum pace_phase phase;
    uint64_t baseline;  // bytes received (acknowledged, when sending) when the phase began
    int needs_baseline; // the phase began since the pacer last looked: it reads the baseline then
    double since;       // when the phase began, in seconds of the monotonic clock
    int is_cut;
    int is_suspended;     // between abrova_http_suspend and abrova_http_resume
    int is_gone;          // the client hung up during this suspension, and was reported
    uint64_t suspension;  // the token of the suspension, for the `gone` callback
    struct paced_connection *previous, *next;
};

struct abrova_http_daemon {
    struct MHD_Daemon *daemon;
    abrova_http_access_callback access;
    abrova_http_completed_callback completed;
    abrova_http_gone_callback gone;
    void *context;
    // The listening socket handed back by MHD_quiesce_daemon; closed only after MHD_stop_daemon,
    // as libmicrohttpd asks, because its threads may still hold it until then.
    MHD_socket quiesced_socket;

    int is_watching;                        // connections are listed and the pacer runs (Linux)
    unsigned int minimum_bytes_per_second;  // 0: connections are not paced
    unsigned int grace_seconds;
    pthread_mutex_t pace_lock;
    pthread_cond_t pace_stop;
    int is_pacer_stopping;
    int has_pacer;
    pthread_t pacer;
    struct paced_connection *paced;  // the connections open now
    unsigned long cut_connections;
};

static double monotonic_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

// The connection's TCP counters. Returns 0 when the system does not give them (a kernel whose
// TCP_INFO is older than the two counters): the connection is then not paced.
static int tcp_counters(int fd, uint64_t *received, uint64_t *acknowledged) {
    *received = 0;
    *acknowledged = 0;
#ifdef __linux__
    struct tcp_info info;
    socklen_t length = sizeof info;
    memset(&info, 0, sizeof info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0
        || length < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received) {
        return 0;
    }
    *received = info.tcpi_bytes_received;
    *acknowledged = info.tcpi_bytes_acked;
    return 1;
#else
    (void)fd;
    return 0;
#endif
}

// Whether the server, not the client, is the slow side of the phase: bytes have arrived that it
// has not read yet (its thread is busy with another connection's handler), or it has nothing
// queued for the client to take.
static int is_server_behind(int fd, enum pace_phase phase) {
#ifdef __linux__
    int queued = 0;
    if (phase == PACE_RECEIVING) {
        return ioctl(fd, SIOCINQ, &queued) == 0 && queued > 0;
    }
    return ioctl(fd, SIOCOUTQ, &queued) == 0 && queued == 0;
#else
    (void)fd;
    (void)phase;
    return 0;
#endif
}

// Whether the client has ended its side of the connection (a FIN) or reset it.
static int has_hung_up(int fd) {
#ifdef __linux__
    struct pollfd watched = { .fd = fd, .events = POLLRDHUP, .revents = 0 };
    return poll(&watched, 1, 0) == 1 && (watched.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
#else
    (void)fd;
    return 0;
#endif
}

static struct paced_connection *paced_of(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == NULL ? NULL : info->socket_context;
}

// Moves a connection to `phase`. The counter the phase is paced by is read by the pacer at its
// next look, not here: TCP_INFO costs microseconds, and this runs three times a request.
static void enter_phase(struct MHD_Connection *connection, enum pace_phase phase) {
    struct paced_connection *paced = paced_of(connection);
    if (paced == NULL) {
        return;
    }
    struct abrova_http_daemon *daemon = paced->daemon;
    double now = monotonic_seconds();
    pthread_mutex_lock(&daemon->pace_lock);
    // A response queued before the body was read (a refusal) is not turned back into handling.
    if (phase == PACE_HANDLING && paced->phase == PACE_SENDING) {
        pthread_mutex_unlock(&daemon->pace_lock);
        return;
    }
    paced->phase = phase;
    paced->needs_baseline = 1;
    paced->since = now;
    pthread_mutex_unlock(&daemon->pace_lock);
}

static void notify_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                              enum MHD_ConnectionNotificationCode code) {
    struct abrova_http_daemon *daemon = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct paced_connection *paced = info == NULL || !daemon->is_watching ? NULL : calloc(1, sizeof *paced);
        *socket_context = paced;
        if (paced == NULL) {
            return;  // neither paced nor watched; libmicrohttpd's timeout still applies
        }
        paced->daemon = daemon;
        paced->fd = info->connect_fd;
        paced->phase = PACE_IDLE;
        paced->since = monotonic_seconds();
        pthread_mutex_lock(&daemon->pace_lock);
        paced->next = daemon->paced;
        if (daemon->paced != NULL) {
            daemon->paced->previous = paced;
        }
        daemon->paced = paced;
        pthread_mutex_unlock(&daemon->pace_lock);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        struct paced_connection *paced = *socket_context;
        if (paced == NULL) {
            return;
        }
        pthread_mutex_lock(&daemon->pace_lock);
        if (paced->previous != NULL) {
            paced->previous->next = paced->next;
        } else {
            daemon->paced = paced->next;
        }
        if (paced->next != NULL) {
            paced->next->previous = paced->previous;
        }
        pthread_mutex_unlock(&daemon->pace_lock);
        free(paced);
        *socket_context = NULL;
    }
}

// Adds a suspension token to the list the pacer reports once it has let go of the lock. Returns 0
// when out of memory: the connection is then looked at again at the next look.
static int note_gone(uint64_t **tokens, size_t *count, size_t *capacity, uint64_t token) {
    if (*count == *capacity) {
        size_t larger = *capacity == 0 ? 16 : *capacity * 2;
        uint64_t *grown = realloc(*tokens, larger * sizeof **tokens);
        if (grown == NULL) {
            return 0;
        }
        *tokens = grown;
        *capacity = larger;
    }
    (*tokens)[(*count)++] = token;
    return 1;
}

static void *pace(void *cls) {
    struct abrova_http_daemon *daemon = cls;
    uint64_t *gone = NULL;
    size_t gone_capacity = 0;
    pthread_mutex_lock(&daemon->pace_lock);
    while (!daemon->is_pacer_stopping) {
        double now = monotonic_seconds();
        size_t gone_count = 0;
        for (struct paced_connection *paced = daemon->paced; paced != NULL; paced = paced->next) {
            if (paced->is_suspended) {
                if (!paced->is_gone && has_hung_up(paced->fd)
                    && note_gone(&gone, &gone_count, &gone_capacity, paced->suspension)) {
                    paced->is_gone = 1;
                }
                continue;
            }
            if (daemon->minimum_bytes_per_second == 0 || paced->is_cut || paced->phase == PACE_HANDLING) {
                continue;
            }
            uint64_t received, acknowledged;
            if (!tcp_counters(paced->fd, &received, &acknowledged)) {
                continue;
            }
            if (paced->needs_baseline) {
                // What moved between the phase's start and now counts against the client: a
                // quarter of a second's worth at most, which the grace covers.
                paced->baseline = paced->phase == PACE_SENDING ? acknowledged : received;
                paced->needs_baseline = 0;
                continue;
            }
            if (paced->phase == PACE_IDLE) {
                if (received > paced->baseline) {
                    paced->phase = PACE_RECEIVING;
                    paced->since = now;
                }
                continue;
            }
            uint64_t counter = paced->phase == PACE_SENDING ? acknowledged : received;
            if (is_server_behind(paced->fd, paced->phase)) {
                // The pace is the client's again from when the server catches up.
                paced->baseline = counter;
                paced->since = now;
                continue;
            }
            double moved = counter > paced->baseline ? (double)(counter - paced->baseline) : 0;
            double paced_for = now - paced->since - (double)daemon->grace_seconds;
            if (paced_for > 0 && moved < paced_for * (double)daemon->minimum_bytes_per_second) {
                paced->is_cut = 1;
                daemon->cut_connections += 1;
                (void)shutdown(paced->fd, SHUT_RDWR);
            }
        }
        if (gone_count > 0) {
            // Unlocked: the callback resumes the connections, and resuming takes the lock. A
            // connection resumed (answered) meanwhile has a newer token or none, which the
            // callback ignores; a suspended one is not freed by libmicrohttpd.
            pthread_mutex_unlock(&daemon->pace_lock);
            for (size_t index = 0; index < gone_count; index += 1) {
                daemon->gone(daemon->context, gone[index]);
            }
            pthread_mutex_lock(&daemon->pace_lock);
            if (daemon->is_pacer_stopping) {
                break;
            }
        }
        struct timespec wake;
        clock_gettime(CLOCK_MONOTONIC, &wake);
        wake.tv_nsec += 250 * 1000 * 1000;
        if (wake.tv_nsec >= 1000 * 1000 * 1000) {
            wake.tv_sec += 1;
            wake.tv_nsec -= 1000 * 1000 * 1000;
        }
        (void)pthread_cond_timedwait(&daemon->pace_stop, &daemon->pace_lock, &wake);
    }
    pthread_mutex_unlock(&daemon->pace_lock);
    free(gone);
    return NULL;
}

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
    // A call after the first with no data: the request is whole.
    if (*con_cls != NULL && *upload_data_size == 0) {
        enter_phase(connection, PACE_HANDLING);
    }
    return daemon->access(daemon->context, connection, url, method, upload_data, upload_data_size, con_cls)
        ? MHD_YES : MHD_NO;
}

static void completed_trampoline(void *cls,
                                 struct MHD_Connection *connection,
                                 void **con_cls,
                                 enum MHD_RequestTerminationCode code) {
    struct abrova_http_daemon *daemon = cls;
    enter_phase(connection, PACE_IDLE);
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
                                      unsigned int connection_limit,
                                      unsigned int minimum_bytes_per_second,
                                      unsigned int slow_client_grace_seconds,
                                      abrova_http_access_callback access,
                                      abrova_http_completed_callback completed,
                                      abrova_http_gone_callback gone,
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
    daemon->gone = gone;
    daemon->context = context;
    daemon->quiesced_socket = MHD_INVALID_SOCKET;
#ifdef __linux__
    daemon->is_watching = 1;
    daemon->minimum_bytes_per_second = minimum_bytes_per_second;
#else
    (void)minimum_bytes_per_second;  // no TCP_INFO counters to pace by, no POLLRDHUP to watch by
#endif
    daemon->grace_seconds = slow_client_grace_seconds;
    pthread_mutex_init(&daemon->pace_lock, NULL);
    // The pacer's waits are on the monotonic clock: a change of the wall clock neither stalls nor hurries it.
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&daemon->pace_stop, &monotonic);
    pthread_condattr_destroy(&monotonic);

    struct sockaddr_in loopback;
    memset(&loopback, 0, sizeof loopback);
    loopback.sin_family = AF_INET;
    loopback.sin_port = htons(port);
    loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    // MHD_USE_ITC is what MHD_quiesce_daemon needs in threaded modes (and what wakes a thread to
    // process a resumed connection); MHD_USE_AUTO picks epoll on Linux, so connections are not
    // limited by FD_SETSIZE.
    unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME;
    errno = 0;
    daemon->daemon = MHD_start_daemon(
        flags, port, NULL, NULL, access_trampoline, daemon,
        MHD_OPTION_THREAD_POOL_SIZE, thread_pool_size > 1 ? thread_pool_size : 0u,
        MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
        // 0 is no limit.
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_address_connection_limit,
        // In all, divided among the pool's threads; epoll, unlike select, lets it pass FD_SETSIZE.
        MHD_OPTION_CONNECTION_LIMIT, connection_limit,
        MHD_OPTION_NOTIFY_COMPLETED, completed_trampoline, daemon,
        MHD_OPTION_NOTIFY_CONNECTION, notify_connection, daemon,
        MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL,
        // An MHD_OPTION_SOCK_ADDR of NULL is ignored, so one argument list serves both cases.
        MHD_OPTION_SOCK_ADDR, loopback_only ? (struct sockaddr *)&loopback : (struct sockaddr *)NULL,
        MHD_OPTION_END);
    if (daemon->daemon == NULL) {
        *error_number = errno;
        free(daemon);
        return NULL;
    }
    if (daemon->is_watching) {
        int failed = pthread_create(&daemon->pacer, NULL, pace, daemon);
        if (failed != 0) {
            MHD_stop_daemon(daemon->daemon);
            *error_number = failed;
            free(daemon);
            return NULL;
        }
        daemon->has_pacer = 1;
    }
    return daemon;
}

unsigned long abrova_http_cut_connections(abrova_http_daemon *daemon) {
    pthread_mutex_lock(&daemon->pace_lock);
    unsigned long cut = daemon->cut_connections;
    pthread_mutex_unlock(&daemon->pace_lock);
    return cut;
}

uint16_t abrova_http_bound_port(abrova_http_daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon->daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

void abrova_http_quiesce(abrova_http_daemon *daemon) {
#ifdef __linux__
    // Not on Linux, where MHD_USE_AUTO picks epoll: there MHD_quiesce_daemon and the epoll loop of
    // the daemon's own threads both take the listening socket out of the epoll set, unlocked, and
    // the loser aborts the process ("Failed to remove listen FD from epoll set", an open defect of
    // libmicrohttpd). The daemon keeps listening until the stop; what comes meanwhile is answered
    // 503 by the server, which is shutting down.
    (void)daemon;
#else
    if (daemon->quiesced_socket != MHD_INVALID_SOCKET) {
        return;
    }
    MHD_socket listening = MHD_quiesce_daemon(daemon->daemon);
    if (listening == MHD_INVALID_SOCKET) {
        return;
    }
    daemon->quiesced_socket = listening;
    // Takes the socket out of the listening state where the system does so (it fails harmlessly
    // elsewhere), so new clients are refused at once instead of waiting in the backlog until the
    // stop.
    (void)shutdown(listening, SHUT_RD);
#endif
}

void abrova_http_stop(abrova_http_daemon *daemon) {
    if (daemon->has_pacer) {
        pthread_mutex_lock(&daemon->pace_lock);
        daemon->is_pacer_stopping = 1;
        pthread_cond_signal(&daemon->pace_stop);
        pthread_mutex_unlock(&daemon->pace_lock);
        pthread_join(daemon->pacer, NULL);
    }
    // Each connection still open is told closed, and leaves the list, before this returns.
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

// Marks the connection suspended (or not) under `suspension`, for the pacer's watch. Outside
// libmicrohttpd's calls: the lock is never held while libmicrohttpd holds its own.
static void mark_suspended(struct MHD_Connection *connection, int is_suspended, uint64_t suspension) {
    struct paced_connection *paced = paced_of(connection);
    if (paced == NULL) {
        return;
    }
    pthread_mutex_lock(&paced->daemon->pace_lock);
    paced->is_suspended = is_suspended;
    paced->is_gone = 0;
    paced->suspension = suspension;
    pthread_mutex_unlock(&paced->daemon->pace_lock);
}

void abrova_http_suspend(struct MHD_Connection *connection, uint64_t suspension) {
    // The phase stays PACE_HANDLING, which the pacer does not pace, until the answer is queued
    // after the resume; libmicrohttpd itself takes a suspended connection off its timeout lists.
    mark_suspended(connection, 1, suspension);
    MHD_suspend_connection(connection);
}

void abrova_http_resume(struct MHD_Connection *connection) {
    mark_suspended(connection, 0, 0);
    MHD_resume_connection(connection);
}

int abrova_http_queue_response(struct MHD_Connection *connection,
                               unsigned int status,
                               struct MHD_Response *response) {
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);  // the connection holds its own reference once queued
    if (result == MHD_YES) {
        enter_phase(connection, PACE_SENDING);
    }
    return result == MHD_YES;
}

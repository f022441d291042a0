// The system's OpenSSL 3 (libssl, libcrypto; headers from libssl-dev) for SocketTransport's TLS.
// Functions OpenSSL defines as macros, which Swift cannot call, are wrapped here, and so is a
// socket BIO that sends with MSG_NOSIGNAL (OpenSSL's own uses write(2): a peer that closed would
// raise SIGPIPE in the host process).
#ifndef BEACON_COPENSSL_SHIM_H
#define BEACON_COPENSSL_SHIM_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

static inline long beacon_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return SSL_CTX_set_min_proto_version(ctx, version);
}
static inline long beacon_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}
static inline void beacon_SSL_CTX_set_read_ahead(SSL_CTX *ctx, int yes) {
    SSL_CTX_set_read_ahead(ctx, yes);
}
static inline long beacon_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return SSL_set_tlsext_host_name(ssl, name);
}
static inline long beacon_SSL_MODE_flags(void) {
    return SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER;
}
/// No TLS compression; no renegotiation. Not SSL_OP_IGNORE_UNEXPECTED_EOF: it would make an end
/// of the connection without close_notify read like close_notify, and an answer whose body runs
/// until the close must not end at a close an attacker can forge (RFC 9112 §9.8). Without it
/// OpenSSL reports SSL_R_UNEXPECTED_EOF_WHILE_READING (the BIO answers BIO_CTRL_EOF).
static inline uint64_t beacon_SSL_OP_flags(void) {
    return SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION;
}
/// The host name check: no partial wildcards, and never the subject's CN (a certificate names
/// its host in subjectAltName, RFC 6125 §6.4.4; Go and browsers refuse a CN alone).
static inline unsigned int beacon_host_check_flags(void) {
    return X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT;
}

// MARK: - A socket BIO that never raises SIGPIPE

static inline int beacon_bio_write(BIO *bio, const char *data, int length) {
    int fd = (int)(intptr_t)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    ssize_t n = send(fd, data, (size_t)length, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(bio);
    return (int)n;
}

static inline int beacon_bio_read(BIO *bio, char *data, int length) {
    int fd = (int)(intptr_t)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    ssize_t n = recv(fd, data, (size_t)length, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(bio);
    // The peer closed: BIO_eof says so, and OpenSSL tells an end without close_notify from one with.
    if (n == 0 && length > 0) BIO_set_flags(bio, BIO_FLAGS_IN_EOF);
    return (int)n;
}

static inline int beacon_bio_puts(BIO *bio, const char *text) {
    return beacon_bio_write(bio, text, (int)strlen(text));
}

static inline long beacon_bio_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)number; (void)pointer;
    switch (command) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_DUP: return 1;
    case BIO_CTRL_EOF: return BIO_test_flags(bio, BIO_FLAGS_IN_EOF) != 0;
    default: return 0;
    }
}

static inline int beacon_bio_create(BIO *bio) {
    BIO_set_init(bio, 1);
    return 1;
}

/// A new BIO_METHOD for the socket BIO (make it once and keep it).
static inline BIO_METHOD *beacon_bio_method_new(void) {
    BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "beacon socket");
    if (method == NULL) return NULL;
    BIO_meth_set_write(method, beacon_bio_write);
    BIO_meth_set_read(method, beacon_bio_read);
    BIO_meth_set_puts(method, beacon_bio_puts);
    BIO_meth_set_ctrl(method, beacon_bio_ctrl);
    BIO_meth_set_create(method, beacon_bio_create);
    return method;
}

/// A socket BIO over `fd` (which it does not close).
static inline BIO *beacon_bio_new(BIO_METHOD *method, int fd) {
    BIO *bio = BIO_new(method);
    if (bio != NULL) BIO_set_data(bio, (void *)(intptr_t)fd);
    return bio;
}

#endif

/*
 * http: the little HTTP/1.1 a service on loopback needs (owner: policy
 * engine, issue 22; ca-sample --serve uses it).
 *
 * One request per connection (every reply says Connection: close), read
 * whole before it is answered: headers up to CA_HTTP_HEADER_MAX bytes, a
 * body of Content-Length bytes up to a bound the caller sets, the whole
 * request within CA_HTTP_READ_S seconds. Expect: 100-continue is honoured,
 * so a client with a body over the bound is told so before it sends it.
 * Enough for OpenAI-style clients (curl, the openai package, an RL
 * engine's proxy) on one machine; no TLS, no chunked request bodies, no
 * keep-alive, one connection at a time.
 */
#ifndef CA_HTTP_H
#define CA_HTTP_H

#include <stddef.h>

#define CA_HTTP_WHY 256
#define CA_HTTP_HEADER_MAX 65536
#define CA_HTTP_READ_S 30

struct ca_http_request {
	char method[16];
	char path[2048];   /* the target without its query string */
	char *body;        /* malloc'd, NUL-terminated; NULL when there is none */
	size_t body_len;
};

/*
 * Listen on address: "PORT" or "HOST:PORT", HOST an IPv4 address or a
 * name (127.0.0.1 when left out), PORT 0 for a free one. Returns the
 * socket and sets *port to the port bound, or -1 with why set.
 */
int ca_http_listen(const char *address, int *port, char why[CA_HTTP_WHY]);

/* The next connection, waiting up to timeout_ms (-1: no limit); -1 on timeout (errno ETIMEDOUT) or error. */
int ca_http_accept(int listen_fd, int timeout_ms);

/*
 * Read a request from connection fd into r. Returns 0, or the HTTP status
 * to answer with (400, 408, 411, 413, 431, 505) and why set; r->body is
 * then NULL. max_body bounds Content-Length.
 */
int ca_http_read(int fd, size_t max_body, struct ca_http_request *r, char why[CA_HTTP_WHY]);
void ca_http_request_free(struct ca_http_request *r);

/* Answer with status and body[0..len) of the content type; -1 when the client is gone. */
int ca_http_reply(int fd, int status, const char *content_type, const char *body, size_t len);

/* Close a connection after its reply, reading what the client still sends for a moment (so it sees the reply, not a reset). */
void ca_http_close(int fd);

#endif

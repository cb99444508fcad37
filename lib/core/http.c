/*
 * http: one request per connection, bounded and timed; see http.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "http.h"

static int fail(char why[CA_HTTP_WHY], int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char why[CA_HTTP_WHY], int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, CA_HTTP_WHY, fmt, ap);
	va_end(ap);
	return status;
}

int ca_http_listen(const char *address, int *port, char why[CA_HTTP_WHY])
{
	char host[256] = "127.0.0.1";
	const char *colon = strrchr(address, ':');
	const char *port_text = colon ? colon + 1 : address;
	if (colon) {
		size_t n = (size_t)(colon - address);
		if (n == 0 || n >= sizeof host)
			return fail(why, -1, "%s: expected PORT or HOST:PORT", address), -1;
		memcpy(host, address, n);
		host[n] = 0;
	}
	char *end;
	errno = 0;
	long p = strtol(port_text, &end, 10);
	if (!*port_text || *end || errno || p < 0 || p > 65535)
		return fail(why, -1, "%s: the port must be a number from 0 to 65535", address), -1;
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
	int rc = getaddrinfo(host, port_text, &hints, &ai);
	if (rc != 0)
		return fail(why, -1, "%s: %s", host, gai_strerror(rc)), -1;
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
		fail(why, -1, "%s: %s", address, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	struct sockaddr_in bound;
	socklen_t len = sizeof bound;
	if (getsockname(fd, (struct sockaddr *)&bound, &len) < 0) {
		fail(why, -1, "%s: %s", address, strerror(errno));
		close(fd);
		return -1;
	}
	*port = ntohs(bound.sin_port);
	return fd;
}

int ca_http_accept(int listen_fd, int timeout_ms)
{
	struct pollfd pfd = {.fd = listen_fd, .events = POLLIN};
	int n = poll(&pfd, 1, timeout_ms);
	if (n == 0)
		errno = ETIMEDOUT;
	if (n <= 0)
		return -1;
	int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return -1;
	struct timeval tv = {.tv_sec = CA_HTTP_READ_S};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	return fd;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Read into buf[*have..cap) once; 0 at end of input, -1 on a timeout or error. */
static ssize_t read_some(int fd, char *buf, size_t *have, size_t cap, double deadline)
{
	if (now_s() > deadline) {
		errno = ETIMEDOUT;
		return -1;
	}
	ssize_t n;
	do
		n = recv(fd, buf + *have, cap - *have, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		errno = ETIMEDOUT;
	if (n > 0)
		*have += (size_t)n;
	return n;
}

/* The value of header name in the header block (NUL-terminated lines), or NULL. */
static const char *header(const char *block, const char *name)
{
	size_t n = strlen(name);
	for (const char *line = block; *line; line += strlen(line) + 1)
		if (!strncasecmp(line, name, n) && line[n] == ':') {
			const char *v = line + n + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			return v;
		}
	return NULL;
}

/* Split the head (request line and headers, CRLF lines) into r and a block of NUL-separated header lines. */
static int parse_head(char *head, struct ca_http_request *r, char **headers, char why[CA_HTTP_WHY])
{
	char *line_end = strstr(head, "\r\n");
	*line_end = 0;
	char *method = head, *target = strchr(head, ' ');
	char *version = target ? strchr(target + 1, ' ') : NULL;
	if (!target || !version)
		return fail(why, 400, "malformed request line");
	*target++ = 0;
	*version++ = 0;
	if (strncmp(version, "HTTP/1.", 7))
		return fail(why, 505, "only HTTP/1.x is served");
	if (strlen(method) >= sizeof r->method || strlen(target) >= sizeof r->path || *target != '/')
		return fail(why, 400, "malformed request line");
	strcpy(r->method, method);
	strcpy(r->path, target);
	r->path[strcspn(r->path, "?")] = 0;
	/* Header lines become NUL-terminated strings, the block ends with an empty one. */
	char *out = line_end + 1, *in = line_end + 2;
	*headers = out;
	while (*in) {
		char *e = strstr(in, "\r\n");
		size_t n = (size_t)(e - in);
		memmove(out, in, n);
		out[n] = 0;
		out += n + 1;
		in = e + 2;
	}
	*out = 0;
	return 0;
}

int ca_http_read(int fd, size_t max_body, struct ca_http_request *r, char why[CA_HTTP_WHY])
{
	memset(r, 0, sizeof *r);
	double deadline = now_s() + CA_HTTP_READ_S;
	char *buf = ca_xmalloc(CA_HTTP_HEADER_MAX + 1);
	size_t have = 0;
	char *end = NULL;
	while (!end) {
		if (have == CA_HTTP_HEADER_MAX) {
			free(buf);
			return fail(why, 431, "the request's headers are over %d bytes", CA_HTTP_HEADER_MAX);
		}
		ssize_t n = read_some(fd, buf, &have, CA_HTTP_HEADER_MAX, deadline);
		if (n <= 0) {
			free(buf);
			return n == 0 ? fail(why, 400, "the connection closed before the request ended")
				      : fail(why, 408, "reading the request: %s", strerror(errno));
		}
		end = memmem(buf, have, "\r\n\r\n", 4);
	}
	if (memchr(buf, 0, (size_t)(end - buf))) {
		free(buf);
		return fail(why, 400, "a NUL byte in the request's headers");
	}
	size_t head_len = (size_t)(end - buf) + 4, extra = have - head_len;
	char *rest = ca_xmalloc(extra + 1);
	memcpy(rest, end + 4, extra);
	end[2] = 0;   /* the head keeps its last CRLF */
	char *headers = NULL;
	int status = parse_head(buf, r, &headers, why);
	const char *te = status ? NULL : header(headers, "Transfer-Encoding");
	const char *cl = status ? NULL : header(headers, "Content-Length");
	const char *expect = status ? NULL : header(headers, "Expect");
	unsigned long long length = 0;
	if (!status && te)
		status = fail(why, 411, "a chunked body is not supported: send Content-Length");
	else if (!status && cl) {
		char *e;
		errno = 0;
		length = strtoull(cl, &e, 10);
		if (errno || e == cl || (*e && *e != ' ' && *e != '\t') || *cl == '-')
			status = fail(why, 400, "a malformed Content-Length");
		else if (length > max_body)
			status = fail(why, 413, "the request body of %llu bytes is over the limit of %zu", length, max_body);
	} else if (!status && !strcmp(r->method, "POST")) {
		status = fail(why, 411, "a POST needs Content-Length");
	}
	free(buf);
	if (status) {
		free(rest);
		return status;
	}
	if (extra > length)
		extra = (size_t)length;   /* one request per connection: what follows is not read */
	if (expect && !strcasecmp(expect, "100-continue") && extra < length) {
		static const char go[] = "HTTP/1.1 100 Continue\r\n\r\n";
		if (send(fd, go, sizeof go - 1, MSG_NOSIGNAL) < 0) {
			free(rest);
			return fail(why, 400, "the client went away: %s", strerror(errno));
		}
	}
	r->body = ca_xrealloc(rest, (size_t)length + 1);
	r->body_len = extra;
	while (r->body_len < length) {
		ssize_t n = read_some(fd, r->body, &r->body_len, (size_t)length, deadline);
		if (n <= 0) {
			ca_http_request_free(r);
			return n == 0 ? fail(why, 400, "the body ended before Content-Length bytes")
				      : fail(why, 408, "reading the body: %s", strerror(errno));
		}
	}
	r->body[r->body_len] = 0;
	return 0;
}

void ca_http_request_free(struct ca_http_request *r)
{
	free(r->body);
	r->body = NULL;
	r->body_len = 0;
}

static const char *reason(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 411: return "Length Required";
	case 413: return "Content Too Large";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 505: return "HTTP Version Not Supported";
	default: return "Error";
	}
}

static int send_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int ca_http_reply(int fd, int status, const char *content_type, const char *body, size_t len)
{
	char head[512];
	int n = snprintf(head, sizeof head,
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
			 status, reason(status), content_type, len);
	return send_all(fd, head, (size_t)n) < 0 || send_all(fd, body, len) < 0 ? -1 : 0;
}

void ca_http_close(int fd)
{
	shutdown(fd, SHUT_WR);
	/* A client still sending (a body over the bound, without Expect) gets our reply before the close. */
	char sink[65536];
	double deadline = now_s() + 2;
	size_t total = 0;
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	while (total < ((size_t)64 << 20) && now_s() < deadline && poll(&pfd, 1, 200) > 0) {
		ssize_t n = recv(fd, sink, sizeof sink, 0);
		if (n <= 0)
			break;
		total += (size_t)n;
	}
	close(fd);
}

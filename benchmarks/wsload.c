/* wsload: a closed-loop WebSocket load generator, the WebSocket counterpart of `wrk -t1`.
 *
 * Debian 12 packages no compiled WebSocket load generator (tcpkali left the archive), and a
 * Python client would spend more CPU than the no-op server it measures, so `scripts/bench`
 * compiles this file (libc only) with `cc -O2`. One thread, epoll, N connections; each
 * connection upgrades with its own bearer token, sends one opening message (the A2E
 * handshake) and then, until the deadline, one message at a time: it sends a request and
 * waits for `--frames` text frames back (a configure is answered by its response and its
 * status event) before the next. Latency is from the send to the last expected frame.
 *
 *   wsload --host 127.0.0.1 --port P --path /a2e --connections 16 --duration 5 \
 *          --tokens FILE --open '{"type":"handshake/req",...}' \
 *          --message '{"type":"toolkit/configure/req",...,"n":%d}' --frames 2
 *
 * `%d` in the message is replaced by a counter, so every request is distinct. Prints one
 * JSON object: requests, seconds, requests_per_s, p50_ms, p99_ms, errors (frames carrying
 * "type":"error", and connections lost), error_sample (the first such frame, cut short).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 1024
#define BUF 65536

enum state { UPGRADING, OPENING, RUNNING, CLOSED };

struct conn {
    int fd;
    enum state state;
    char out[BUF];
    size_t out_len, out_off;
    char in[4 * BUF];
    size_t in_len;
    int frames_left;
    double sent_at;
};

static struct conn conns[MAX_CONNS];
static char tokens[MAX_CONNS][256];
static int token_count;
static const char *host = "127.0.0.1", *path = "/a2e", *open_msg = NULL, *message = NULL;
static int port = 0, nconns = 1, frames = 1;
static double duration = 5.0;
static long counter = 0, requests = 0, errors = 0;
static char error_sample[201];
static double *lat = NULL;
static size_t lat_len = 0, lat_cap = 0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "wsload: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void record(double seconds) {
    if (lat_len == lat_cap) {
        lat_cap = lat_cap ? lat_cap * 2 : 65536;
        lat = realloc(lat, lat_cap * sizeof *lat);
        if (!lat) die("realloc");
    }
    lat[lat_len++] = seconds;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Queue one masked text frame (clients must mask; a fixed mask is allowed by RFC 6455's
 * letter if not its spirit, and costs the server the same). */
static void queue_frame(struct conn *c, const char *text) {
    char payload[BUF / 2];
    size_t n;
    if (strstr(text, "%d")) {
        n = (size_t)snprintf(payload, sizeof payload, text, (int)++counter);
    } else {
        n = strlen(text);
        memcpy(payload, text, n);
    }
    unsigned char *p = (unsigned char *)c->out;
    size_t h = 0;
    p[h++] = 0x81;
    if (n < 126) {
        p[h++] = 0x80 | (unsigned char)n;
    } else {
        p[h++] = 0x80 | 126;
        p[h++] = (unsigned char)(n >> 8);
        p[h++] = (unsigned char)n;
    }
    static const unsigned char mask[4] = {0x37, 0xfa, 0x21, 0x3d};
    memcpy(p + h, mask, 4);
    h += 4;
    for (size_t i = 0; i < n; i++) p[h + i] = (unsigned char)payload[i] ^ mask[i & 3];
    c->out_len = h + n;
    c->out_off = 0;
}

static void flush(struct conn *c) {
    while (c->out_off < c->out_len) {
        ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (w < 0) {
            if (errno == EAGAIN) return;
            c->state = CLOSED;
            errors++;
            return;
        }
        c->out_off += (size_t)w;
    }
}

static void send_request(struct conn *c) {
    queue_frame(c, message);
    c->frames_left = frames;
    c->sent_at = now();
    flush(c);
}

static void on_text(struct conn *c, const char *payload, size_t len, double deadline) {
    if (memmem(payload, len, "\"type\":\"error\"", 14)) {
        if (!errors) snprintf(error_sample, sizeof error_sample, "%.*s", (int)len, payload);
        errors++;
    }
    if (c->state == OPENING) {
        c->state = RUNNING;
        send_request(c);
        return;
    }
    if (--c->frames_left > 0) return;
    double t = now();
    requests++;
    record(t - c->sent_at);
    if (t < deadline) send_request(c);
}

/* Consume every complete frame in the input buffer. */
static void parse_frames(struct conn *c, double deadline) {
    size_t off = 0;
    for (;;) {
        unsigned char *p = (unsigned char *)c->in + off;
        size_t avail = c->in_len - off;
        if (avail < 2) break;
        int opcode = p[0] & 0x0f;
        uint64_t n = p[1] & 0x7f;
        size_t h = 2;
        if (n == 126) {
            if (avail < 4) break;
            n = ((uint64_t)p[2] << 8) | p[3];
            h = 4;
        } else if (n == 127) {
            if (avail < 10) break;
            n = 0;
            for (int i = 0; i < 8; i++) n = (n << 8) | p[2 + i];
            h = 10;
        }
        if (n > sizeof c->in - 16) {
            fprintf(stderr, "wsload: a frame of %llu bytes is too large\n", (unsigned long long)n);
            exit(2);
        }
        if (avail < h + n) break;
        if (opcode == 0x1 || opcode == 0x0) {
            on_text(c, (const char *)p + h, (size_t)n, deadline);
        } else if (opcode == 0x8) {
            c->state = CLOSED;
            errors++;
            if (!error_sample[0]) snprintf(error_sample, sizeof error_sample, "closed by server");
            return;
        } else if (opcode == 0x9) { /* ping: answer with a masked pong of the same payload */
            char pong[140];
            size_t m = n < 125 ? (size_t)n : 125;
            pong[0] = (char)0x8a;
            pong[1] = (char)(0x80 | m);
            memset(pong + 2, 0, 4);
            memcpy(pong + 6, p + h, m);
            if (write(c->fd, pong, 6 + m) < 0) c->state = CLOSED;
        }
        off += h + n;
        if (c->state == CLOSED) return;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
}

static void on_readable(struct conn *c, double deadline) {
    for (;;) {
        ssize_t r = read(c->fd, c->in + c->in_len, sizeof c->in - c->in_len);
        if (r < 0 && errno == EAGAIN) break;
        if (r <= 0) {
            if (c->state != CLOSED) errors++;
            c->state = CLOSED;
            return;
        }
        c->in_len += (size_t)r;
        if (c->state == UPGRADING) {
            char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
            if (!end) continue;
            if (strncmp(c->in, "HTTP/1.1 101", 12) != 0) {
                snprintf(error_sample, sizeof error_sample, "upgrade refused: %.60s", c->in);
                errors++;
                c->state = CLOSED;
                return;
            }
            size_t used = (size_t)(end + 4 - c->in);
            memmove(c->in, c->in + used, c->in_len - used);
            c->in_len -= used;
            c->state = OPENING;
            queue_frame(c, open_msg ? open_msg : message);
            flush(c);
            if (!open_msg) c->state = RUNNING, c->frames_left = frames, c->sent_at = now();
        }
        parse_frames(c, deadline);
        if (c->state == CLOSED) return;
    }
}

static void usage(void) {
    fprintf(stderr,
            "usage: wsload --port P [--host H] [--path /a2e] [--connections N] [--duration S]\n"
            "              [--tokens FILE] [--open MESSAGE] --message MESSAGE [--frames K]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *token_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage();
        if (!strcmp(a, "--host")) host = v;
        else if (!strcmp(a, "--port")) port = atoi(v);
        else if (!strcmp(a, "--path")) path = v;
        else if (!strcmp(a, "--connections")) nconns = atoi(v);
        else if (!strcmp(a, "--duration")) duration = atof(v);
        else if (!strcmp(a, "--tokens")) token_file = v;
        else if (!strcmp(a, "--open")) open_msg = v;
        else if (!strcmp(a, "--message")) message = v;
        else if (!strcmp(a, "--frames")) frames = atoi(v);
        else usage();
        i++;
    }
    if (!port || !message || nconns < 1 || nconns > MAX_CONNS || frames < 1) usage();
    if (token_file) {
        FILE *f = fopen(token_file, "r");
        if (!f) die("tokens");
        while (token_count < MAX_CONNS && fgets(tokens[token_count], 256, f)) {
            tokens[token_count][strcspn(tokens[token_count], "\r\n")] = 0;
            if (tokens[token_count][0]) token_count++;
        }
        fclose(f);
    }
    int ep = epoll_create1(0);
    if (ep < 0) die("epoll");
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) usage();
    for (int i = 0; i < nconns; i++) {
        struct conn *c = &conns[i];
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect");
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        char auth[300] = "";
        if (token_count)
            snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", tokens[i % token_count]);
        c->out_len = (size_t)snprintf(
            c->out, sizeof c->out,
            "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s\r\n",
            path, host, port, auth);
        c->out_off = 0;
        flush(c);
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
    }
    double started = now(), deadline = started + duration;
    struct epoll_event events[MAX_CONNS];
    for (;;) {
        int open = 0, busy = 0;
        for (int i = 0; i < nconns; i++) {
            if (conns[i].state != CLOSED) open++;
            if (conns[i].state != CLOSED && (conns[i].state != RUNNING || conns[i].frames_left))
                busy++;
        }
        double t = now();
        if (!open || (t >= deadline && !busy) || t > deadline + 30) break;
        int n = epoll_wait(ep, events, MAX_CONNS, 100);
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (c->state == CLOSED) continue;
            if (events[i].events & EPOLLOUT) flush(c);
            if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c, deadline);
        }
    }
    double elapsed = now() - started;
    for (int i = 0; i < nconns; i++) close(conns[i].fd);
    qsort(lat, lat_len, sizeof *lat, cmp);
    double p50 = lat_len ? lat[lat_len / 2] : 0, p99 = lat_len ? lat[(lat_len * 99) / 100] : 0;
    for (char *s = error_sample; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) *s = '\'';
    printf("{\"requests\": %ld, \"seconds\": %.3f, \"requests_per_s\": %.1f, \"p50_ms\": %.3f, "
           "\"p99_ms\": %.3f, \"errors\": %ld, \"error_sample\": \"%s\"}\n",
           requests, elapsed, requests / elapsed, p50 * 1000, p99 * 1000, errors, error_sample);
    return 0;
}

// nullproxy: the floor for any proxy process in bench/run.sh. A one-thread
// epoll TCP forwarder with no protocol logic: accept, connect to the target,
// copy bytes both ways (TCP_NODELAY, a 64 KiB buffer per direction, reading
// paused while its buffer waits for the peer), close both on EOF or error.
// Whatever a pooler costs beyond this is its own work.
//
//   cc -O2 -o nullproxy bench/nullproxy.c && ./nullproxy TARGET_PORT [TARGET_IP]
// Listens on 127.0.0.1 at a free port, printed as the first line of stdout.
#define _GNU_SOURCE  // accept4
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct end {  // one socket; buf holds bytes read from it, not yet written to its peer
  int fd;
  struct end *peer;
  size_t len, off;
  char buf[65536];
};
static int ep;

static void watch(struct end *e, int op) {  // read while our buffer is empty, write while the peer's is not
  struct epoll_event ev = {.events = (e->len ? 0 : EPOLLIN) | (e->peer->len ? EPOLLOUT : 0), .data.ptr = e};
  epoll_ctl(ep, op, e->fd, &ev);
}
// Writes what `from` read to its peer; 0 when all is written or the rest must wait, -1 on error.
static int flush(struct end *from) {
  while (from->off < from->len) {
    ssize_t n = write(from->peer->fd, from->buf + from->off, from->len - from->off);
    if (n < 0) return errno == EAGAIN ? 0 : -1;
    from->off += (size_t)n;
  }
  from->len = from->off = 0;
  return 0;
}
static int nonblocking_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fcntl(fd, F_SETFL, O_NONBLOCK);
}

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: nullproxy TARGET_PORT [TARGET_IP]\n"), 2;
  signal(SIGPIPE, SIG_IGN);
  struct sockaddr_in target = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
  inet_pton(AF_INET, argc > 2 ? argv[2] : "127.0.0.1", &target.sin_addr);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (bind(lfd, (struct sockaddr *)&addr, len) || listen(lfd, 1024) || getsockname(lfd, (struct sockaddr *)&addr, &len))
    return perror("listen"), 1;
  printf("%d\n", ntohs(addr.sin_port));
  fflush(stdout);
  ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev);
  struct epoll_event evs[64];
  struct end *dead[128];  // pairs closed in this batch, freed after it (later events may name them)
  for (;;) {
    int ndead = 0, nev = epoll_wait(ep, evs, 64, -1);
    for (int i = 0; i < nev; ++i) {
      struct end *e = evs[i].data.ptr;
      if (e != NULL && e->fd < 0) continue;
      if (e == NULL) {  // a new client: connect to the target at once (blocking; it is local)
        int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), tfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (cfd < 0 || connect(tfd, (struct sockaddr *)&target, sizeof target) != 0) {
          close(cfd), close(tfd);
          continue;
        }
        // malloc, not calloc: an idle client's buffers stay untouched (not resident).
        struct end *a = malloc(sizeof *a), *b = malloc(sizeof *b);
        a->fd = cfd, a->peer = b, a->len = a->off = 0;
        b->fd = tfd, b->peer = a, b->len = b->off = 0;
        nonblocking_nodelay(cfd), nonblocking_nodelay(tfd);
        watch(a, EPOLL_CTL_ADD), watch(b, EPOLL_CTL_ADD);
        continue;
      }
      int bad = (evs[i].events & EPOLLOUT) && flush(e->peer) < 0;  // e's peer's bytes can go out now
      if (!bad && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && e->len == 0) {
        ssize_t n = read(e->fd, e->buf, sizeof e->buf);
        if (n <= 0 && !(n < 0 && errno == EAGAIN)) bad = 1;
        if (n > 0) e->len = (size_t)n, bad = flush(e) < 0;
      }
      if (bad) {
        close(e->fd), close(e->peer->fd);
        e->fd = e->peer->fd = -1;
        dead[ndead++] = e;
        continue;
      }
      watch(e, EPOLL_CTL_MOD), watch(e->peer, EPOLL_CTL_MOD);
    }
    for (int i = 0; i < ndead; ++i) free(dead[i]->peer), free(dead[i]);
  }
}

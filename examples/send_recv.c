/*
 * send_recv: point-to-point messaging between 4 ranks in one process.
 *
 * nexar_bootstrap_local() creates every rank of a world inside this process,
 * connected over loopback QUIC exactly as separate processes would be. Each
 * rank is then driven by its own thread, the way each process of a real job
 * would drive its one rank. The program shows:
 *
 *   1. a blocking ring pass: a message travels 0 -> 1 -> 2 -> 3 -> 0, each rank
 *      appending its number;
 *   2. a non-blocking exchange: every rank posts a receive from its left
 *      neighbour and a send to its right one, then waits for both;
 *   3. tags: two messages sent with different tags are received in the
 *      opposite order, because a receive matches on (source, tag);
 *   4. probe: a receiver learns the length of a message before receiving it.
 *
 * Build: part of the nexar build (example_send_recv). Run: ./example_send_recv
 * Exit status 0 when every check passed.
 */
#include <nexar/nexar.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORLD 4

/* Tags are 32-bit numbers chosen by the application. */
#define TAG_RING 1
#define TAG_NB 2
#define TAG_FIRST 10
#define TAG_SECOND 11
#define TAG_PROBE 20

#define NB_BYTES (64 * 1024)

/* Reports a failed call with the library's explanation and leaves the rank. */
#define CHECK(call)                                                                                \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != NEXAR_OK) {                                                                         \
      fprintf(stderr, "rank %u: %s failed: %s (%s)\n", me, #call, nexar_strerror(rc_),             \
              nexar_last_error());                                                                 \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

/* Reports a wrong result and leaves the rank. */
#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "rank %u: check failed: ", me);                                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

/* The message of the ring pass: how many ranks it has visited, and which. */
typedef struct ring_msg {
  uint32_t hops;
  uint32_t trail[WORLD];
} ring_msg;

/* 1. Blocking ring: rank 0 starts, everyone else receives then forwards. */
static int ring_pass(nexar_client *c) {
  uint32_t me = nexar_rank(c), n = nexar_world_size(c);
  uint32_t right = (me + 1) % n, left = (me + n - 1) % n;
  ring_msg m;
  memset(&m, 0, sizeof m);
  if (me == 0) {
    m.trail[m.hops++] = me;
    CHECK(nexar_send(c, &m, sizeof m, right, TAG_RING));
    CHECK(nexar_recv(c, &m, sizeof m, left, TAG_RING)); /* back home */
    EXPECT(m.hops == n, "ring came back after %u hops, expected %u", m.hops, n);
    for (uint32_t i = 0; i < n; i++)
      EXPECT(m.trail[i] == i, "ring trail[%u] = %u, expected %u", i, m.trail[i], i);
    printf("rank 0: ring pass ok, trail 0");
    for (uint32_t i = 1; i < n; i++)
      printf(" -> %u", m.trail[i]);
    printf(" -> 0\n");
  } else {
    CHECK(nexar_recv(c, &m, sizeof m, left, TAG_RING));
    EXPECT(m.hops == me, "ring reached rank %u after %u hops", me, m.hops);
    m.trail[m.hops++] = me;
    CHECK(nexar_send(c, &m, sizeof m, right, TAG_RING));
  }
  return 0;
}

/* 2. Non-blocking exchange: post both operations, then wait for both. Two
 * blocking sends facing each other could wait on each other; _nb cannot. */
static int nonblocking_exchange(nexar_client *c) {
  uint32_t me = nexar_rank(c), n = nexar_world_size(c);
  uint32_t right = (me + 1) % n, left = (me + n - 1) % n;
  unsigned char *out = malloc(NB_BYTES), *in = malloc(NB_BYTES);
  if (out == NULL || in == NULL) {
    free(out);
    free(in);
    fprintf(stderr, "rank %u: out of memory\n", me);
    return 1;
  }
  for (size_t i = 0; i < NB_BYTES; i++)
    out[i] = (unsigned char)(me * 31 + i);
  memset(in, 0, NB_BYTES);

  nexar_request *reqs[2] = {NULL, NULL};
  int rc = nexar_recv_nb(c, in, NB_BYTES, left, TAG_NB, &reqs[0]);
  if (rc == NEXAR_OK) {
    rc = nexar_send_nb(c, out, NB_BYTES, right, TAG_NB, &reqs[1]);
    if (rc != NEXAR_OK) {
      nexar_abort(c);      /* the posted receive would never be matched... */
      nexar_wait(reqs[0]); /* ...and now fails at once; wait frees it */
    }
  }
  /* The buffers must stay untouched until the requests finish. nexar_wait_all
   * waits for both, frees them and returns the first error. */
  if (rc == NEXAR_OK) rc = nexar_wait_all(reqs, 2);
  int bad = 0;
  for (size_t i = 0; rc == NEXAR_OK && i < NB_BYTES; i++)
    if (in[i] != (unsigned char)(left * 31 + i)) bad = 1;
  free(out);
  free(in);
  CHECK(rc);
  EXPECT(!bad, "non-blocking data from rank %u is wrong", left);
  printf("rank %u: non-blocking exchange ok (%d bytes from rank %u)\n", me, NB_BYTES, left);
  return 0;
}

/* 3. Tags: send FIRST then SECOND, receive SECOND then FIRST. Sends are
 * non-blocking so that the out-of-order receives cannot hold them up. */
static int tag_matching(nexar_client *c) {
  uint32_t me = nexar_rank(c), n = nexar_world_size(c);
  uint32_t right = (me + 1) % n, left = (me + n - 1) % n;
  uint32_t first = 1000 + me, second = 2000 + me, got1 = 0, got2 = 0;
  nexar_request *sends[2] = {NULL, NULL};
  CHECK(nexar_send_nb(c, &first, sizeof first, right, TAG_FIRST, &sends[0]));
  int rc = nexar_send_nb(c, &second, sizeof second, right, TAG_SECOND, &sends[1]);
  if (rc == NEXAR_OK) rc = nexar_recv(c, &got2, sizeof got2, left, TAG_SECOND);
  if (rc == NEXAR_OK) rc = nexar_recv(c, &got1, sizeof got1, left, TAG_FIRST);
  if (rc != NEXAR_OK) nexar_abort(c); /* pending sends then finish at once, failed */
  int rc2 = sends[1] ? nexar_wait_all(sends, 2) : nexar_wait(sends[0]);
  CHECK(rc);
  CHECK(rc2);
  EXPECT(got1 == 1000 + left && got2 == 2000 + left, "tagged messages %u/%u from rank %u", got1,
         got2, left);
  printf("rank %u: tags ok (tag %d -> %u, tag %d -> %u, received in reverse order)\n", me,
         TAG_SECOND, got2, TAG_FIRST, got1);
  return 0;
}

/* 4. Probe: the message length depends on the sender, so the receiver asks
 * first (without consuming the message), then allocates and receives. */
static int probe_then_receive(nexar_client *c) {
  uint32_t me = nexar_rank(c), n = nexar_world_size(c);
  uint32_t right = (me + 1) % n, left = (me + n - 1) % n;
  char text[64];
  int len =
      snprintf(text, sizeof text, "greetings from rank %u%.*s", me, (int)me * 3, "!!!!!!!!!!!!");
  nexar_request *send = NULL;
  CHECK(nexar_send_nb(c, text, (size_t)len, right, TAG_PROBE, &send));

  uint32_t src = UINT32_MAX;
  size_t any_len = 0, probed = 0;
  int rc = nexar_probe_any(c, TAG_PROBE, &src, &any_len); /* who sent what? */
  if (rc == NEXAR_OK) rc = nexar_probe(c, left, TAG_PROBE, &probed);
  char *buf = NULL;
  if (rc == NEXAR_OK) {
    buf = calloc(1, probed + 1); /* + 1 for the terminating NUL */
    if (buf == NULL) rc = NEXAR_ERR_NOMEM;
  }
  if (rc == NEXAR_OK) rc = nexar_recv(c, buf, probed, left, TAG_PROBE);
  if (rc != NEXAR_OK) nexar_abort(c); /* the send then finishes at once, failed */
  int rc2 = nexar_wait(send);
  if (rc != NEXAR_OK || rc2 != NEXAR_OK) free(buf);
  CHECK(rc);
  CHECK(rc2);
  char want[64];
  int want_len = snprintf(want, sizeof want, "greetings from rank %u%.*s", left, (int)left * 3,
                          "!!!!!!!!!!!!");
  int ok = src == left && any_len == probed && probed == (size_t)want_len && strcmp(buf, want) == 0;
  if (ok) printf("rank %u: probe ok (%zu bytes from rank %u: \"%s\")\n", me, probed, src, buf);
  free(buf);
  EXPECT(ok, "probe saw %zu bytes from rank %u, expected %d from rank %u", any_len, src, want_len,
         left);
  return 0;
}

typedef struct rank_job {
  nexar_client *c;
  int failed;
} rank_job;

/* Everything one rank does, on its own thread. */
static void *rank_main(void *arg) {
  rank_job *job = arg;
  job->failed = ring_pass(job->c) || nonblocking_exchange(job->c) || tag_matching(job->c) ||
                probe_then_receive(job->c);
  /* A failed rank aborts its communicator: its peers are told at once, so
   * the other threads fail fast instead of waiting for a timeout. */
  if (job->failed) nexar_abort(job->c);
  return NULL;
}

int main(void) {
  nexar_client *clients[WORLD];
  int rc = nexar_bootstrap_local(clients, WORLD, NULL); /* NULL: defaults + NEXAR_* env */
  if (rc != NEXAR_OK) {
    fprintf(stderr, "nexar_bootstrap_local: %s (%s)\n", nexar_strerror(rc), nexar_last_error());
    return 1;
  }

  rank_job jobs[WORLD];
  pthread_t threads[WORLD];
  int failed = 0;
  for (uint32_t r = 0; r < WORLD; r++) {
    jobs[r].c = clients[r];
    jobs[r].failed = 1;
    if (pthread_create(&threads[r], NULL, rank_main, &jobs[r]) != 0) {
      fprintf(stderr, "cannot start a thread for rank %u\n", r);
      /* Ranks already running would wait for this one forever: abort them. */
      for (uint32_t k = 0; k < WORLD; k++)
        nexar_abort(clients[k]);
      for (uint32_t k = 0; k < r; k++)
        pthread_join(threads[k], NULL);
      for (uint32_t k = 0; k < WORLD; k++)
        nexar_client_del(clients[k]);
      return 1;
    }
  }
  for (uint32_t r = 0; r < WORLD; r++) {
    pthread_join(threads[r], NULL);
    failed |= jobs[r].failed;
  }
  for (uint32_t r = 0; r < WORLD; r++)
    nexar_client_del(clients[r]);

  printf("send_recv: %s\n", failed ? "FAILED" : "all checks passed");
  return failed ? 1 : 0;
}

/*
 * One rank of the process tests of the shared-memory rings (shm_proc_test.sh).
 *
 *   shm_worker order|kill|forge|coll|bind|faults
 *
 * Every mode joins with nexar_init_from_env, waits (5 s at most) until its
 * rings to every peer are up (nexar_peer_stats.shm >= 2) and prints
 *
 *   rank R: ready pid P
 *
 * order: a mixed sequence of sizes around every threshold to the right
 *   neighbour (non-blocking, one tag) and the left one's received in order and
 *   checked; point-to-point must have gone by the ring (shm 3, shm bytes
 *   counted); then all_reduce, broadcast, all_gather, reduce_scatter and
 *   all_to_all around the ring's collective limit, checked exactly. Exit 0.
 * kill: rank 1 sends numbered messages of varying sizes to rank 0 as fast
 *   as it can until it is SIGKILLed (by the script, while it writes); rank 0
 *   receives and checks them until a receive fails and prints
 *     rank 0: recv #K failed with CODE at U
 *   (U: CLOCK_REALTIME ms). Exit 0 if CODE is PEER_LOST, 3 otherwise, 4 if a
 *   message before was wrong.
 * forge: ranks 0 and 1 ping-pong until a call fails (a third process writes
 *   garbage into their segment), then print
 *     rank R: failed with CODE shm_dropped=N
 *   Exit 0 (the script judges), 4 if a message was wrong, 2 if nothing failed
 *   within 20 s.
 * faults: ranks 0 and 1 ping-pong 3000 messages of 1 KiB each way (each
 *   ring wraps: 2 MiB a direction) and print the page faults the process
 *   took meanwhile
 *     rank R: faults N
 *   (segments mapped whole at set-up take none; the script judges).
 * coll: every rank runs blocking all_reduce of 16 floats (the communicator's
 *   shared-memory segment), every other call a broadcast or all_gather too
 *   large for its buffers (streamed; single copy), and between those bursts of 64
 *   small broadcasts (the root's ring), in a loop, checked exactly, until
 *   one fails (a rank killed, a third process writing into the segment),
 *   then prints
 *     rank R: all_reduce #K failed with CODE at U: why
 *   Exit 0 (the script judges), 4 if a result was wrong, 2 after 20 s.
 */
#include <nexar/nexar.h>

#include "codes.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static uint8_t pat(uint32_t from, size_t k, size_t i) {
  return (uint8_t)(from * 31u + k * 7u + i);
}

static const size_t SIZES[] = {
    0,      1,      8,      4095,   4096,           32767,         32768,    32769,
    65536,  262143, 262144, 262145, 300000,         1u << 20,      2u << 20, 3000,
    100000, 200000, 5,      250000, (1u << 20) - 1, (1u << 20) + 1};
#define NS (sizeof SIZES / sizeof SIZES[0])

#define DIE(code, ...)                                                                             \
  do {                                                                                             \
    printf("rank %u: FAIL ", me);                                                                  \
    printf(__VA_ARGS__);                                                                           \
    printf(" (%s)\n", nexar_last_error());                                                         \
    fflush(stdout);                                                                                \
    exit(code);                                                                                    \
  } while (0)

static uint32_t me, W;

static nexar_peer_stats stats(nexar_client *c, uint32_t peer) {
  nexar_peer_stats st;
  memset(&st, 0, sizeof st);
  nexar_peer_stats_get(c, peer, &st);
  return st;
}

static void check_f32(const float *v, size_t n, float (*want)(size_t), const char *what) {
  for (size_t i = 0; i < n; i++)
    if (v[i] != want(i)) DIE(4, "%s: element %zu of %zu is %g, not %g", what, i, n, v[i], want(i));
}

static float w_allreduce(size_t i) {
  return (float)(W * (W - 1) / 2 + W * (i % 1000));
}
static float w_bcast(size_t i) {
  return (float)(1000 + i % 977);
}

static void order(nexar_client *c) {
  uint32_t right = (me + 1) % W, left = (me + W - 1) % W;
  size_t n = NS * 2;
  uint8_t **sb = calloc(3 * NS, sizeof *sb); /* the mixed phase sends up to 3 * NS */
  nexar_request **rq = calloc(3 * NS, sizeof *rq);
  uint8_t *rb = malloc(2u << 20);
  for (size_t k = 0; k < n; k++) {
    size_t len = SIZES[k % NS];
    sb[k] = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
      sb[k][i] = pat(me, k, i);
    if (nexar_send_nb(c, sb[k], len, right, 7, &rq[k])) DIE(3, "send_nb %zu", k);
  }
  for (size_t k = 0; k < n; k++) {
    size_t len = SIZES[k % NS];
    int rc = nexar_recv(c, rb, len, left, 7);
    if (rc) DIE(3, "recv %zu (%zu bytes): %s", k, len, nexar_strerror(rc));
    for (size_t i = 0; i < len; i++)
      if (rb[i] != pat(left, k, i)) DIE(4, "message %zu (%zu bytes) byte %zu wrong", k, len, i);
  }
  for (size_t k = 0; k < n; k++) {
    if (nexar_wait(rq[k])) DIE(3, "send %zu", k);
    free(sb[k]);
  }
  /* blocking sends (the ring takes them at once, or they queue behind what
   * waits for room) between non-blocking ones, more than a ring holds, all
   * eager (every rank sends before it receives): the order must hold */
  size_t m = 0;
  for (int round = 0; round < 3; round++)
    for (size_t k = 0; k < NS; k++) {
      size_t len = SIZES[k];
      if (len > 262144) continue;
      sb[m] = malloc(len ? len : 1);
      for (size_t i = 0; i < len; i++)
        sb[m][i] = pat(me, m + 1000, i);
      int rc = m % 2 ? nexar_send_nb(c, sb[m], len, right, 8, &rq[m])
                     : nexar_send(c, sb[m], len, right, 8);
      if (rc) DIE(3, "mixed send %zu (%zu bytes)", m, len);
      if (!(m % 2)) rq[m] = NULL;
      m++;
    }
  for (size_t k = 0, q = 0; q < m; k++) {
    size_t len = SIZES[k % NS];
    if (len > 262144) continue;
    int rc = nexar_recv(c, rb, len, left, 8);
    if (rc) DIE(3, "mixed recv %zu (%zu bytes): %s", q, len, nexar_strerror(rc));
    for (size_t i = 0; i < len; i++)
      if (rb[i] != pat(left, q + 1000, i))
        DIE(4, "mixed message %zu (%zu bytes) byte %zu wrong", q, len, i);
    q++;
  }
  for (size_t k = 0; k < m; k++) {
    if (rq[k] && nexar_wait(rq[k])) DIE(3, "mixed send %zu", k);
    free(sb[k]);
  }
  nexar_peer_stats st = stats(c, right);
  if (st.shm != 3 || st.shm_bytes_sent == 0)
    DIE(4, "point-to-point to rank %u did not go by the ring (shm %d, %llu bytes)", right, st.shm,
        (unsigned long long)st.shm_bytes_sent);
  /* 300000 and 700001 floats: above a rank's buffer, all_reduce in
   * consecutive chunks (the last a partial one) */
  static const size_t COUNTS[] = {1, 255, 8191, 8192, 8193, 40000, 300000, 700001};
  size_t maxc = 700001 * W;
  float *a = malloc(maxc * sizeof *a), *b = malloc(maxc * sizeof *b);
  for (size_t q = 0; q < sizeof COUNTS / sizeof *COUNTS; q++) {
    size_t cnt = COUNTS[q];
    for (size_t i = 0; i < cnt; i++)
      a[i] = (float)(me + i % 1000);
    if (nexar_all_reduce(c, a, cnt, NEXAR_F32, NEXAR_SUM)) DIE(3, "all_reduce %zu", cnt);
    check_f32(a, cnt, w_allreduce, "all_reduce");
    uint32_t root = (uint32_t)(q % W);
    for (size_t i = 0; i < cnt; i++)
      a[i] = me == root ? w_bcast(i) : -1.0f;
    if (nexar_broadcast(c, a, cnt, NEXAR_F32, root)) DIE(3, "broadcast %zu", cnt);
    check_f32(a, cnt, w_bcast, "broadcast");
    for (size_t i = 0; i < cnt; i++)
      a[i] = (float)(me * 100000 + i % 99991);
    if (nexar_all_gather(c, a, b, cnt, NEXAR_F32)) DIE(3, "all_gather %zu", cnt);
    for (uint32_t r = 0; r < W; r++)
      for (size_t i = 0; i < cnt; i++)
        if (b[r * cnt + i] != (float)(r * 100000 + i % 99991)) DIE(4, "all_gather %zu", cnt);
    for (size_t i = 0; i < cnt * W; i++)
      a[i] = (float)(me + i % 1000);
    if (nexar_reduce_scatter(c, a, b, cnt, NEXAR_F32, NEXAR_SUM)) DIE(3, "reduce_scatter %zu", cnt);
    for (size_t i = 0; i < cnt; i++)
      if (b[i] != (float)(W * (W - 1) / 2 + W * ((me * cnt + i) % 1000)))
        DIE(4, "reduce_scatter %zu element %zu", cnt, i);
    for (uint32_t r = 0; r < W; r++)
      for (size_t i = 0; i < cnt; i++)
        a[r * cnt + i] = (float)(me * 1000 + r * 10 + i % 7);
    if (nexar_all_to_all(c, a, b, cnt, NEXAR_F32)) DIE(3, "all_to_all %zu", cnt);
    for (uint32_t r = 0; r < W; r++)
      for (size_t i = 0; i < cnt; i++)
        if (b[r * cnt + i] != (float)(r * 1000 + me * 10 + i % 7)) DIE(4, "all_to_all %zu", cnt);
  }
  if (nexar_barrier(c)) DIE(3, "last barrier");
  printf("rank %u: ok, %llu bytes to rank %u by the ring\n", me,
         (unsigned long long)stats(c, right).shm_bytes_sent, right);
  free(a);
  free(b);
  free(rb);
  free(sb);
  free(rq);
}

static void kill_mode(nexar_client *c) {
  uint8_t *b = malloc(300000);
  if (me == 1) {
    for (size_t k = 0;; k++) {
      size_t len = SIZES[k % NS] % 300001;
      for (size_t i = 0; i < len; i++)
        b[i] = pat(1, k, i);
      if (nexar_send(c, b, len, 0, 5)) DIE(3, "send %zu", k);
    }
  }
  if (me != 0) {
    for (;;)
      pause();
  }
  for (size_t k = 0;; k++) {
    size_t len = SIZES[k % NS] % 300001;
    int rc = nexar_recv(c, b, len, 1, 5);
    if (rc) {
      printf("rank 0: recv #%zu failed with %s at %lld: %s\n", k, code_name(rc), unix_ms(),
             nexar_last_error());
      fflush(stdout);
      exit(rc == NEXAR_ERR_PEER_LOST ? 0 : 3);
    }
    for (size_t i = 0; i < len; i++)
      if (b[i] != pat(1, k, i)) DIE(4, "message %zu (%zu bytes) byte %zu wrong", k, len, i);
  }
}

static void forge_mode(nexar_client *c) {
  uint8_t b[4096];
  uint32_t peer = me ^ 1u;
  double t0 = mono_ms();
  for (size_t k = 0; mono_ms() - t0 < 20000; k++) {
    size_t len = 1 + k % sizeof b;
    int rc;
    if (me == 0) {
      memset(b, (int)(k & 0xff), len);
      rc = nexar_send(c, b, len, peer, 9);
      if (!rc) rc = nexar_recv(c, b, len, peer, 9);
    } else {
      rc = nexar_recv(c, b, len, peer, 9);
      /* The forger's fill (0x5a) over a record already published: a third
       * process that may write the segment can change a payload in flight,
       * which no reader can tell (it could as well write our heap). What
       * must hold: its forged records are refused, nothing crashes. Any
       * other wrong byte is ours. */
      for (size_t i = 0; !rc && i < len; i++)
        if (b[i] != (uint8_t)(k & 0xff) && b[i] != 0x5a) DIE(4, "message %zu byte %zu wrong", k, i);
      if (!rc) rc = nexar_send(c, b, len, peer, 9);
    }
    if (rc) {
      printf("rank %u: failed with %s shm_dropped=%llu: %s\n", me, code_name(rc),
             (unsigned long long)stats(c, peer).shm_dropped, nexar_last_error());
      fflush(stdout);
      exit(0);
    }
  }
  DIE(2, "nothing failed in 20 s");
}

static void coll_mode(nexar_client *c) {
  float v[16];
  /* every other call too large for the segment's buffers: a broadcast
   * streamed through its root's buffer, an all_gather by single copy
   * (process_vm_readv from the others' buffers), so a kill lands in those
   * too */
  enum { BIG = 300000 };
  float *big = malloc(BIG * sizeof *big), *all = malloc((size_t)W * BIG * sizeof *all);
  if (!big || !all) DIE(1, "out of memory");
  double t0 = mono_ms();
  for (size_t k = 0; mono_ms() - t0 < 20000; k++) {
    const char *op = "all_reduce";
    int rc;
    uint32_t add = (uint32_t)(k % 100);
    if (k % 4 == 1) {
      op = "streamed broadcast";
      uint32_t root = (uint32_t)(k / 4 % W);
      for (uint32_t i = 0; i < BIG; i++)
        big[i] = me == root ? (float)(root + i % 1000 + add) : -1.0f;
      rc = nexar_broadcast(c, big, BIG, NEXAR_F32, root);
      for (uint32_t i = 0; !rc && i < BIG; i++)
        if (big[i] != (float)(root + i % 1000 + add))
          DIE(4, "%s #%zu element %u is %g", op, k, i, big[i]);
    } else if (k % 4 == 3) {
      op = "single-copy all_gather";
      for (uint32_t i = 0; i < BIG; i++)
        big[i] = (float)(me * 7 + i % 1000 + add);
      rc = nexar_all_gather(c, big, all, BIG, NEXAR_F32);
      for (uint32_t r = 0; !rc && r < W; r++)
        for (uint32_t i = 0; i < BIG; i++)
          if (all[(size_t)r * BIG + i] != (float)(r * 7 + i % 1000 + add))
            DIE(4, "%s #%zu rank %u element %u is %g", op, k, r, i, all[(size_t)r * BIG + i]);
    } else if (k % 4 == 2) {
      /* a burst of small broadcasts through the root's ring (its root runs
       * ahead of its readers) */
      op = "small broadcast";
      uint32_t root = (uint32_t)(k / 4 % W);
      rc = 0;
      for (uint32_t b = 0; !rc && b < 64; b++) {
        for (int i = 0; i < 16; i++)
          v[i] = me == root ? (float)(root + b + (uint32_t)i + add) : -1.0f;
        rc = nexar_broadcast(c, v, 16, NEXAR_F32, root);
        for (int i = 0; !rc && i < 16; i++)
          if (v[i] != (float)(root + b + (uint32_t)i + add))
            DIE(4, "%s #%zu.%u element %d is %g", op, k, b, i, v[i]);
      }
    } else {
      for (int i = 0; i < 16; i++)
        v[i] = (float)(me + (uint32_t)i + add);
      rc = nexar_all_reduce(c, v, 16, NEXAR_F32, NEXAR_SUM);
      for (int i = 0; !rc && i < 16; i++)
        if (v[i] != (float)(W * (W - 1) / 2 + W * ((uint32_t)i + add)))
          DIE(4, "all_reduce #%zu element %d is %g", k, i, v[i]);
    }
    if (rc) {
      printf("rank %u: %s #%zu failed with %s at %lld: %s\n", me, op, k, code_name(rc), unix_ms(),
             nexar_last_error());
      fflush(stdout);
      exit(0);
    }
  }
  DIE(2, "nothing failed in 20 s");
}

/* The CPUs a thread of this process may run on, as the kernel lists them. */
static void cpus_of(const char *tid, char *out, size_t cap) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
  snprintf(out, cap, "?");
  FILE *f = fopen(path, "r");
  if (!f) return;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "Cpus_allowed_list:", 18)) {
      char *v = line + 18;
      v += strspn(v, " \t");
      v[strcspn(v, "\n")] = 0;
      snprintf(out, cap, "%s", v);
    }
  fclose(f);
}

/* NEXAR_CPU_BIND: the CPUs of the thread that formed the world and of the
 * library's threads (shm_proc_test.sh compares the ranks' lists). */
static void bind_mode(nexar_client *c) {
  char tid[32], mine[128], lib[128] = "", cur[128];
  snprintf(tid, sizeof tid, "%d", (int)getpid()); /* the main thread */
  cpus_of(tid, mine, sizeof mine);
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.' && strcmp(e->d_name, tid)) {
      cpus_of(e->d_name, cur, sizeof cur);
      if (!lib[0] || strlen(cur) > strlen(lib)) snprintf(lib, sizeof lib, "%s", cur);
    }
  if (d) closedir(d);
  printf("rank %u: cpus main=%s library=%s\n", me, mine, lib);
  if (nexar_barrier(c)) DIE(3, "bind barrier");
}

/* Page faults of a ping-pong once the rings are up (getrusage: every thread
 * of the process, as the library's may poll the rings too). */
static void faults_mode(nexar_client *c) {
  static uint8_t buf[1024];
  struct rusage r0, r1;
  if (nexar_barrier(c)) DIE(3, "faults barrier");
  getrusage(RUSAGE_SELF, &r0);
  for (int i = 0; i < 3000 && me < 2; i++) {
    int rc = me == 0 ? nexar_send(c, buf, sizeof buf, 1, 9) : nexar_recv(c, buf, sizeof buf, 0, 9);
    if (!rc)
      rc = me == 0 ? nexar_recv(c, buf, sizeof buf, 1, 9) : nexar_send(c, buf, sizeof buf, 0, 9);
    if (rc) DIE(3, "ping-pong #%d", i);
  }
  getrusage(RUSAGE_SELF, &r1);
  printf("rank %u: faults %ld\n", me,
         (r1.ru_minflt - r0.ru_minflt) + (r1.ru_majflt - r0.ru_majflt));
  if (nexar_barrier(c)) DIE(3, "faults barrier");
}

int main(int argc, char **argv) {
  if (argc != 2) return 64;
  setvbuf(stdout, NULL, _IOLBF, 0);
  nexar_client *c;
  int rc = nexar_init_from_env(&c);
  if (rc) {
    printf("shm_worker: init_from_env: %s (%s)\n", nexar_strerror(rc), nexar_last_error());
    return 1;
  }
  me = nexar_rank(c);
  W = nexar_world_size(c);
  for (uint32_t j = 0; j < W; j++) {
    int ok = j == me;
    for (int t = 0; t < 500 && !ok; t++) {
      ok = stats(c, j).shm >= 2;
      if (!ok) usleep(10000);
    }
    if (!ok) DIE(5, "no shared-memory rings with rank %u after 5 s", j);
  }
  if (nexar_barrier(c)) DIE(3, "first barrier");
  printf("rank %u: ready pid %d\n", me, (int)getpid());
  if (!strcmp(argv[1], "order"))
    order(c);
  else if (!strcmp(argv[1], "kill"))
    kill_mode(c);
  else if (!strcmp(argv[1], "forge"))
    forge_mode(c);
  else if (!strcmp(argv[1], "coll"))
    coll_mode(c);
  else if (!strcmp(argv[1], "bind"))
    bind_mode(c);
  else if (!strcmp(argv[1], "faults"))
    faults_mode(c);
  else
    return 64;
  nexar_client_del(c);
  return 0;
}

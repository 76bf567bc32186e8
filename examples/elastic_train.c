/*
 * elastic_train: a toy data-parallel training loop on an elastic world that
 * grows, shrinks and loses ranks, yet ends with bit-identical parameters.
 *
 *   nexar-seed --listen 127.0.0.1:0 --world-size 2 &     # prints the address and token
 *   export NEXAR_CLUSTER_TOKEN=<token>
 *   nexar-run --join <addr> -n 2 -- ./example_elastic_train [options] &   # forms the world
 *   nexar-run --join <addr> -n 2 -- ./example_elastic_train [options]     # joins it later
 *   ./example_elastic_train --reference [options]        # one process, no nexar
 *
 * The model is a linear regression of P = 1024 float parameters w (from 0)
 * onto a fixed w*. Every step has a global batch of B samples, sample s of
 * step t having features x = f(t, s) in [-1, 1) and target y = w*.x; the
 * current world splits the batch by rank (rank r takes samples
 * [B*r/W, B*(r+1)/W)). A rank's gradient sum is accumulated in 64-bit fixed
 * point (2^-24) and the world sums it with an allreduce of NEXAR_U64 SUM, so
 * the sum is exact and does not depend on how the batch was split or in which
 * order the ranks added; every rank then applies the same update
 * w -= lr * (sum / B). The result is therefore the same for every membership
 * history, and equal to --reference.
 *
 * Membership: every K steps (--every) the ranks call nexar_elastic_checkpoint.
 * After a resize (the checkpoint returned a new view) rank 0 of that view, an
 * old member, broadcasts the state (step and w); joiners (i_am_new) receive
 * it. When a collective fails because a rank died (NEXAR_ERR_PEER_LOST, or
 * ABORTED on a communicator revoked for it), the survivors call
 * nexar_recover, rank 0 of the recovered view broadcasts its state, and the
 * interrupted step is redone from its last completed step.
 *
 * Options (each also an environment variable, which the option overrides):
 *   --steps N        ELASTIC_STEPS       steps in all (200)
 *   --every K        ELASTIC_EVERY       steps between checkpoints (10)
 *   --batch B        ELASTIC_BATCH       global batch (64)
 *   --leave R:S      ELASTIC_LEAVE       rank R leaves at the first checkpoint
 *                                        from step S on (once in the run)
 *   --kill R:S       ELASTIC_KILL        rank R raises SIGKILL before its
 *                                        step S (once in the run)
 *   --wait-world N:S ELASTIC_WAIT_WORLD  at the checkpoint of step S (a
 *                                        multiple of K), keep checkpointing
 *                                        until the world has N ranks (rank 0
 *                                        gives up after --wait-ms)
 *   --wait-ms MS     ELASTIC_WAIT_MS     (60000)
 *   --step-ms MS     ELASTIC_STEP_MS     sleep per step, to watch it (0)
 *   --reference                          the same computation in this
 *                                        process, without nexar
 * "Rank R" is the rank in the view of the moment. Every rank that finishes
 * prints "elastic_train: rank R/W steps N checksum <hex>" (FNV-1a 64 of the
 * bytes of w); --reference prints "elastic_train: reference steps N checksum
 * <hex>". A leaver prints that it left and exits 0.
 */
#include <nexar/nexar.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define P 1024               /* parameters */
#define FIX_SCALE 16777216.0 /* 2^24: gradient fixed point */
#define LOSS_SCALE 65536.0   /* 2^16: loss fixed point */
#define LR 0.05f             /* learning rate */
#define NONE UINT64_MAX      /* no step */
#define DONE_LEAVE 1u        /* the --leave has happened */
#define DONE_KILL 2u         /* the --kill has happened (a recovery followed) */
#define MAX_RECOVERIES 8

#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

typedef struct opts {
  uint64_t steps, every, batch;
  uint32_t leave_rank, kill_rank, wait_n; /* UINT32_MAX: none */
  uint64_t leave_step, kill_step, wait_step;
  uint64_t wait_ms, step_ms;
  int reference;
} opts;

/* What rank 0 broadcasts after every view change; identical on all ranks of
 * a view between steps. */
typedef struct train_state {
  uint64_t step;      /* steps completed */
  uint64_t ckpt_step; /* the step whose checkpoint ran last (NONE: none yet) */
  uint64_t done;      /* DONE_* */
  uint64_t loss_fix;  /* sum over the last step's batch of e^2, fixed point */
  float w[P];
} train_state;

static uint64_t mix64(uint64_t z) { /* splitmix64's finalizer */
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A value in [-1, 1) with 24 significant bits: exact as a float. */
static float unit(uint64_t h) {
  return (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

/* Adds the gradient of samples [lo, hi) of step t at w to acc (fixed point,
 * acc[P]: the loss). One function for the ranks and the reference, and never
 * inlined, so that both run the very same float operations. */
static NOINLINE void local_gradient(uint64_t t, uint64_t lo, uint64_t hi, const float *w,
                                    uint64_t *acc) {
  float x[P];
  for (uint64_t s = lo; s < hi; s++) {
    uint64_t base = mix64(mix64(t) + s);
    float pred = 0.0f, y = 0.0f;
    for (uint32_t j = 0; j < P; j++) {
      x[j] = unit(mix64(base + j));
      pred += w[j] * x[j];
      y += unit(mix64(0x5eedull << 32 | j)) * x[j]; /* w*_j */
    }
    float e = pred - y;
    for (uint32_t j = 0; j < P; j++)
      acc[j] += (uint64_t)(int64_t)llrint((double)(e * x[j]) * FIX_SCALE);
    acc[P] += (uint64_t)(int64_t)llrint((double)e * (double)e * LOSS_SCALE);
  }
}

/* w -= lr * mean gradient, from the exact sums; the same on every rank (the
 * sums are two's complement: GCC and Clang convert them back modulo 2^64). */
static NOINLINE void apply_update(train_state *st, const uint64_t *acc, uint64_t batch) {
  for (uint32_t j = 0; j < P; j++) {
    int64_t mean = (int64_t)acc[j] / (int64_t)batch;
    st->w[j] -= LR * (float)((double)mean / FIX_SCALE);
  }
  st->loss_fix = acc[P];
  st->step++;
}

static uint64_t checksum(const train_state *st) { /* FNV-1a 64 of the bytes of w */
  const unsigned char *p = (const unsigned char *)st->w;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof st->w; i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static double loss_of(const train_state *st, const opts *o) {
  return (double)(int64_t)st->loss_fix / LOSS_SCALE / (double)o->batch / 2.0;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(uint64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ------------------------------------------------------------ options */

static void usage(FILE *f) {
  fprintf(f,
          "usage: example_elastic_train [--reference] [--steps N] [--every K] [--batch B]\n"
          "         [--leave R:S] [--kill R:S] [--wait-world N:S] [--wait-ms MS] [--step-ms MS]\n"
          "Run under nexar-run or with NEXAR_SEED_ADDR (nexar_init_from_env); every\n"
          "option is also ELASTIC_<NAME> in the environment (ELASTIC_WAIT_WORLD=4:20).\n"
          "  --steps N        steps in all (200)\n"
          "  --every K        steps between elastic checkpoints (10)\n"
          "  --batch B        global batch, split across the ranks (64)\n"
          "  --leave R:S      rank R leaves at the first checkpoint from step S on\n"
          "  --kill R:S       rank R raises SIGKILL before its step S\n"
          "  --wait-world N:S at the checkpoint of step S, wait for N ranks\n"
          "  --wait-ms MS     how long rank 0 waits for them (60000)\n"
          "  --step-ms MS     sleep per step (0)\n"
          "  --reference      the same computation in this process, without nexar\n");
}

static int parse_u64(const char *s, uint64_t lo, uint64_t *out) {
  if (s == NULL || *s < '0' || *s > '9') return -1;
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo) return -1;
  *out = v;
  return 0;
}

/* "A:B" with A a rank or world size, B a step. */
static int parse_pair(const char *s, uint32_t *a, uint64_t *b) {
  const char *colon = s ? strchr(s, ':') : NULL;
  if (colon == NULL || colon == s || (size_t)(colon - s) > 10) return -1;
  char head[11];
  memcpy(head, s, (size_t)(colon - s));
  head[colon - s] = '\0';
  uint64_t v;
  if (parse_u64(head, 0, &v) != 0 || v >= UINT32_MAX || parse_u64(colon + 1, 0, b) != 0) return -1;
  *a = (uint32_t)v;
  return 0;
}

/* Sets the option name (e.g. "--steps") to val; 0, or -1 after a message. */
static int set_opt(opts *o, const char *name, const char *val, const char *from) {
  int bad = 0;
  if (strcmp(name, "--steps") == 0)
    bad = parse_u64(val, 0, &o->steps);
  else if (strcmp(name, "--every") == 0)
    bad = parse_u64(val, 1, &o->every);
  else if (strcmp(name, "--batch") == 0)
    bad = parse_u64(val, 1, &o->batch) || o->batch > 1000000;
  else if (strcmp(name, "--leave") == 0)
    bad = parse_pair(val, &o->leave_rank, &o->leave_step);
  else if (strcmp(name, "--kill") == 0)
    bad = parse_pair(val, &o->kill_rank, &o->kill_step);
  else if (strcmp(name, "--wait-world") == 0)
    bad = parse_pair(val, &o->wait_n, &o->wait_step) || o->wait_n == 0;
  else if (strcmp(name, "--wait-ms") == 0)
    bad = parse_u64(val, 0, &o->wait_ms);
  else if (strcmp(name, "--step-ms") == 0)
    bad = parse_u64(val, 0, &o->step_ms);
  else {
    fprintf(stderr, "elastic_train: unknown option '%s'\n", name);
    usage(stderr);
    return -1;
  }
  if (bad) {
    fprintf(stderr, "elastic_train: bad value '%s' for %s%s\n", val ? val : "", name, from);
    return -1;
  }
  return 0;
}

static int parse_opts(opts *o, int argc, char **argv) {
  *o = (opts){.steps = 200, .every = 10, .batch = 64, .wait_ms = 60000};
  o->leave_rank = o->kill_rank = o->wait_n = UINT32_MAX;
  o->wait_step = NONE;
  static const char *const env[][2] = {
      {"ELASTIC_STEPS", "--steps"},     {"ELASTIC_EVERY", "--every"},
      {"ELASTIC_BATCH", "--batch"},     {"ELASTIC_LEAVE", "--leave"},
      {"ELASTIC_KILL", "--kill"},       {"ELASTIC_WAIT_WORLD", "--wait-world"},
      {"ELASTIC_WAIT_MS", "--wait-ms"}, {"ELASTIC_STEP_MS", "--step-ms"}};
  for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
    const char *v = getenv(env[i][0]);
    char from[64];
    snprintf(from, sizeof from, " (from %s)", env[i][0]);
    if (v != NULL && *v != '\0' && set_opt(o, env[i][1], v, from) != 0) return -1;
  }
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      exit(0);
    }
    if (strcmp(argv[i], "--reference") == 0) {
      o->reference = 1;
      continue;
    }
    const char *eq = strchr(argv[i], '=');
    char name[32];
    const char *val;
    if (eq != NULL && (size_t)(eq - argv[i]) < sizeof name) {
      memcpy(name, argv[i], (size_t)(eq - argv[i]));
      name[eq - argv[i]] = '\0';
      val = eq + 1;
    } else {
      snprintf(name, sizeof name, "%s", argv[i]);
      if (i + 1 >= argc) {
        fprintf(stderr, "elastic_train: option '%s' needs a value\n", argv[i]);
        return -1;
      }
      val = argv[++i];
    }
    if (set_opt(o, name, val, "") != 0) return -1;
  }
  if (o->wait_n != UINT32_MAX && o->wait_step % o->every != 0) {
    fprintf(stderr, "elastic_train: --wait-world N:S needs S a multiple of --every %llu\n",
            (unsigned long long)o->every);
    return -1;
  }
  return 0;
}

/* ----------------------------------------------------------- training */

static int run_reference(const opts *o) {
  static train_state st;
  uint64_t acc[P + 1];
  while (st.step < o->steps) {
    memset(acc, 0, sizeof acc);
    local_gradient(st.step, 0, o->batch, st.w, acc);
    apply_update(&st, acc, o->batch);
  }
  printf("elastic_train: reference steps %llu checksum %016llx loss %.6f\n",
         (unsigned long long)st.step, (unsigned long long)checksum(&st), loss_of(&st, o));
  return 0;
}

/* A rank of the elastic run: the current view and the training state. */
typedef struct trainer {
  nexar_client *c;
  train_state st;
  const opts *o;
  int recoveries;
} trainer;

#define RANK(t) nexar_rank((t)->c), nexar_world_size((t)->c)

static int failed(trainer *t, const char *what, int rc) {
  fprintf(stderr, "elastic_train: rank %u/%u: %s at step %llu failed: %s (%s)\n", RANK(t), what,
          (unsigned long long)t->st.step, nexar_strerror(rc), nexar_last_error());
  return rc;
}

/* A failure that nexar_recover may get past: a rank was lost. */
static int is_loss(int rc) {
  return rc == NEXAR_ERR_PEER_LOST || rc == NEXAR_ERR_ABORTED;
}

static int sync_state(trainer *t) {
  return nexar_broadcast(t->c, &t->st, sizeof t->st, NEXAR_U8, 0);
}

/* After a loss: one view of the survivors, and rank 0's state on all. */
static int recover(trainer *t, int why) {
  for (;;) {
    if (++t->recoveries > MAX_RECOVERIES) return failed(t, "recovery (too many in a row)", why);
    printf("elastic_train: rank %u/%u: step %llu: %s; recovering\n", RANK(t),
           (unsigned long long)t->st.step, nexar_strerror(why));
    nexar_client *next = NULL;
    int rc = nexar_recover(t->c, &next);
    if (rc) return failed(t, "nexar_recover", rc);
    nexar_client_del(t->c);
    t->c = next;
    t->st.done |= DONE_KILL; /* the only loss this program causes */
    if ((rc = sync_state(t)) == 0) {
      printf("elastic_train: rank %u/%u: recovered at epoch %llu; redo from step %llu\n", RANK(t),
             (unsigned long long)nexar_view_epoch(t->c), (unsigned long long)t->st.step);
      return 0;
    }
    if (!is_loss(rc)) return failed(t, "state broadcast", rc);
    why = rc;
  }
}

/* The checkpoint phase of step st.step: a checkpoint (skipped by a joiner,
 * which arrives from one), repeated while --wait-world asks for more ranks.
 * *left = 1 on a rank that left. */
static int checkpoint_phase(trainer *t, int joiner, int *left) {
  const opts *o = t->o;
  uint64_t t0 = now_ms();
  *left = 0;
  for (int first = 1;; first = 0) {
    if (!(first && joiner)) {
      uint32_t me = nexar_rank(t->c);
      int leaving =
          o->leave_rank == me && t->st.step >= o->leave_step && !(t->st.done & DONE_LEAVE);
      if (leaving) {
        printf("elastic_train: rank %u/%u: leaves at step %llu\n", RANK(t),
               (unsigned long long)t->st.step);
        nexar_elastic_leave(t->c);
      }
      nexar_client *next = NULL;
      int rc = nexar_elastic_checkpoint(t->c, &next);
      if (rc) return rc;
      if (leaving && next == NULL) {
        *left = 1;
        return 0;
      }
      if (next != NULL) {
        nexar_client_del(t->c);
        t->c = next;
        nexar_elastic_info e;
        nexar_elastic_info_get(t->c, &e);
        if (e.left > 0) t->st.done |= DONE_LEAVE;
        printf("elastic_train: rank %u/%u: step %llu: resized at epoch %llu: %u -> %u ranks "
               "(joined %u, left %u; was rank %u)\n",
               RANK(t), (unsigned long long)t->st.step, (unsigned long long)e.epoch, e.old_world,
               e.new_world, e.joined, e.left, e.old_rank);
        if ((rc = sync_state(t))) return rc;
      }
    }
    /* Rank 0 decides for all (joiners admitted meanwhile included). */
    uint32_t more = nexar_rank(t->c) == 0 && t->st.step == o->wait_step &&
                    nexar_world_size(t->c) < o->wait_n && now_ms() - t0 < o->wait_ms;
    int rc = nexar_broadcast(t->c, &more, 1, NEXAR_U32, 0);
    if (rc) return rc;
    if (!more) break;
    sleep_ms(20);
  }
  t->st.ckpt_step = t->st.step;
  if (nexar_rank(t->c) == 0 && t->st.step > 0)
    printf("elastic_train: step %llu: world %u, loss %.6f\n", (unsigned long long)t->st.step,
           nexar_world_size(t->c), loss_of(&t->st, o));
  return 0;
}

/* One step on this rank's share of the batch. */
static int train_step(trainer *t) {
  const opts *o = t->o;
  uint64_t me = nexar_rank(t->c), n = nexar_world_size(t->c);
  if (o->kill_rank == me && t->st.step >= o->kill_step && !(t->st.done & DONE_KILL)) {
    printf("elastic_train: rank %u/%u: kills itself at step %llu\n", RANK(t),
           (unsigned long long)t->st.step);
    fflush(stdout);
    raise(SIGKILL);
  }
  uint64_t acc[P + 1];
  memset(acc, 0, sizeof acc);
  local_gradient(t->st.step, o->batch * me / n, o->batch * (me + 1) / n, t->st.w, acc);
  int rc = nexar_all_reduce(t->c, acc, P + 1, NEXAR_U64, NEXAR_SUM);
  if (rc) return rc;
  apply_update(&t->st, acc, o->batch);
  if (o->step_ms) sleep_ms(o->step_ms);
  return 0;
}

static int run_rank(const opts *o) {
  static trainer tr;
  trainer *t = &tr;
  t->o = o;
  t->st.ckpt_step = NONE;
  int rc = nexar_init_from_env(&t->c);
  if (rc) {
    fprintf(stderr, "elastic_train: joining failed: %s (%s)\n", nexar_strerror(rc),
            nexar_last_error());
    return 1;
  }
  nexar_elastic_info e;
  nexar_elastic_info_get(t->c, &e);
  int joiner = e.i_am_new;
  /* Founding members all start from w = 0; a joiner gets the state of the
   * view it was admitted to, in the broadcast its members make. */
  if ((rc = sync_state(t))) {
    failed(t, "state broadcast", rc);
    return 1;
  }
  printf("elastic_train: rank %u/%u: pid %ld %s at step %llu (epoch %llu)\n", RANK(t),
         (long)getpid(), joiner ? "joined" : "started", (unsigned long long)t->st.step,
         (unsigned long long)e.epoch);
  while (joiner || t->st.step < o->steps) {
    if (joiner || (t->st.step % o->every == 0 && t->st.ckpt_step != t->st.step)) {
      int left = 0;
      rc = checkpoint_phase(t, joiner, &left);
      joiner = 0;
      if (left) {
        printf("elastic_train: rank %u/%u: left at step %llu (pid %ld)\n", RANK(t),
               (unsigned long long)t->st.step, (long)getpid());
        nexar_client_del(t->c);
        return 0;
      }
    } else {
      rc = train_step(t);
      if (!rc) t->recoveries = 0;
    }
    if (rc && (!is_loss(rc) || recover(t, rc) != 0)) {
      if (!is_loss(rc)) failed(t, "training", rc);
      return 1;
    }
  }
  printf("elastic_train: rank %u/%u: steps %llu checksum %016llx loss %.6f\n", RANK(t),
         (unsigned long long)t->st.step, (unsigned long long)checksum(&t->st), loss_of(&t->st, o));
  fflush(stdout);
  rc = nexar_barrier(t->c); /* nobody leaves while another still needs it */
  if (rc) failed(t, "final barrier", rc);
  nexar_client_del(t->c);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  opts o;
  if (parse_opts(&o, argc, argv) != 0) return 2;
  return o.reference ? run_reference(&o) : run_rank(&o);
}

/*
 * zcc's clock: CLOCK_MONOTONIC nanoseconds, read from the CPU's time-stamp
 * counter where the kernel itself keeps time with it.
 *
 * Every host operation reads the clock twice for the flight recorder (its
 * start and its end), and a vDSO clock_gettime costs about 22 ns on the
 * hosts measured, rdtsc 10-12 (docs/perf/host.md). Where the kernel's
 * clocksource is "tsc" (so the counter is invariant and the same on every
 * core), zcc_now_ns scales the counter with parameters that it checks
 * against clock_gettime every REFRESH_NS:
 *
 * - For the first CALIBRATE_NS after the first read, it returns
 *   clock_gettime itself and measures the counter's rate over that time.
 * - From then on ns = base_ns + (tsc - base_tsc) * mult >> 32. At each
 *   refresh the new base is the old line's value at that instant (no step,
 *   so times never go back) and the new slope aims the line at the real
 *   clock one refresh later, the way NTP slews: the difference from
 *   CLOCK_MONOTONIC stays below a microsecond.
 * - A line more than STEP_NS off the real clock (a long idle time, a
 *   migrated VM) steps to it instead.
 *
 * - A child forked while its parent's thread wrote the line takes the
 *   writer's place over (it is held by pid); a line left half written
 *   starts a new calibration.
 *
 * Elsewhere (another clocksource, another CPU, ZCC_FAST_CLOCK=0) it is
 * clock_gettime(CLOCK_MONOTONIC). Async-signal-safe: the SIGUSR1 dump reads
 * it too.
 */
#include "wait.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "param.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

ZCC_PARAM_INT(fast_clock, "FAST_CLOCK", 1,
              "1: time with the CPU's time-stamp counter where the kernel's clocksource "
              "is tsc (checked against CLOCK_MONOTONIC every 50 ms); 0: clock_gettime")

#define CALIBRATE_NS 10000000LL /* the first slope's window */
#define REFRESH_NS 50000000LL   /* between checks against clock_gettime */
#define STEP_NS 20000LL         /* off by more: step to the real clock */

enum { MODE_UNKNOWN = 0, MODE_CALIBRATING, MODE_TSC, MODE_OFF };

static atomic_int mode;
/* The line, under a sequence lock (odd: being written). */
static atomic_uint line_seq;
static _Atomic int64_t line_base_ns;
static _Atomic uint64_t line_base_tsc, line_mult, line_refresh_tsc;
/* The line's writer: the pid of the process whose thread writes it (0:
   none). A child forked while its parent's thread held it takes it over,
   as it does a sequence number left odd. */
static atomic_int line_writer;
/* Calibration's first pair (MODE_CALIBRATING). */
static uint64_t cal_tsc;
static int64_t cal_ns;
/* The real clock at the line's base (the line itself may differ by its
   error then); the writer's only. */
static int64_t base_real_ns;

static int64_t real_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#if HAVE_TSC
/* 1: this thread writes the line now; 0: another thread of this process does. */
static int writer_take(void) {
  int none = 0, me = (int)getpid();
  if (atomic_compare_exchange_strong_explicit(&line_writer, &none, me, memory_order_acquire,
                                              memory_order_relaxed))
    return 1;
  /* held by the process this one was forked from: nobody here will give it */
  return none != me && atomic_compare_exchange_strong_explicit(
                           &line_writer, &none, me, memory_order_acquire, memory_order_relaxed);
}

static void writer_give(void) { atomic_store_explicit(&line_writer, 0, memory_order_release); }

static int clocksource_is_tsc(void) {
  int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[32];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  return strncmp(buf, "tsc", 3) == 0 && (buf[3] == '\n' || buf[3] == 0);
}

/* A (tsc, ns) pair read as close together as the two reads allow: the
   tightest of a few tries, so that a preemption between them does not
   skew the slope. */
static void pair(uint64_t *tsc, int64_t *ns) {
  uint64_t best = UINT64_MAX;
  *tsc = 0;
  *ns = 0;
  for (int i = 0; i < 4; i++) {
    uint64_t a = __rdtsc();
    int64_t t = real_ns();
    uint64_t b = __rdtsc();
    if (b - a < best) {
      best = b - a;
      *tsc = a + (b - a) / 2;
      *ns = t;
    }
  }
}

static void line_store(int64_t base_ns, uint64_t base_tsc, uint64_t mult, uint64_t refresh_tsc) {
  /* odd while written (already odd: a fork caught the parent's writer) */
  unsigned s = atomic_load_explicit(&line_seq, memory_order_relaxed) | 1u;
  atomic_store_explicit(&line_seq, s, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&line_base_ns, base_ns, memory_order_relaxed);
  atomic_store_explicit(&line_base_tsc, base_tsc, memory_order_relaxed);
  atomic_store_explicit(&line_mult, mult, memory_order_relaxed);
  atomic_store_explicit(&line_refresh_tsc, refresh_tsc, memory_order_relaxed);
  atomic_store_explicit(&line_seq, s + 1, memory_order_release);
}

/* ns per tick in 32.32 fixed point for dns over dtsc (both positive). */
static uint64_t slope(int64_t dns, uint64_t dtsc) {
  return (uint64_t)(((unsigned __int128)(uint64_t)dns << 32) / dtsc);
}

/* the ticks in ns at mult */
static uint64_t ticks(int64_t ns, uint64_t mult) {
  return mult ? (uint64_t)(((unsigned __int128)(uint64_t)ns << 32) / mult) : 0;
}

static int64_t line_at(int64_t base_ns, uint64_t base_tsc, uint64_t mult, uint64_t tsc) {
  return base_ns + (int64_t)(((unsigned __int128)(tsc - base_tsc) * mult) >> 32);
}

/*
 * The calibration window has passed, or the line's refresh is due (the
 * caller read tsc_seen past it). Returns 0 when another thread is writing
 * the line, or when this pass could not make a new one: the caller goes
 * on with the line it has.
 */
static int line_refresh(uint64_t tsc_seen) {
  if (!writer_take()) return 0;
  uint64_t tsc;
  int64_t ns;
  int fresh = 1; /* 0: the line stays as it is (the caller extrapolates it) */
  pair(&tsc, &ns);
  if (atomic_load_explicit(&mode, memory_order_acquire) == MODE_CALIBRATING) {
    if (ns - cal_ns >= CALIBRATE_NS && tsc > cal_tsc) {
      uint64_t mult = slope(ns - cal_ns, tsc - cal_tsc);
      base_real_ns = ns;
      line_store(ns, tsc, mult, tsc + ticks(REFRESH_NS, mult));
      atomic_store_explicit(&mode, MODE_TSC, memory_order_release);
    }
  } else {
    int64_t base_ns = atomic_load_explicit(&line_base_ns, memory_order_relaxed);
    uint64_t base_tsc = atomic_load_explicit(&line_base_tsc, memory_order_relaxed);
    uint64_t mult = atomic_load_explicit(&line_mult, memory_order_relaxed);
    uint64_t refresh = atomic_load_explicit(&line_refresh_tsc, memory_order_relaxed);
    if (tsc_seen >= refresh && tsc > base_tsc && ns > base_real_ns) {
      /* the counter's rate against the real clock since the last base */
      uint64_t rate = slope(ns - base_real_ns, tsc - base_tsc);
      uint64_t window = ticks(REFRESH_NS, rate);
      int64_t at = line_at(base_ns, base_tsc, mult, tsc);
      int64_t err = ns - at; /* the real clock minus the line, now */
      base_real_ns = ns;
      if (err > STEP_NS || err < -STEP_NS || window == 0)
        line_store(ns, tsc, rate, tsc + window);
      else /* from (tsc, at), meet the real clock one window on */
        line_store(at, tsc, slope(ns + REFRESH_NS - at, window), tsc + window);
    } else if (tsc_seen >= refresh) {
      fresh = 0; /* due, but the pair says nothing sane */
    }
  }
  writer_give();
  return fresh;
}

/* The line is half written and its writer was in the process this one was
   forked from: calibrate again (readers use clock_gettime meanwhile; the
   next line_store leaves the sequence even). */
static void line_orphaned(void) {
  int w = atomic_load_explicit(&line_writer, memory_order_relaxed);
  if (w == 0 || w == (int)getpid() || !writer_take()) return;
  pair(&cal_tsc, &cal_ns);
  atomic_store_explicit(&mode, MODE_CALIBRATING, memory_order_release);
  writer_give();
}

static int tsc_wanted(void) {
  return zcc_param_fast_clock() != 0 && clocksource_is_tsc();
}
#endif /* HAVE_TSC */

int64_t zcc_now_ns(void) {
#if HAVE_TSC
  int m = atomic_load_explicit(&mode, memory_order_acquire);
  if (m == MODE_TSC) {
    for (;;) {
      unsigned s = atomic_load_explicit(&line_seq, memory_order_acquire);
      if (s & 1) { /* being written: the real clock this once */
        line_orphaned();
        break;
      }
      int64_t base_ns = atomic_load_explicit(&line_base_ns, memory_order_relaxed);
      uint64_t base_tsc = atomic_load_explicit(&line_base_tsc, memory_order_relaxed);
      uint64_t mult = atomic_load_explicit(&line_mult, memory_order_relaxed);
      uint64_t refresh = atomic_load_explicit(&line_refresh_tsc, memory_order_relaxed);
      atomic_thread_fence(memory_order_acquire);
      if (atomic_load_explicit(&line_seq, memory_order_relaxed) != s) continue;
      uint64_t tsc = __rdtsc();
      if (tsc < base_tsc) break; /* read before the base: the real clock */
      if (tsc >= refresh && line_refresh(tsc)) continue;
      return line_at(base_ns, base_tsc, mult, tsc);
    }
    return real_ns();
  }
  if (m == MODE_OFF) return real_ns();
  if (m == MODE_UNKNOWN) {
    int want = tsc_wanted();
    int expected = MODE_UNKNOWN;
    if (!want) {
      atomic_compare_exchange_strong(&mode, &expected, MODE_OFF);
      return real_ns();
    }
    if (writer_take()) {
      if (atomic_load_explicit(&mode, memory_order_relaxed) == MODE_UNKNOWN) {
        pair(&cal_tsc, &cal_ns);
        atomic_store_explicit(&mode, MODE_CALIBRATING, memory_order_release);
      }
      writer_give();
    }
    return real_ns();
  }
  /* calibrating */
  int64_t ns = real_ns();
  if (ns - cal_ns >= CALIBRATE_NS) (void)line_refresh(0);
  return ns;
#else
  return real_ns();
#endif
}

const char *zcc_clock_name(void) {
  switch (atomic_load_explicit(&mode, memory_order_acquire)) {
  case MODE_TSC: return "tsc";
  case MODE_CALIBRATING: return "tsc (calibrating)";
  case MODE_OFF: return "clock_gettime";
  default: return "not read yet";
  }
}

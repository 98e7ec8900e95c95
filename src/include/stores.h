/*
 * Plain or streaming stores for a staged host allreduce, chosen by timing
 * (exec/stores.c). Neither choice changes a bit of the result.
 *
 * Two places may stream, each a bit of a kind:
 *
 * - ZCC_STORES_OUT, the result: out of place, the staged ring and two-shot
 *   write it into lines of the receive buffer. Where the call's buffers stay
 *   in the last-level cache from one call to the next, plain stores find
 *   those lines there and are the faster; where they do not (larger sizes,
 *   or other programs filling the cache), every plain store first reads its
 *   line from memory and streaming stores are the faster
 *   (docs/perf/host.md, 2026-12-06: the same 1-4 MiB calls went either way
 *   in different hours).
 * - ZCC_STORES_SLOTS, the ring's shared-memory FIFO slots (transport.h,
 *   slot_nt): a plain store into a slot first takes the line back from the
 *   peer's core, which read it last. Where the two cores share a cache that
 *   costs little, and the peer then reads the slot from that cache; where
 *   they do not (the VM's two CPUs on different dies, from second to
 *   second on the machine of docs/perf/host.md, 2026-12-06 session 7) a
 *   plain slot write ran at 5-7 GB/s against 20 streaming, and the ring
 *   ran 2.5x faster streaming its slots, while with a shared cache it ran
 *   1.7x slower that way.
 *
 * So each communicator times its calls per class (the algorithm, which of
 * the bits it may set, and the power of two of the size) in a trial: blocks
 * of ZCC_STORES_BLOCK calls of one kind, the kinds in turn (most streaming
 * first), the first call of each block not timed (it pays for the other
 * kind's cache state), three rounds where a class has two kinds and two
 * where it has four. The class then runs the kind with the lowest median
 * until its next trial: 64, 128, 256 and 512 calls later (the first calls
 * of a program run colder than the rest), then every ZCC_NT_TUNE calls.
 * Every rank counts the calls it makes on the communicator, and they make
 * the same calls, so the ranks try each kind at the same calls (each
 * rank's slot stores change what its peer's reads cost). Calls in a group
 * are neither timed nor counted: they run the class's kind.
 */
#ifndef ZCC_STORES_H_
#define ZCC_STORES_H_

#include <stdint.h>

struct zccComm;

/* The bits of a kind: what streams. */
enum { ZCC_STORES_OUT = 1, ZCC_STORES_SLOTS = 2, ZCC_STORES_KINDS = 4 };

#define ZCC_STORES_BLOCK 3
#define ZCC_STORES_MAX_ROUNDS 3
#define ZCC_STORES_SAMPLES (ZCC_STORES_MAX_ROUNDS * (ZCC_STORES_BLOCK - 1))

/* The algorithms that may stream; a class is one of them, the bits it may
   set (its mask) and a power of two of the size. */
enum { ZCC_STORES_RING, ZCC_STORES_TWOSHOT, ZCC_STORES_NALGOS };
#define ZCC_STORES_CLASSES (ZCC_STORES_NALGOS * ZCC_STORES_KINDS * 64)

typedef struct zcc_stores_class {
  unsigned mask;       /* the bits its kinds may set (set before the first call) */
  uint64_t calls;      /* counted calls so far */
  uint64_t trial_at;   /* the call the last trial began at */
  uint64_t next_trial; /* the call the next one begins at */
  uint64_t trials;     /* trials ended */
  int kind;            /* the kind between trials (bits of ZCC_STORES_*) */
  int decided;         /* a trial has decided */
  int n[ZCC_STORES_KINDS]; /* samples of this trial, per kind */
  float us[ZCC_STORES_KINDS][ZCC_STORES_SAMPLES];
  float med[ZCC_STORES_KINDS]; /* the medians the last decision compared (0: none) */
} zcc_stores_class_t;

/* The class of an allreduce of `bytes` (> 0) by algorithm `algo` whose
   kinds may set the bits of mask (non-zero). */
int zcc_stores_class(int algo, unsigned mask, uint64_t bytes);
/* A class's mask. */
unsigned zcc_stores_class_mask(int cls);
/* Calls in a trial of a class with this mask. */
int zcc_stores_trial_calls(unsigned mask);

/*
 * The kind the class's next call uses, and in *timed whether
 * zcc_stores_record should get its time; counts the call. retune: calls
 * between the end of a trial and the next (ZCC_NT_TUNE; the first four
 * come sooner); 0: no trials, every bit of the mask streams. *decided (if
 * given) is set to 1 when this call ended a trial (c->kind and c->med hold
 * its outcome).
 */
int zcc_stores_next(zcc_stores_class_t *c, uint64_t retune, int *timed, int *decided);
/* The time of a timed call of that kind. */
void zcc_stores_record(zcc_stores_class_t *c, int kind, double us);

/*
 * The communicator's side: the kind for the next call of class `cls`
 * (logs each trial's outcome under TUNING), and its time once it ran. A
 * call in a group passes counted = 0 (neither counted nor timed).
 */
int zcc_stores_begin(struct zccComm *comm, int cls, int counted, int *timed);
void zcc_stores_end(struct zccComm *comm, int cls, int kind, double us);
void zcc_stores_free(struct zccComm *comm);

#endif

/*
 * Plain or streaming stores for a staged host allreduce's result, chosen by
 * timing both (exec/stores.c).
 *
 * Out of place, the staged ring and two-shot write the result into lines of
 * the receive buffer. Where the call's buffers stay in the last-level cache
 * from one call to the next, plain stores find those lines there and are
 * the faster; where they do not (larger sizes, or other programs filling
 * the cache), every plain store first reads its line from memory and
 * streaming stores are the faster (docs/perf/host.md, 2026-12-06: the same
 * 1-4 MiB calls went either way in different hours).
 * Neither choice changes a bit of the result.
 *
 * So each communicator times its calls per class (the algorithm and the
 * power of two of the size) in a trial of ZCC_STORES_TRIAL calls: blocks of
 * ZCC_STORES_BLOCK calls of one kind, alternating, the first of each block
 * not timed (it pays for the other kind's cache state). The class then runs
 * the kind with the lower median until its next trial: 64, 128, 256 and
 * 512 calls later (the first calls of a program run colder than the rest),
 * then every ZCC_NT_TUNE calls. Every rank counts the calls it makes on the communicator, and they
 * make the same calls, so the ranks try each kind at the same calls. Calls
 * in a group are neither timed nor counted: they run the class's kind.
 */
#ifndef ZCC_STORES_H_
#define ZCC_STORES_H_

#include <stdint.h>

struct zccComm;

#define ZCC_STORES_BLOCK 3
#define ZCC_STORES_ROUNDS 3
#define ZCC_STORES_TRIAL (2 * ZCC_STORES_BLOCK * ZCC_STORES_ROUNDS)
#define ZCC_STORES_SAMPLES (ZCC_STORES_ROUNDS * (ZCC_STORES_BLOCK - 1))

/* The algorithms whose results may stream; a class is one of them and a
   power of two of the size. */
enum { ZCC_STORES_RING, ZCC_STORES_TWOSHOT, ZCC_STORES_NALGOS };
#define ZCC_STORES_CLASSES (ZCC_STORES_NALGOS * 64)

typedef struct zcc_stores_class {
  uint64_t calls;      /* counted calls so far */
  uint64_t trial_at;   /* the call the last trial began at */
  uint64_t next_trial; /* the call the next one begins at */
  uint64_t trials;     /* trials ended */
  int stream;          /* the kind between trials: 1 streaming, 0 plain */
  int decided;         /* a trial has decided */
  int n[2];       /* samples of this trial, [0] plain, [1] streaming */
  float us[2][ZCC_STORES_SAMPLES];
  float med[2]; /* the medians the last decision compared */
} zcc_stores_class_t;

/* The class of an allreduce of `bytes` (> 0) by algorithm `algo`. */
int zcc_stores_class(int algo, uint64_t bytes);

/*
 * The kind the class's next call uses (1 streaming, 0 plain), and in
 * *timed whether zcc_stores_record should get its time; counts the call.
 * retune: calls between the end of a trial and the next (ZCC_NT_TUNE; the
 * first four come sooner); 0: no trials, always streaming. *decided (if given) is set to 1 when
 * this call ended a trial (c->stream and c->med hold its outcome).
 */
int zcc_stores_next(zcc_stores_class_t *c, uint64_t retune, int *timed, int *decided);
/* The time of a timed call of that kind. */
void zcc_stores_record(zcc_stores_class_t *c, int stream, double us);

/*
 * The communicator's side: the kind for the next call of class `cls`
 * (logs each trial's outcome under TUNING), and its time once it ran. A
 * call in a group passes counted = 0 (neither counted nor timed).
 */
int zcc_stores_begin(struct zccComm *comm, int cls, int counted, int *timed);
void zcc_stores_end(struct zccComm *comm, int cls, int stream, double us);
void zcc_stores_free(struct zccComm *comm);

#endif

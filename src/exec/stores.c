/* Plain or streaming stores for a staged host allreduce's result (stores.h). */
#include <stdlib.h>

#include "comm.h"
#include "debug.h"
#include "param.h"
#include "stores.h"

ZCC_PARAM_INT(nt_tune, "NT_TUNE", 1000,
              "host staged allreduce out of place (ring from ZCC_RING_NT_BYTES, two-shot from "
              "ZCC_TWOSHOT_NT_BYTES): each power-of-two size class times its calls with plain "
              "and with streaming stores for the result (18 calls) and runs the faster, then "
              "times them again 64, 128, 256 and 512 calls later and from then on every this "
              "many calls; 0: no timing, always streaming");

int zcc_stores_class(int algo, uint64_t bytes) {
  int lg = 63 - __builtin_clzll(bytes | 1);
  return algo * 64 + lg;
}

static float median(float *v, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: at most ZCC_STORES_SAMPLES */
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      float t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int zcc_stores_next(zcc_stores_class_t *c, uint64_t retune, int *timed, int *decided) {
  *timed = 0;
  if (decided) *decided = 0;
  if (retune == 0) return 1;
  if (c->calls == 0) c->stream = 1; /* before the first trial ends: as configured */
  uint64_t call = c->calls++;
  if (call == c->next_trial) {
    c->trial_at = call;
    c->n[0] = c->n[1] = 0;
  }
  uint64_t pos = call - c->trial_at;
  if (pos < ZCC_STORES_TRIAL) {
    /* Blocks of one kind, streaming first; the first call of a block is not timed. */
    *timed = pos % ZCC_STORES_BLOCK != 0;
    return (pos / ZCC_STORES_BLOCK) % 2 == 0;
  }
  if (pos == ZCC_STORES_TRIAL) {
    if (c->n[0] > 0 && c->n[1] > 0) {
      /* The lower median wins; a tie keeps streaming. */
      c->med[0] = median(c->us[0], c->n[0]);
      c->med[1] = median(c->us[1], c->n[1]);
      c->stream = c->med[1] <= c->med[0];
      c->decided = 1;
      if (decided) *decided = 1;
    }
    /* The first trials come sooner (the first calls of a program run
       colder than the rest): 64, 128, 256 and 512 calls later, then
       every `retune`. */
    c->trials++;
    uint64_t gap = retune;
    if (c->trials < 5 && ((uint64_t)32 << c->trials) < gap) gap = (uint64_t)32 << c->trials;
    c->next_trial = call + gap;
  }
  return c->stream;
}

void zcc_stores_record(zcc_stores_class_t *c, int stream, double us) {
  int k = stream ? 1 : 0;
  if (c->n[k] < ZCC_STORES_SAMPLES) c->us[k][c->n[k]++] = (float)us;
}

int zcc_stores_begin(struct zccComm *comm, int cls, int counted, int *timed) {
  *timed = 0;
  int64_t retune = zcc_param_nt_tune();
  if (retune <= 0 || cls < 0 || cls >= ZCC_STORES_CLASSES) return 1;
  if (!comm->stores) {
    comm->stores = calloc(ZCC_STORES_CLASSES, sizeof(zcc_stores_class_t));
    if (!comm->stores) return 1; /* no memory for the record: as configured */
  }
  zcc_stores_class_t *c = &comm->stores[cls];
  if (!counted) return c->calls ? c->stream : 1;
  int decided;
  int stream = zcc_stores_next(c, (uint64_t)retune, timed, &decided);
  if (decided)
    ZCC_INFO(TUNING,
             "comm %s rank %d: allreduce %s out of place, %llu-%llu bytes: plain stores "
             "%.1f us, streaming %.1f us (medians of %d and %d calls): %s until call %llu",
             comm->name, comm->rank,
             cls / 64 == ZCC_STORES_RING ? "ring" : "two-shot", 1ull << (cls % 64),
             (2ull << (cls % 64)) - 1, c->med[0], c->med[1], c->n[0], c->n[1],
             stream ? "streaming" : "plain", (unsigned long long)c->next_trial);
  return stream;
}

void zcc_stores_end(struct zccComm *comm, int cls, int stream, double us) {
  if (comm->stores && cls >= 0 && cls < ZCC_STORES_CLASSES)
    zcc_stores_record(&comm->stores[cls], stream, us);
}

void zcc_stores_free(struct zccComm *comm) {
  free(comm->stores);
  comm->stores = NULL;
}

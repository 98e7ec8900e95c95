/* Plain or streaming stores for a staged host allreduce (stores.h). */
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"
#include "debug.h"
#include "param.h"
#include "stores.h"

ZCC_PARAM_INT(nt_tune, "NT_TUNE", 1000,
              "host staged allreduce (ring from ZCC_RING_NT_BYTES, two-shot out of place from "
              "ZCC_TWOSHOT_NT_BYTES): each power-of-two size class times its calls with plain "
              "and with streaming stores for the result (out of place) and the ring's "
              "shared-memory slots (18 or 24 calls) and runs the fastest, then times them "
              "again 64, 128, 256 and 512 calls later and from then on every this many "
              "calls; 0: no timing, always streaming");

int zcc_stores_class(int algo, unsigned mask, uint64_t bytes) {
  int lg = 63 - __builtin_clzll(bytes | 1);
  return (algo * ZCC_STORES_KINDS + (int)(mask & 3)) * 64 + lg;
}

unsigned zcc_stores_class_mask(int cls) { return (unsigned)(cls / 64) % ZCC_STORES_KINDS; }

/* The kinds of a mask, most streaming first; returns how many. */
static int kinds_of(unsigned mask, int *kinds) {
  int n = 0;
  for (int k = ZCC_STORES_KINDS - 1; k >= 0; k--)
    if (((unsigned)k & ~mask) == 0) kinds[n++] = k;
  return n;
}

static int rounds_of(int nkinds) { return nkinds <= 2 ? 3 : 2; }

int zcc_stores_trial_calls(unsigned mask) {
  int kinds[ZCC_STORES_KINDS], nk = kinds_of(mask, kinds);
  return nk * ZCC_STORES_BLOCK * rounds_of(nk);
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
  if (retune == 0) return (int)c->mask;
  int kinds[ZCC_STORES_KINDS], nk = kinds_of(c->mask, kinds);
  uint64_t trial = (uint64_t)nk * ZCC_STORES_BLOCK * (uint64_t)rounds_of(nk);
  if (c->calls == 0) c->kind = (int)c->mask; /* before the first trial ends: as configured */
  uint64_t call = c->calls++;
  if (call == c->next_trial) {
    c->trial_at = call;
    for (int k = 0; k < ZCC_STORES_KINDS; k++) c->n[k] = 0;
  }
  uint64_t pos = call - c->trial_at;
  if (pos < trial) {
    /* Blocks of one kind, the kinds in turn; the first call of a block is not timed. */
    *timed = pos % ZCC_STORES_BLOCK != 0;
    return kinds[(pos / ZCC_STORES_BLOCK) % (uint64_t)nk];
  }
  if (pos == trial) {
    int all = 1;
    for (int i = 0; i < nk; i++) all &= c->n[kinds[i]] > 0;
    if (all) {
      /* The lowest median wins; a tie goes to the kind tried first. */
      int best = kinds[0];
      for (int k = 0; k < ZCC_STORES_KINDS; k++) c->med[k] = 0;
      for (int i = 0; i < nk; i++) {
        int k = kinds[i];
        c->med[k] = median(c->us[k], c->n[k]);
        if (c->med[k] < c->med[best]) best = k;
      }
      c->kind = best;
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
  return c->kind;
}

void zcc_stores_record(zcc_stores_class_t *c, int kind, double us) {
  if (kind < 0 || kind >= ZCC_STORES_KINDS) return;
  if (c->n[kind] < ZCC_STORES_SAMPLES) c->us[kind][c->n[kind]++] = (float)us;
}

static const char *kind_name(int kind) {
  static const char *const names[ZCC_STORES_KINDS] = {"plain", "result streaming",
                                                      "slots streaming", "both streaming"};
  return names[kind & 3];
}

int zcc_stores_begin(struct zccComm *comm, int cls, int counted, int *timed) {
  *timed = 0;
  int64_t retune = zcc_param_nt_tune();
  if (cls < 0 || cls >= ZCC_STORES_CLASSES) return 0;
  unsigned mask = zcc_stores_class_mask(cls);
  if (retune <= 0) return (int)mask;
  if (!comm->stores) {
    comm->stores = calloc(ZCC_STORES_CLASSES, sizeof(zcc_stores_class_t));
    if (!comm->stores) return (int)mask; /* no memory for the record: as configured */
  }
  zcc_stores_class_t *c = &comm->stores[cls];
  c->mask = mask;
  if (!counted) return c->calls ? c->kind : (int)mask;
  int decided;
  int kind = zcc_stores_next(c, (uint64_t)retune, timed, &decided);
  if (decided) {
    char meds[160];
    int kinds[ZCC_STORES_KINDS], nk = kinds_of(mask, kinds), len = 0;
    meds[0] = '\0';
    for (int i = 0; i < nk && len < (int)sizeof(meds); i++)
      len += snprintf(meds + len, sizeof(meds) - (size_t)len, "%s%s %.1f us (%d calls)",
                      i ? ", " : "", kind_name(kinds[i]), c->med[kinds[i]], c->n[kinds[i]]);
    ZCC_INFO(TUNING, "comm %s rank %d: allreduce %s, %llu-%llu bytes: medians %s: %s until "
             "call %llu",
             comm->name, comm->rank,
             cls / (64 * ZCC_STORES_KINDS) == ZCC_STORES_RING ? "ring" : "two-shot",
             1ull << (cls % 64), (2ull << (cls % 64)) - 1, meds, kind_name(kind),
             (unsigned long long)c->next_trial);
  }
  return kind;
}

void zcc_stores_end(struct zccComm *comm, int cls, int kind, double us) {
  if (comm->stores && cls >= 0 && cls < ZCC_STORES_CLASSES)
    zcc_stores_record(&comm->stores[cls], kind, us);
}

void zcc_stores_free(struct zccComm *comm) {
  free(comm->stores);
  comm->stores = NULL;
}

/* Deadline and abort checks shared by every blocking wait. */
#include "wait.h"

#include "debug.h"

zccResult_t zcc_wait_check(const zcc_wait_t *w) {
  if (w->abort && atomic_load_explicit(w->abort, memory_order_acquire))
    return zcc_error(zccRemoteError, "%s: communicator aborted",
                     w->what ? w->what : "wait");
  if (w->deadline_ns != INT64_MAX && zcc_now_ns() >= w->deadline_ns)
    return zcc_error(zccTimeout, "%s: timed out", w->what ? w->what : "wait");
  return zccSuccess;
}

int zcc_wait_poll_ms(const zcc_wait_t *w, int cap_ms) {
  if (w->deadline_ns == INT64_MAX) return cap_ms;
  int64_t left = (w->deadline_ns - zcc_now_ns()) / 1000000;
  if (left < 0) return 0;
  return left < cap_ms ? (int)left : cap_ms;
}

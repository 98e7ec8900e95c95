/* Result strings from ZCC_RESULT_MAP; the last-error query and version. */
#include "debug.h"
#include "zcc.h"

const char *zccGetErrorString(zccResult_t result) {
  switch (result) {
#define ZCC_RESULT_STR_(name, value, desc) \
  case name: return desc;
    ZCC_RESULT_MAP(ZCC_RESULT_STR_)
#undef ZCC_RESULT_STR_
  default: return "unknown result code";
  }
}

const char *zccGetLastError(zccComm_t comm) {
  (void)comm;
  return zcc_last_error();
}

zccResult_t zccGetVersion(int *version) {
  if (!version) return zcc_error(zccInvalidArgument, "zccGetVersion: version is NULL");
  *version = ZCC_VERSION_CODE;
  return zccSuccess;
}

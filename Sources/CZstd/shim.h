#ifndef ABROVA_CZSTD_SHIM_H
#define ABROVA_CZSTD_SHIM_H

#include <zstd.h>
// ZSTD_getErrorCode and the ZSTD_error_* codes live here, not in zstd.h.
#include <zstd_errors.h>

#endif

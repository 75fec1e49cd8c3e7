#ifndef ABROVA_CLIBPQ_SHIM_H
#define ABROVA_CLIBPQ_SHIM_H

// Debian's libpq-dev puts the client header under postgresql/.
#include <postgresql/libpq-fe.h>

#endif

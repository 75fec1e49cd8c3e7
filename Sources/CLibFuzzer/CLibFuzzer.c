// The header declares libFuzzer's driver; SwiftPM needs a source file to make the module.
#include "CLibFuzzer.h"

#ifndef ABROVA_CLIBFUZZER_H
#define ABROVA_CLIBFUZZER_H

#include <stddef.h>
#include <stdint.h>

// libFuzzer's driver, for a binary whose main is its own: SwiftPM names an executable's entry
// point <module>_main and links main to it, so libFuzzer's main cannot be used. Defined by
// libclang_rt.fuzzer, which `-sanitize=fuzzer` links; only `abrova-fuzz` built with -DLIBFUZZER
// calls it.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif

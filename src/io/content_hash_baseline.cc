// XXH3-128, baseline build (content_hash.cc picks one at run time).
#include "io/content_hash_impl.h"

// The compiler's baseline for x86-64 is SSE2, which xxhash picks itself.
#define SLUICE_CONTENT_HASH_BUILD Baseline
#include "io/content_hash_build.inc"

// XXH3-128, avx2 build (content_hash.cc picks one at run time).
#include "io/content_hash_impl.h"

#define XXH_VECTOR XXH_AVX2
#define SLUICE_CONTENT_HASH_BUILD Avx2
#include "io/content_hash_build.inc"

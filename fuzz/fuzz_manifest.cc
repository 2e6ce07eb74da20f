// libFuzzer target: DecodeManifest on arbitrary bytes must return a Status, never
// crash, hang or read out of bounds (run under ASan/UBSan). A decoded record
// must re-encode to bytes that decode to the same record.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "format/manifest.h"
#include "format/record_frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  // The raw bytes exercise the envelope; the same bytes wrapped in a valid
  // envelope (magic, version, length, crc) reach the body parser, which a
  // fuzzer could otherwise never get past the crc to.
  (void)sluice::DecodeManifest(in, "fuzz").ok();
  // Both body versions: 1 (no chunk hashes) and the current one.
  for (uint32_t version : {1u, sluice::kManifestVersion}) {
    auto decoded = sluice::DecodeManifest(sluice::FrameRecord(sluice::kManifestMagic, in, version), "fuzz");
    if (decoded.ok()) {
      std::string again = sluice::EncodeManifest(*decoded);
      if (!sluice::DecodeManifest(again, "fuzz").ok()) std::abort();
    }
  }
  return 0;
}

// libFuzzer target: DecodeCommitRecord and DecodeCommitClaim (what COMMIT
// may hold) on arbitrary bytes must return a Status, never crash, hang or
// read out of bounds (run under ASan/UBSan). A decoded record or claim must
// re-encode to bytes that decode again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "format/commit_record.h"
#include "format/record_frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  // The raw bytes exercise the envelope; the same bytes wrapped in a valid
  // envelope (magic, version, length, crc) reach the body parser, which a
  // fuzzer could otherwise never get past the crc to.
  (void)sluice::DecodeCommitRecord(in, "fuzz").ok();
  auto decoded = sluice::DecodeCommitRecord(sluice::FrameRecord(sluice::kCommitMagic, in), "fuzz");
  if (decoded.ok()) {
    std::string again = sluice::EncodeCommitRecord(*decoded);
    if (!sluice::DecodeCommitRecord(again, "fuzz").ok()) std::abort();
  }
  (void)sluice::DecodeCommitClaim(in, "fuzz").ok();
  auto claim = sluice::DecodeCommitClaim(sluice::FrameRecord(sluice::kCommitClaimMagic, in), "fuzz");
  if (claim.ok()) {
    std::string again = sluice::EncodeCommitClaim(*claim);
    if (!sluice::DecodeCommitClaim(again, "fuzz").ok()) std::abort();
  }
  return 0;
}

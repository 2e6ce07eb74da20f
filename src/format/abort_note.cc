#include "format/abort_note.h"

#include "format/encoding.h"
#include "format/limits.h"
#include "format/record_frame.h"

namespace sluice {

std::string EncodeAbortNote(const AbortNote& note) {
  Encoder e;
  e.PutBytes(note.attempt);
  e.PutVarint(note.rank);
  e.PutBytes(note.reason.substr(0, 4096));
  e.PutVarint(static_cast<uint64_t>(note.created_unix_ms));
  return FrameRecord(kAbortNoteMagic, e.buffer());
}

Result<AbortNote> DecodeAbortNote(std::string_view bytes, const std::string& what) {
  ASSIGN_OR_RETURN(std::string_view body, UnframeRecord(bytes, kAbortNoteMagic, what));
  Decoder d(body, what);
  AbortNote note;
  uint64_t created;
  RETURN_IF_ERROR(d.Bytes(&note.attempt, limits::kMaxAttemptBytes, "attempt"));
  RETURN_IF_ERROR(d.Varint32(&note.rank, "rank"));
  RETURN_IF_ERROR(d.Bytes(&note.reason, 4096, "reason"));
  RETURN_IF_ERROR(d.Varint(&created));
  note.created_unix_ms = static_cast<int64_t>(created);
  if (d.remaining() != 0) return d.Bad("trailing bytes");
  return note;
}

}  // namespace sluice

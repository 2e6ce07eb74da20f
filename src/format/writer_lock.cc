#include "format/writer_lock.h"

#include "format/encoding.h"
#include "format/record_frame.h"

namespace sluice {

std::string EncodeWriterLock(const WriterLock& lock) {
  Encoder e;
  e.PutBytes(lock.host);
  e.PutBytes(lock.boot_id);
  e.PutVarint(lock.pid);
  e.PutVarint(lock.pid_start);
  e.PutVarint(static_cast<uint64_t>(lock.start_unix_ms));
  return FrameRecord(kWriterLockMagic, e.buffer());
}

Result<WriterLock> DecodeWriterLock(std::string_view bytes, const std::string& what) {
  ASSIGN_OR_RETURN(std::string_view body, UnframeRecord(bytes, kWriterLockMagic, what));
  Decoder d(body, what);
  WriterLock lock;
  uint64_t start;
  RETURN_IF_ERROR(d.Bytes(&lock.host, 255, "host"));
  RETURN_IF_ERROR(d.Bytes(&lock.boot_id, 64, "boot id"));
  RETURN_IF_ERROR(d.Varint32(&lock.pid, "pid"));
  RETURN_IF_ERROR(d.Varint(&lock.pid_start));
  RETURN_IF_ERROR(d.Varint(&start));
  lock.start_unix_ms = static_cast<int64_t>(start);
  if (d.remaining() != 0) return d.Bad("trailing bytes");
  return lock;
}

}  // namespace sluice

#include "io/aligned_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace sluice {

AlignedBuffer::~AlignedBuffer() {
  if (data_ != nullptr) munmap(data_, size_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Result<AlignedBuffer> AlignedBuffer::Allocate(size_t size) {
  AlignedBuffer b;
  if (size == 0) return b;
  size_t rounded = static_cast<size_t>(AlignUp(size, kAlignment));
  // mmap gives page alignment; MAP_POPULATE pre-faults so the first memcpy
  // into the buffer runs at memory speed rather than fault speed.
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    return Status::FromErrno(errno, "allocate " + std::to_string(rounded) + "-byte I/O buffer");
  }
  if (rounded >= (2u << 20)) madvise(p, rounded, MADV_HUGEPAGE);
  b.data_ = static_cast<uint8_t*>(p);
  b.size_ = rounded;
  return b;
}

}  // namespace sluice

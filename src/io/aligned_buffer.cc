#include "sluice/aligned_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
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

namespace {
std::mutex pool_mu;
std::multimap<size_t, AlignedBuffer>& PoolMap() {
  static auto* m = new std::multimap<size_t, AlignedBuffer>();  // never destroyed: used at exit
  return *m;
}
size_t pool_bytes = 0;  // GUARDED_BY(pool_mu)
}  // namespace

Result<AlignedBuffer> BufferPool::Take(size_t size) {
  size_t rounded = static_cast<size_t>(AlignUp(size, AlignedBuffer::kAlignment));
  {
    std::lock_guard<std::mutex> lock(pool_mu);
    auto& m = PoolMap();
    auto it = m.find(rounded);
    if (it != m.end()) {
      AlignedBuffer b = std::move(it->second);
      m.erase(it);
      pool_bytes -= rounded;
      return b;
    }
  }
  return AlignedBuffer::Allocate(rounded);
}

void BufferPool::Give(AlignedBuffer buffer) {
  if (buffer.size() == 0) return;
  std::lock_guard<std::mutex> lock(pool_mu);
  if (pool_bytes + buffer.size() > kMaxCachedBytes) return;  // freed on scope exit
  pool_bytes += buffer.size();
  size_t key = buffer.size();
  PoolMap().emplace(key, std::move(buffer));
}

}  // namespace sluice

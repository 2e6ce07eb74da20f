// Where `sluice save` gets item bytes: files of a directory tree (scanned and
// checked before anything is written), or synthetic data for benchmarks.
#ifndef SLUICE_TOOLS_SLUICE_ITEM_SOURCES_H_
#define SLUICE_TOOLS_SLUICE_ITEM_SOURCES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sluice/store.h"

namespace sluice::cli {

struct TreeFile {
  std::string key;   // path relative to the root, '/'-separated
  std::string path;  // full path
  uint64_t size = 0;
  uint32_t mode = 0;
};

// Lists every regular file under `root`, sorted by key. Refuses (with the
// offending path) symlinks, devices, FIFOs, sockets, unreadable files and
// directories, and names sluice cannot store as keys.
Result<std::vector<TreeFile>> ScanTree(const std::string& root);

// Streams one file with pread; fails if the file's size changes under it.
// The file is open only while it is read (from the first Read to its last
// byte), so any number of sources keep a bounded number of descriptors.
class FileSource final : public ItemSource {
 public:
  static Result<std::unique_ptr<FileSource>> Open(const TreeFile& file);
  ~FileSource() override;
  Result<size_t> Read(void* buf, size_t len) override;
  // Checks that the file ended where it was declared to end.
  Status Close();

 private:
  explicit FileSource(TreeFile file) : file_(std::move(file)) {}
  Status OpenFile();
  Status CheckAndClose();
  int fd_ = -1;
  bool closed_ = false;
  Status close_status_;
  TreeFile file_;
  uint64_t offset_ = 0;
};

// Deterministic pseudo-random bytes (not compressible, not all zero) at
// memory speed: copies from a pool generated once, at an item-specific
// rotation.
class SyntheticSource final : public ItemSource {
 public:
  SyntheticSource(uint64_t seed, uint64_t size);
  Result<size_t> Read(void* buf, size_t len) override;

 private:
  uint64_t pos_;
  uint64_t left_;
};

// With `sluice save --synthetic --change F`: each step, a window of
// ceil(F * items) items (rotating through all of them) gets new bytes. The
// step at or before `step` at which item `item` last changed (0 if never),
// which seeds its bytes: so an item's bytes equal the previous step's
// exactly unless it is in this step's window.
uint64_t SyntheticChangeStep(uint64_t item, uint64_t items, double fraction, uint64_t step);

// Splits `total` bytes into `items` item sizes (the remainder goes to the last).
std::vector<uint64_t> SplitSizes(uint64_t total, uint64_t items);

// Metadata sluice save stores for a file: its permission bits, "mode=0644".
std::string FileMetadata(uint32_t mode);
// Parses FileMetadata; 0644 if absent or unparsable.
uint32_t ModeFromMetadata(const std::string& metadata);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_ITEM_SOURCES_H_

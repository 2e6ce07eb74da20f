// sluice import: Hugging Face safetensors files as a sluice checkpoint.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "sluice/safetensors.h"
#include "output.h"
#include "store_flags.h"
#include "tensor_items.h"

namespace sluice::cli {
CommandSpec ImportSpec() {
  CommandSpec s;
  s.name = "import";
  s.usage = "import (--store URI | --tier URI...) --name NAME --step N --from PATH [flags]";
  s.summary =
      "Saves Hugging Face safetensors files as checkpoint NAME@STEP: PATH is a\n"
      ".safetensors file, or a directory holding model.safetensors.index.json (its\n"
      "weight_map names the shards) or else every *.safetensors in it. Each tensor\n"
      "becomes the item sluice.save would write for a state dict {name: tensor}, so\n"
      "sluice.load returns that dict. Every header is checked before anything is\n"
      "written: a truncated file, overlapping tensors, a bad header, a name in two\n"
      "files or an index naming a tensor its file lacks is refused by name. The\n"
      "bytes are checksummed as they are saved, as in `sluice save`.";
  s.flags = StoreFlagSpecs(true);
  s.flags.insert(s.flags.end(), {
      {"name", "NAME", "checkpoint name"},
      {"step", "N", "step to save as"},
      {"from", "PATH", "a .safetensors file or a directory of them"},
      {"json", "", "print the result as one JSON object"},
  });
  return s;
}

namespace {

struct FileTensor {
  std::string file;  // path
  SafetensorsTensor tensor;
  uint64_t data_start = 0;
};

// Opens a regular file for reading; never blocks on a FIFO or a device.
Result<int> OpenRegular(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + " is not a regular file");
  }
  return fd;
}

Result<std::string> ReadWholeSmallFile(const std::string& path, uint64_t limit) {
  ASSIGN_OR_RETURN(int fd, OpenRegular(path));
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status st = Status::FromErrno(errno, "read " + path);
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > limit) {
      ::close(fd);
      return Status::InvalidArgument(path + " is over " + std::to_string(limit) + " bytes");
    }
  }
  ::close(fd);
  return out;
}

// The header of one safetensors file, checked against its size.
Result<SafetensorsHeader> ReadHeader(const std::string& path) {
  ASSIGN_OR_RETURN(int fd, OpenRegular(path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status err = Status::FromErrno(errno, "stat " + path);
    ::close(fd);
    return err;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string first(8, '\0');
  ssize_t got = ::pread(fd, first.data(), 8, 0);
  first.resize(got > 0 ? static_cast<size_t>(got) : 0);
  auto n = SafetensorsHeaderLength(first, size, path);
  if (!n.ok()) {
    ::close(fd);
    return n.status();
  }
  std::string json(*n, '\0');
  uint64_t done = 0;
  while (done < *n) {
    ssize_t r = ::pread(fd, json.data() + done, *n - done, static_cast<off_t>(8 + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      return Status::Corruption(path + ": header cut short");
    }
    done += static_cast<uint64_t>(r);
  }
  ::close(fd);
  return ParseSafetensorsHeader(json, size, path);
}

// One tensor's bytes from its file, opened on the first read.
class FileRangeSource final : public ItemSource {
 public:
  FileRangeSource(std::string path, uint64_t offset, uint64_t size)
      : path_(std::move(path)), offset_(offset), left_(size) {}
  ~FileRangeSource() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Result<size_t> Read(void* buf, size_t len) override {
    if (left_ == 0) return size_t{0};
    if (fd_ < 0) {
      ASSIGN_OR_RETURN(fd_, OpenRegular(path_));
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(len, left_));
    for (;;) {
      ssize_t n = ::pread(fd_, buf, want, static_cast<off_t>(offset_));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::FromErrno(errno, "read " + path_);
      if (n == 0) return Status::IOError(path_ + " shrank while it was imported");
      offset_ += static_cast<uint64_t>(n);
      left_ -= static_cast<uint64_t>(n);
      if (left_ == 0) {
        ::close(fd_);
        fd_ = -1;
      }
      return static_cast<size_t>(n);
    }
  }

 private:
  std::string path_;
  uint64_t offset_;
  uint64_t left_;
  int fd_ = -1;
};

// The files to import from PATH, and the index's weight map if there is one.
Result<std::vector<std::string>> FilesOf(const std::string& path, std::map<std::string, std::string>* index) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "--from " + path);
  if (S_ISREG(st.st_mode)) return std::vector<std::string>{path};
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("--from " + path + " is neither a file nor a directory");
  const std::string index_path = path + "/model.safetensors.index.json";
  std::vector<std::string> files;
  if (::access(index_path.c_str(), F_OK) == 0) {
    ASSIGN_OR_RETURN(std::string text, ReadWholeSmallFile(index_path, 256ull << 20));
    ASSIGN_OR_RETURN(*index, ParseSafetensorsIndex(text, index_path));
    for (const auto& [n, f] : *index) {
      if (std::find(files.begin(), files.end(), path + "/" + f) == files.end()) files.push_back(path + "/" + f);
    }
    std::sort(files.begin(), files.end());
    return files;
  }
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return Status::FromErrno(errno, "open directory " + path);
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) files.push_back(path + "/" + n);
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  if (files.empty()) return Status::NotFound("--from " + path + ": no *.safetensors files");
  return files;
}

}  // namespace

int CmdImport(int argc, char** argv) {
  const CommandSpec spec = ImportSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  auto name = NameFromFlags(flags);
  if (!name.ok()) return Fail(name.status(), true);
  auto step = StepFromFlags(flags, false, true);
  if (!step.ok()) return Fail(step.status(), true);
  auto from = flags.Require("from");
  if (!from.ok()) return Fail(from.status(), true);
  auto popts = PipelineOptionsFromFlags(flags, true);
  if (!popts.ok()) return Fail(popts.status(), true);

  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, std::string> index;
  auto files = FilesOf(*from, &index);
  if (!files.ok()) return Fail(files.status());
  // Every header first: nothing is written unless all of them are sound.
  std::vector<FileTensor> tensors;
  std::map<std::string, std::string> file_of;
  uint64_t total = 0;
  for (const auto& f : *files) {
    auto header = ReadHeader(f);
    if (!header.ok()) return Fail(header.status());
    for (const auto& t : header->tensors) {
      if (TorchDtypeOfSafetensors(t.dtype).empty()) {
        return Fail(Status::NotSupported(f + ": tensor '" + t.name + "' has dtype " + t.dtype +
                                         ", which sluice.load cannot make a tensor of"));
      }
      auto [it, fresh] = file_of.emplace(t.name, f);
      if (!fresh) {
        return Fail(Status::Corruption("tensor '" + t.name + "' is in both " + it->second + " and " + f));
      }
      if (!index.empty()) {
        auto named = index.find(t.name);
        if (named == index.end() || *from + "/" + named->second != f) {
          return Fail(Status::Corruption(f + ": tensor '" + t.name + "' is not where " + *from +
                                         "/model.safetensors.index.json puts it"));
        }
      }
      tensors.push_back({f, t, header->data_start});
      total += t.end - t.begin;
    }
  }
  for (const auto& [n, f] : index) {
    if (!file_of.count(n)) {
      return Fail(Status::Corruption(*from + "/model.safetensors.index.json names tensor '" + n + "', which " +
                                     f + " does not hold"));
    }
  }
  if (tensors.empty()) return Fail(Status::NotFound("--from " + *from + ": no tensors"));

  // Staging as a synchronous `sluice save` gets it: at most 256 MiB, streamed.
  PipelineOptions po = *popts;
  const uint64_t slab = (po.store.io_bytes + 4095) / 4096 * 4096;
  po.staging_bytes = std::max(slab, std::min<uint64_t>((total + slab - 1) / slab * slab, 256ull << 20));
  auto pipeline = Pipeline::Open(po);
  if (!pipeline.ok()) return FailStoreOpen(pipeline.status());
  const CheckpointId id{*name, **step};
  auto pending = (*pipeline)->Begin(id, 0, 1);
  if (!pending.ok()) return Fail(pending.status());
  Progress progress("import", total);
  std::vector<std::unique_ptr<FileRangeSource>> sources;
  for (const auto& t : tensors) {
    const uint64_t size = t.tensor.end - t.tensor.begin;
    sources.push_back(std::make_unique<FileRangeSource>(t.file, t.data_start + t.tensor.begin, size));
    Status st = (*pending)->AddItem("t/" + EscapeComponent(t.tensor.name),
                                    TensorMetadata(TorchDtypeOfSafetensors(t.tensor.dtype), t.tensor.shape), size,
                                    *sources.back());
    if (!st.ok()) return Fail(st);
  }
  auto handle = (*pending)->Snapshot();
  Status st = handle.ok() ? (*handle)->WaitTier(0) : handle.status();
  progress.Add(total);
  progress.Done();
  if (!st.ok()) return Fail(st);
  if ((*pipeline)->tier_count() > 1) {
    auto report = (*pipeline)->Drain(id.name);
    if (report.ok()) {
      for (const auto& f : report->failures) std::fprintf(stderr, "sluice: not drained yet: %s\n", f.c_str());
    }
  }
  const double secs = SecondsSince(t0);
  if (flags.Has("json")) {
    PrintJson({{"name", id.name}, {"step", id.step}, {"tensors", tensors.size()}, {"bytes", total},
               {"files", files->size()}, {"seconds", secs}});
  } else {
    std::printf("imported %zu tensors, %s from %zu file(s) as %s in %.2f s\n", tensors.size(),
                HumanBytes(total).c_str(), files->size(), CheckpointLabel(id.name, id.step).c_str(), secs);
  }
  return kExitOk;
}

}  // namespace sluice::cli

// sluice export: a committed checkpoint's tensors as Hugging Face safetensors.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "sluice/safetensors.h"
#include "output.h"
#include "store_flags.h"
#include "tensor_items.h"

namespace sluice::cli {
CommandSpec ExportSpec() {
  CommandSpec s;
  s.name = "export";
  s.usage = "export (--store URI | --tier URI...) --name NAME [--step N|latest|latest-good] --format safetensors --to DIR [flags]";
  s.summary =
      "Writes the tensors of a committed checkpoint as Hugging Face safetensors:\n"
      "model-0000K-of-0000N.safetensors shards of at most --max-shard-size and\n"
      "model.safetensors.index.json naming each tensor's shard. Tensors are the\n"
      "items sluice.save wrote (a state dict's path joined by '.', e.g.\n"
      "model.layers.0.weight) and the DCP writer's whole tensors (by their\n"
      "fully qualified name); other items are skipped and counted. Every chunk is\n"
      "verified as it is read; each file is written under a temporary name,\n"
      "fsynced and renamed into place, the index last. With --force over an\n"
      "earlier export, its index and shards are removed first.";
  s.flags = StoreFlagSpecs(false);
  s.flags.insert(s.flags.end(), {
      {"name", "NAME", "checkpoint name"},
      {"step", "N|latest|latest-good", "step to export (default latest; latest-good skips a damaged newest step)"},
      {"format", "safetensors", "output format (only safetensors)"},
      {"to", "DIR", "directory to write into (created if missing; must be empty unless --force)"},
      {"select", "PREFIX", "export only tensors named PREFIX or PREFIX.<...> (repeatable;\n"
                           "default: every tensor), e.g. --select model",
       true},
      {"strip-prefix", "P", "drop a leading P from every exported name (e.g. 'model.')"},
      {"max-shard-size", "SIZE", "largest shard (default 5GiB; a larger tensor gets a shard alone)"},
      {"force", "", "write into a non-empty DIR, replacing files of the same names"},
      {"json", "", "print the result as one JSON object"},
  });
  return s;
}

namespace {

bool Selected(const std::string& name, const std::vector<std::string>& prefixes) {
  if (prefixes.empty()) return true;
  for (const auto& p : prefixes) {
    if (name == p || (name.size() > p.size() && name.compare(0, p.size(), p) == 0 && name[p.size()] == '.')) {
      return true;
    }
  }
  return false;
}

Status SyncDir(const std::string& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Status::FromErrno(errno, "open " + dir);
  Status st = ::fsync(dfd) == 0 ? Status::OK() : Status::FromErrno(errno, "fsync " + dir);
  ::close(dfd);
  return st;
}

// Shard files as export names them: model-NNNNN-of-NNNNN.safetensors.
bool IsShardName(const std::string& n) {
  if (n.size() != 32 || n.compare(0, 6, "model-") != 0 || n.compare(11, 4, "-of-") != 0 ||
      n.compare(20, 12, ".safetensors") != 0) {
    return false;
  }
  for (size_t i : {6, 7, 8, 9, 10, 15, 16, 17, 18, 19}) {
    if (n[i] < '0' || n[i] > '9') return false;
  }
  return true;
}

Status WriteAll(int fd, const void* data, size_t len, uint64_t offset, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::pwrite(fd, p, len, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write " + what);
    }
    p += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::OK();
}

// Writes `bytes` to dir/name through a temporary name: fsynced, then renamed.
struct AtomicFile {
  std::string dir, name, tmp;
  int fd = -1;
  ~AtomicFile() {
    if (fd >= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
    }
  }
  Status Open() {
    tmp = dir + "/.sluice-export." + std::to_string(::getpid()) + "." + name;
    (void)::unlink(tmp.c_str());  // a crashed run's, by the same pid; never written through
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    return fd < 0 ? Status::FromErrno(errno, "create " + tmp) : Status::OK();
  }
  Status Commit() {
    const std::string final_path = dir + "/" + name;
    if (::fsync(fd) != 0) return Status::FromErrno(errno, "fsync " + final_path);
    int fd_copy = fd;
    fd = -1;
    if (::close(fd_copy) != 0) {
      Status st = Status::FromErrno(errno, "close " + final_path);
      ::unlink(tmp.c_str());
      return st;
    }
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
      Status st = Status::FromErrno(errno, "rename into place " + final_path);
      ::unlink(tmp.c_str());
      return st;
    }
    return Status::OK();
  }
};

}  // namespace

namespace {

// The tensors to export and what was left out: every one checked (dtype,
// size, a name of its own) before a byte is written.
struct ExportSelection {
  std::vector<TensorItem> tensors;
  uint64_t skipped = 0;
};

Result<ExportSelection> SelectTensors(CheckpointReader& reader, const std::string& label,
                                      const std::vector<std::string>& select, const std::string& strip) {
  ExportSelection out;
  std::map<std::string, std::string> key_of_name;
  std::map<std::string, int> dcp_chunks;
  for (const auto& item : reader.items()) {
    auto t = TensorItemOf(item);
    if (!t || !Selected(t->name, select)) {
      ++out.skipped;
      continue;
    }
    if (item.key.rfind("dcp/", 0) == 0) ++dcp_chunks[t->name];
    if (!t->dcp_chunk_at_origin) {
      return Status::NotSupported(label + ": tensor '" + t->name + "' is sharded across DCP chunks; "
                                  "export it from a checkpoint of one rank (load it with dcp.load and "
                                  "save it with sluice.save), or leave it out with --select");
    }
    const std::string st_dtype = SafetensorsDtypeOfTorch(t->dtype);
    if (st_dtype.empty()) {
      return Status::NotSupported(label + ": tensor '" + t->name + "' has dtype " + t->dtype +
                                  ", which safetensors cannot hold");
    }
    if (!strip.empty() && t->name.compare(0, strip.size(), strip) == 0 && t->name.size() > strip.size()) {
      t->name = t->name.substr(strip.size());
    }
    uint64_t expect = SafetensorsDtypeBytes(st_dtype);
    for (uint64_t d : t->shape) expect *= d;
    if (expect != t->size) {
      return Status::Corruption(label + ": item '" + t->key + "' holds " + std::to_string(t->size) +
                                " bytes, its metadata says " + t->dtype + " of " + std::to_string(expect));
    }
    if (t->name == "__metadata__") {
      return Status::InvalidArgument(label + ": item '" + t->key + "' would export as '__metadata__', "
                                     "the name safetensors keeps for the file's metadata");
    }
    if (!key_of_name.emplace(t->name, t->key).second) {
      return Status::InvalidArgument(label + ": items '" + key_of_name[t->name] + "' and '" + t->key +
                                     "' both export as '" + t->name + "'");
    }
    out.tensors.push_back(std::move(*t));
  }
  for (const auto& [n, count] : dcp_chunks) {
    if (count > 1) {
      return Status::NotSupported(label + ": tensor '" + n + "' is sharded across " + std::to_string(count) +
                                  " DCP chunks; export it from a checkpoint of one rank, or leave it out "
                                  "with --select");
    }
  }
  if (out.tensors.empty()) {
    return Status::NotFound(label + ": no tensor items" +
                            (select.empty() ? " (export writes the tensors sluice.save or the DCP writer "
                                              "stored; this checkpoint holds none)"
                                            : " match --select"));
  }
  return out;
}

// Makes `to` ready for the export: made if missing; refused if it holds
// anything, unless `force`, which removes an earlier export's index (first,
// durably, so that a failure never leaves an index over a mix of two
// exports' shards) and then its shards.
Status PrepareExportDir(const std::string& to, bool force) {
  struct stat st;
  if (::stat(to.c_str(), &st) != 0) {
    if (::mkdir(to.c_str(), 0755) != 0) return Status::FromErrno(errno, "mkdir " + to);
    return Status::OK();
  }
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("--to " + to + " is not a directory");
  DIR* d = ::opendir(to.c_str());
  bool empty = true;
  while (d != nullptr && empty) {
    dirent* e = ::readdir(d);
    if (e == nullptr) break;
    std::string n = e->d_name;
    if (n != "." && n != "..") empty = false;
  }
  if (d != nullptr) ::closedir(d);
  if (empty) return Status::OK();
  if (!force) return Status::AlreadyExists("--to " + to + " is not empty (use --force to export into it)");
  const std::string old_index = to + "/model.safetensors.index.json";
  if (::unlink(old_index.c_str()) != 0 && errno != ENOENT) return Status::FromErrno(errno, "remove " + old_index);
  RETURN_IF_ERROR(SyncDir(to));
  if (DIR* dir = ::opendir(to.c_str())) {
    std::vector<std::string> old;
    while (dirent* e = ::readdir(dir)) {
      if (IsShardName(e->d_name)) old.push_back(to + "/" + e->d_name);
    }
    ::closedir(dir);
    for (const auto& f : old) (void)::unlink(f.c_str());
  }
  return Status::OK();
}

// Writes the shards (each whole and durable under its name, or not at all)
// and then the index that names them.
Status WriteShards(CheckpointReader& reader, const std::string& to, const std::vector<TensorItem>& tensors,
                   const std::vector<std::vector<size_t>>& shards, uint64_t total, Progress& progress) {
  std::map<std::string, std::string> weight_map;
  std::vector<uint8_t> buffer(64ull << 20);
  char file_name[64];
  for (size_t s = 0; s < shards.size(); ++s) {
    std::snprintf(file_name, sizeof file_name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    std::vector<SafetensorsTensor> header;
    uint64_t at = 0;
    for (size_t i : shards[s]) {
      header.push_back({tensors[i].name, SafetensorsDtypeOfTorch(tensors[i].dtype), tensors[i].shape, at,
                        at + tensors[i].size});
      at += tensors[i].size;
      weight_map[tensors[i].name] = file_name;
    }
    const std::string head = EncodeSafetensorsHeader(header, {{"format", "pt"}});
    AtomicFile out{to, file_name, ""};
    RETURN_IF_ERROR(out.Open());
    RETURN_IF_ERROR(WriteAll(out.fd, head.data(), head.size(), 0, out.tmp));
    for (size_t k = 0; k < shards[s].size(); ++k) {
      const TensorItem& t = tensors[shards[s][k]];
      for (uint64_t off = 0; off < t.size; off += buffer.size()) {
        const uint64_t len = std::min<uint64_t>(buffer.size(), t.size - off);
        RETURN_IF_ERROR(reader.ReadRange(t.key, off, buffer.data(), len));
        RETURN_IF_ERROR(WriteAll(out.fd, buffer.data(), len, head.size() + header[k].begin + off, out.tmp));
        progress.Add(len);
      }
    }
    RETURN_IF_ERROR(out.Commit());
  }
  // Every shard's rename is durable before the index names them.
  RETURN_IF_ERROR(SyncDir(to));
  AtomicFile index{to, "model.safetensors.index.json", ""};
  const std::string index_bytes = EncodeSafetensorsIndex(weight_map, total);
  RETURN_IF_ERROR(index.Open());
  RETURN_IF_ERROR(WriteAll(index.fd, index_bytes.data(), index_bytes.size(), 0, index.tmp));
  RETURN_IF_ERROR(index.Commit());
  return SyncDir(to);
}

}  // namespace

int CmdExport(int argc, char** argv) {
  const CommandSpec spec = ExportSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  auto args = CheckpointArgsFromFlags(flags);
  if (!args.ok()) return Fail(args.status(), true);
  auto format = flags.Require("format");
  if (!format.ok()) return Fail(format.status(), true);
  if (*format != "safetensors") {
    return Fail(Status::InvalidArgument("--format " + *format + ": only safetensors is supported"), true);
  }
  auto to = flags.Require("to");
  if (!to.ok()) return Fail(to.status(), true);
  auto max_shard = flags.GetSize("max-shard-size", 5ull << 30);
  if (!max_shard.ok() || *max_shard == 0) {
    return Fail(Status::InvalidArgument("--max-shard-size must be a positive size, e.g. 2GiB"), true);
  }
  const std::vector<std::string> select = flags.GetAll("select");
  const std::string strip = flags.Get("strip-prefix").value_or("");

  const auto t0 = std::chrono::steady_clock::now();
  auto pipeline = Pipeline::Open(args->pipeline);
  if (!pipeline.ok()) return FailStoreOpen(pipeline.status());
  ReadRecovery recovery;
  auto reader = OpenCheckpointFromFlags(**pipeline, args->name, args->step, args->latest_good, &recovery);
  if (!reader.ok()) return Fail(reader.status());
  const CheckpointInfo& info = (*reader)->info();
  const std::string label = CheckpointLabel(info.name, info.step);
  auto selection = SelectTensors(**reader, label, select, strip);
  if (!selection.ok()) return Fail(selection.status());
  const std::vector<TensorItem>& tensors = selection->tensors;

  // Shards: greedy in checkpoint order.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!shards.back().empty() && in_shard + tensors[i].size > *max_shard) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += tensors[i].size;
    total += tensors[i].size;
  }
  if (Status st = PrepareExportDir(*to, flags.Has("force")); !st.ok()) return Fail(st);
  Progress progress("export", total);
  Status written = WriteShards(**reader, *to, tensors, shards, total, progress);
  progress.Done();
  for (const auto& f : recovery.fallbacks) std::fprintf(stderr, "sluice: fallback: %s\n", f.c_str());
  if (!written.ok()) return Fail(written);
  const double secs = SecondsSince(t0);
  if (args->json) {
    PrintJson({{"name", info.name}, {"step", info.step}, {"to", *to}, {"tensors", tensors.size()},
               {"bytes", total}, {"shards", shards.size()}, {"skipped_items", selection->skipped},
               {"seconds", secs}});
  } else {
    std::printf("exported %s: %zu tensors, %s in %zu shard(s) to %s in %.2f s (every chunk verified; %llu "
                "other item(s) skipped)\n",
                label.c_str(), tensors.size(), HumanBytes(total).c_str(), shards.size(), to->c_str(), secs,
                static_cast<unsigned long long>(selection->skipped));
  }
  return kExitOk;
}

}  // namespace sluice::cli

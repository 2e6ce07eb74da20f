// _sluice: the Python binding of sluice's Pipeline, PendingCheckpoint,
// SaveHandle and CheckpointReader (include/sluice/pipeline.h).
//
// This file is the only place where a Status becomes a Python exception, and
// where the GIL is released: around every call that copies bytes or does I/O
// (Snapshot, WaitTier/Wait, every read, the pipeline's close). Buffers handed
// in as raw addresses (tensor data pointers) must stay valid for the call;
// the Python layer guarantees it by holding the owning objects, which the
// binding keeps alive as well until they are in staging (py_save.h).
//
// Thread-safety: a Pipeline may be used from several Python threads. Each
// PendingCheckpoint and Reader wrapper serializes its own calls with a
// mutex, since the C++ objects belong to one thread at a time and Python
// threads run them concurrently once the GIL is released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <thread>
#include <tuple>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_copy.h"
#include "py_peer.h"
#include "py_save.h"
#include "py_support.h"
#include "sluice/metrics.h"
#include "sluice/pipeline.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace py = pybind11;

namespace sluice {
namespace {

using namespace pyb;  // NOLINT: the binding's own support (py_support.h)

class PyReader {
 public:
  PyReader(std::unique_ptr<ReadRecovery> recovery, std::unique_ptr<CheckpointReader> reader,
           std::shared_ptr<Pipeline> pipeline)
      : recovery_(std::move(recovery)), reader_(std::move(reader)), pipeline_(std::move(pipeline)) {
    for (const auto& item : reader_->items()) by_key_.emplace(item.key, &item);
  }

  py::dict Info() const { return InfoDict(reader_->info()); }

  // [(key, metadata bytes, size, rank)], every rank's items.
  py::list Items() const {
    py::list out;
    for (const auto& item : reader_->items()) {
      out.append(py::make_tuple(item.key, py::bytes(item.metadata), item.size, item.rank));
    }
    return out;
  }

  void ReadRange(const std::string& key, uint64_t offset, uintptr_t address, uint64_t len) {
    if (address == 0 && len != 0) throw py::value_error("item '" + key + "': null destination");
    Status st;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      st = reader_->ReadRange(key, offset, AddressOf(address), len);
    }
    ThrowIfError(st);
  }

  py::bytes ReadBytes(const std::string& key) {
    auto found = by_key_.find(key);
    if (found == by_key_.end()) {
      ThrowIfError(Status::NotFound(Label() + ": no item '" + key + "'"));
    }
    uint64_t size = found->second->size;
    PyObject* raw = PyBytes_FromStringAndSize(nullptr, static_cast<py::ssize_t>(size));
    if (raw == nullptr) throw py::error_already_set();
    py::bytes out = py::reinterpret_steal<py::bytes>(raw);
    char* dst = PyBytes_AS_STRING(raw);  // not shared with anyone until we return
    Status st;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      st = reader_->ReadRange(key, 0, dst, size);
    }
    ThrowIfError(st);
    return out;
  }

  // Streams every item of `rank` (all ranks if None) that has a destination
  // in `destinations` (key -> (address, size, fresh)) straight into it, reading
  // each data object once, front to back. Items without a destination are
  // read and verified but dropped (use ReadRange to read a few items).
  void ReadAllInto(const py::dict& destinations, std::optional<uint32_t> rank) {
    std::vector<ItemDestination> dests;
    dests.reserve(destinations.size());
    for (auto [k, v] : destinations) {
      auto t = v.cast<std::tuple<uintptr_t, uint64_t, bool>>();
      dests.push_back({k.cast<std::string>(), AddressOf(std::get<0>(t)), std::get<1>(t),
                       std::get<2>(t)});
    }
    Status st;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      st = reader_->ReadInto(rank, dests);
    }
    ThrowIfError(st);
  }

  py::dict Recovery() const {
    py::dict d;
    d["fallbacks"] = recovery_->fallbacks;
    d["repairs"] = recovery_->repairs;
    return d;
  }

 private:
  std::string Label() const {
    return reader_->info().name + "@" + std::to_string(reader_->info().step);
  }

  std::mutex mu_;
  std::unique_ptr<ReadRecovery> recovery_;  // outlives reader_ (declared first)
  std::unique_ptr<CheckpointReader> reader_;
  std::shared_ptr<Pipeline> pipeline_;
  std::unordered_map<std::string, const ItemInfo*> by_key_;
};

// Whether a pipeline's staging arena is pinned for CUDA DMA (set by the
// arena hooks, read by Python).

// Owns the Pipeline. Closing (or the last reference going away) waits for
// the tier-0 writes of snapshotted saves, with the GIL released so the
// background threads are never blocked on it.
class PyPipeline {
 public:
  PyPipeline(const PipelineOptions& options, std::shared_ptr<StagingPin> pin)
      : pin_(std::move(pin)), pool_(options.staging_pool) {
    Result<std::unique_ptr<Pipeline>> opened = Status::IOError("not opened");
    {
      py::gil_scoped_release release;
      opened = Pipeline::Open(options);
    }
    pipeline_ = std::shared_ptr<Pipeline>(ValueOrThrow(std::move(opened)).release(),
                                          [](Pipeline* p) { ReleaseGilAndDelete(p); });
  }

  size_t tier_count() { return Get()->tier_count(); }
  py::list Backlog() { return BacklogList(Get()->Backlog()); }

  void PinForCuda(int device) {
    Get();
    py::gil_scoped_release release;  // pinning a large arena takes a while
    if (pool_) pool_->KeepResident();  // pinned memory must never be given back
    std::lock_guard<std::mutex> lock(pin_->mu);
    if (!pin_->device) pin_->device = device;
    pin_->PinLocked();
  }

  py::dict StagingPinState() {
    std::lock_guard<std::mutex> lock(pin_->mu);
    py::dict d;
    d["pinned"] = pin_->pinned;
    d["bytes"] = pin_->pinned ? pin_->arena_bytes : 0;
    d["seconds"] = pin_->seconds;
    d["error"] = pin_->error;
    return d;
  }

  std::unique_ptr<PyPendingCheckpoint> Begin(const std::string& name, uint64_t step, uint32_t rank, uint32_t world,
                            const std::string& attempt, bool attempt_is_unique, bool incremental) {
    auto p = Get();
    SaveOptions save;
    save.attempt = attempt;
    save.attempt_is_unique = attempt_is_unique;
    save.incremental = incremental;
    std::optional<Result<std::unique_ptr<PendingCheckpoint>>> pending;
    {
      py::gil_scoped_release release;  // Begin waits while max_in_flight saves are unfinished
      pending.emplace(p->Begin(CheckpointId{name, step}, rank, world, save));
    }
    return std::make_unique<PyPendingCheckpoint>(ValueOrThrow(std::move(*pending)), p);
  }

  std::unique_ptr<PyReader> OpenCheckpoint(const std::string& name, std::optional<uint64_t> step,
                                           const std::map<uint32_t, py::bytes>& manifests_elsewhere) {
    auto p = Get();
    auto recovery = std::make_unique<ReadRecovery>();
    ManifestsElsewhere elsewhere;
    for (const auto& [rank, bytes] : manifests_elsewhere) elsewhere.emplace(rank, std::string(bytes));
    std::optional<Result<std::unique_ptr<CheckpointReader>>> reader;
    {
      py::gil_scoped_release release;
      reader.emplace(p->OpenCheckpoint(name, step, recovery.get(), elsewhere));
    }
    return std::make_unique<PyReader>(std::move(recovery), ValueOrThrow(std::move(*reader)), p);
  }

  uint64_t LatestGoodStep(const std::string& name) {
    auto p = Get();
    std::optional<Result<uint64_t>> step;
    {
      py::gil_scoped_release release;
      step.emplace(p->LatestGoodStep(name));
    }
    return ValueOrThrow(std::move(*step));
  }

  py::list List(const std::string& name) {
    auto p = Get();
    std::optional<Result<std::vector<TieredCheckpointInfo>>> listed;
    {
      py::gil_scoped_release release;
      listed.emplace(p->List(name));
    }
    py::list out;
    for (const auto& c : ValueOrThrow(std::move(*listed))) {
      py::dict d = InfoDict(c.info);
      py::list tiers;
      for (const auto& t : c.tiers) {
        py::dict td;
        td["uri"] = t.uri;
        td["state"] = t.state;
        td["reason"] = t.reason;
        tiers.append(td);
      }
      d["tiers"] = tiers;
      out.append(d);
    }
    return out;
  }

  // Removes name@step (every step of `name` if None) from every tier, the
  // slowest first, so that the copy reads use is the last to go. Returns the
  // steps removed; NotFound if no tier had any.
  std::vector<uint64_t> Remove(const std::string& name, std::optional<uint64_t> step) {
    auto p = Get();
    std::set<uint64_t> removed;
    Status st;
    {
      py::gil_scoped_release release;
      for (size_t i = p->tier_count(); i-- > 0 && st.ok();) {
        Store& tier = p->tier(i);
        std::vector<uint64_t> steps;
        if (step) {
          steps.push_back(*step);
        } else {
          auto listed = tier.List(name, true);
          if (!listed.ok()) {
            st = listed.status();
            break;
          }
          for (const auto& c : *listed) steps.push_back(c.step);
        }
        for (uint64_t s : steps) {
          Status one = tier.Remove(CheckpointId{name, s});
          if (one.IsNotFound()) continue;
          if (!one.ok()) {
            st = one;
            break;
          }
          removed.insert(s);
        }
      }
      if (st.ok() && removed.empty()) {
        st = Status::NotFound((step ? CheckpointLabel(name, *step) : "checkpoint name '" + name + "'") +
                              " not found on any tier");
      }
    }
    ThrowIfError(st);
    return {removed.begin(), removed.end()};
  }

  py::dict Drain(const std::string& name) {
    auto p = Get();
    std::optional<Result<DrainReport>> report;
    {
      py::gil_scoped_release release;
      report.emplace(p->Drain(name));
    }
    DrainReport r = ValueOrThrow(std::move(*report));
    py::dict d;
    d["checkpoints_drained"] = r.checkpoints_drained;
    d["bytes"] = r.bytes;
    d["checkpoints_removed"] = r.checkpoints_removed;
    d["checkpoints_superseded"] = r.checkpoints_superseded;
    d["failures"] = r.failures;
    return d;
  }

  // Drops this reference; the pipeline closes once handles and readers made
  // from it are gone too.
  void Close() { pipeline_.reset(); }
  bool closed() const { return !pipeline_; }

 private:
  static void ReleaseGilAndDelete(Pipeline* p) {
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      delete p;
    } else {
      delete p;
    }
  }
  std::shared_ptr<Pipeline> Get() {
    if (!pipeline_) throw py::value_error("the pipeline is closed");
    return pipeline_;
  }


  std::shared_ptr<Pipeline> pipeline_;
  std::shared_ptr<StagingPin> pin_;
  std::shared_ptr<StagingPool> pool_;  // the process's, or null
};

}  // namespace
}  // namespace sluice

PYBIND11_MODULE(_sluice, m) {
  using namespace sluice;
  using namespace sluice::pyb;
  m.doc() = "sluice checkpoint engine: the C++ Pipeline API (use the `sluice` package instead)";

  RegisterErrors(m);
  BindProcessFunctions(m);
  BindStagingPool(m);

  BindSave(m);
  BindPeer(m);

  py::class_<PyReader>(m, "Reader")
      .def_property_readonly("info", &PyReader::Info)
      .def("items", &PyReader::Items)
      .def("read_range", &PyReader::ReadRange, py::arg("key"), py::arg("offset"),
           py::arg("address"), py::arg("length"))
      .def("read_bytes", &PyReader::ReadBytes, py::arg("key"))
      .def("read_all_into", &PyReader::ReadAllInto, py::arg("destinations"),
           py::arg("rank") = py::none())
      .def("recovery", &PyReader::Recovery);

  py::class_<PyPipeline>(m, "Pipeline")
      .def(py::init([](const std::vector<std::string>& tiers, uint64_t staging_bytes,
                       uint32_t copy_threads, uint32_t max_in_flight, uint64_t chunk_bytes,
                       uint64_t io_bytes, uint64_t object_bytes, uint64_t rank_timeout_ms,
                       bool create_if_missing, bool huge_pages, bool staging_at_open,
                       const std::vector<uint64_t>& rate_bytes_per_sec,
                       const std::vector<uint32_t>& keep_last, uint64_t scrub_rate_bytes_per_sec,
                       uint64_t rebuild_rate_bytes_per_sec, uint32_t rebuild_keep_last,
                       const py::object& backlog_policy, uint32_t max_backlog_steps,
                       uint64_t max_backlog_bytes, const std::string& when_backlogged, bool tier0_per_host,
                       const PyStagingPool* staging_pool) {
             BacklogArgs backlog;
             if (py::isinstance<py::str>(backlog_policy)) {
               backlog.policy.assign(tiers.size(), backlog_policy.cast<std::string>());
               backlog.one_for_all = true;
             } else if (!backlog_policy.is_none()) {
               backlog.policy = backlog_policy.cast<std::vector<std::string>>();
             }
             backlog.max_steps = max_backlog_steps;
             backlog.max_bytes = max_backlog_bytes;
             backlog.when = when_backlogged;
             // With the process's pool, its arena and its pin; else one of its own.
             auto pin = staging_pool ? staging_pool->pin : std::make_shared<StagingPin>();
             PipelineOptions o = MakeOptions(tiers, staging_bytes, copy_threads, max_in_flight, chunk_bytes,
                                             io_bytes, object_bytes, rank_timeout_ms, create_if_missing,
                                             huge_pages, staging_at_open, rate_bytes_per_sec, keep_last,
                                             scrub_rate_bytes_per_sec, rebuild_rate_bytes_per_sec,
                                             rebuild_keep_last, backlog, tier0_per_host, pin);
             if (staging_pool) o.staging_pool = staging_pool->pool;
             return std::make_unique<PyPipeline>(o, pin);
           }),
           py::arg("tiers"), py::arg("staging_bytes") = PipelineOptions{}.staging_bytes,
           py::arg("copy_threads") = PipelineOptions{}.copy_threads,
           py::arg("max_in_flight") = PipelineOptions{}.max_in_flight,
           py::arg("chunk_bytes") = StoreOptions{}.chunk_bytes,
           py::arg("io_bytes") = StoreOptions{}.io_bytes,
           py::arg("object_bytes") = StoreOptions{}.object_bytes,
           py::arg("rank_timeout_ms") = StoreOptions{}.rank_timeout_ms,
           py::arg("create_if_missing") = true, py::arg("huge_pages") = true,
           py::arg("staging_at_open") = PipelineOptions{}.staging_at_open,
           py::arg("rate_bytes_per_sec") = std::vector<uint64_t>{},
           py::arg("keep_last") = std::vector<uint32_t>{},
           py::arg("scrub_rate_bytes_per_sec") = uint64_t{0},
           py::arg("rebuild_rate_bytes_per_sec") = uint64_t{0},
           py::arg("rebuild_keep_last") = PipelineOptions{}.rebuild_keep_last,
           py::arg("backlog_policy") = py::none(), py::arg("max_backlog_steps") = uint32_t{0},
           py::arg("max_backlog_bytes") = uint64_t{0}, py::arg("when_backlogged") = "wait",
           py::arg("tier0_per_host") = false, py::arg("staging_pool") = nullptr)
      .def_property_readonly("staging_pin", &PyPipeline::StagingPinState)
      .def("pin_for_cuda", &PyPipeline::PinForCuda, py::arg("device"),
           "Page-locks the staging arena for DMA from CUDA `device` (once; a no-op after). "
           "The first save of a CUDA tensor does it; call it ahead to keep that save's stall free of it.")
      .def_property_readonly("tier_count", &PyPipeline::tier_count)
      .def_property_readonly("closed", &PyPipeline::closed)
      .def("begin", &PyPipeline::Begin, py::arg("name"), py::arg("step"), py::arg("rank") = 0,
           py::arg("world") = 1, py::arg("attempt") = "",
           py::arg("attempt_is_unique") = false, py::arg("incremental") = true)
      .def("open", &PyPipeline::OpenCheckpoint, py::arg("name"), py::arg("step") = py::none(),
           py::arg("manifests_elsewhere") = std::map<uint32_t, py::bytes>())
      .def("latest_good_step", &PyPipeline::LatestGoodStep, py::arg("name"))
      .def("list", &PyPipeline::List, py::arg("name") = "")
      .def("drain", &PyPipeline::Drain, py::arg("name") = "")
      .def("backlog", &PyPipeline::Backlog)
      .def("remove", &PyPipeline::Remove, py::arg("name"), py::arg("step") = py::none())
      .def("close", &PyPipeline::Close);
}

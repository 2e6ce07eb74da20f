#include "py_support.h"

#include <chrono>
#include <initializer_list>

#include "cuda_copy.h"
#include "sluice/metrics.h"

namespace sluice::pyb {
namespace {

// Exception classes, created once at import and never freed (they must
// outlive every object that could raise during interpreter shutdown).
struct Exceptions {
  PyObject* base = nullptr;
  PyObject* not_found = nullptr;
  PyObject* already_exists = nullptr;
  PyObject* corruption = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* io_error = nullptr;
  PyObject* unavailable = nullptr;
  PyObject* not_supported = nullptr;
  PyObject* no_space = nullptr;
};
Exceptions g_errors;

PyObject* ExceptionFor(StatusCode code) {
  switch (code) {
    case StatusCode::kNotFound: return g_errors.not_found;
    case StatusCode::kAlreadyExists: return g_errors.already_exists;
    case StatusCode::kCorruption: return g_errors.corruption;
    case StatusCode::kInvalidArgument: return g_errors.invalid_argument;
    case StatusCode::kIOError: return g_errors.io_error;
    case StatusCode::kUnavailable: return g_errors.unavailable;
    case StatusCode::kNotSupported: return g_errors.not_supported;
    case StatusCode::kNoSpace: return g_errors.no_space;
    case StatusCode::kOk: break;
  }
  return g_errors.base;
}

}  // namespace

// REQUIRES: the GIL is held.
void ThrowIfError(const Status& st) {
  if (st.ok()) return;
  PyErr_SetString(ExceptionFor(st.code()), st.message().c_str());
  throw py::error_already_set();
}

namespace {

PyObject* NewException(py::module_& m, const char* name, std::initializer_list<PyObject*> builtins) {
  std::string qualified = std::string("sluice.") + name;
  PyObject* bases = PyTuple_New(static_cast<Py_ssize_t>(1 + builtins.size()));
  if (bases == nullptr) throw py::error_already_set();
  Py_INCREF(g_errors.base);
  PyTuple_SET_ITEM(bases, 0, g_errors.base);
  Py_ssize_t i = 1;
  for (PyObject* b : builtins) {
    Py_INCREF(b);
    PyTuple_SET_ITEM(bases, i++, b);
  }
  PyObject* type = PyErr_NewException(qualified.c_str(), bases, nullptr);
  Py_DECREF(bases);
  if (type == nullptr) throw py::error_already_set();
  Py_INCREF(type);  // one reference for the module attribute, one kept forever
  PyModule_AddObject(m.ptr(), name, type);
  return type;
}

}  // namespace

void RegisterErrors(py::module_& m) {
  g_errors.base = PyErr_NewException("sluice.Error", PyExc_Exception, nullptr);
  Py_INCREF(g_errors.base);
  PyModule_AddObject(m.ptr(), "Error", g_errors.base);
  // Each error is also the builtin a Python caller would catch for it, so
  // that `except OSError` or `except FileNotFoundError` works as it does for
  // open(). No name shadows a builtin.
  g_errors.not_found = NewException(m, "NotFoundError", {PyExc_FileNotFoundError, PyExc_LookupError});
  g_errors.already_exists = NewException(m, "AlreadyExistsError", {PyExc_FileExistsError});
  g_errors.corruption = NewException(m, "CorruptionError", {PyExc_OSError});
  g_errors.invalid_argument = NewException(m, "InvalidArgumentError", {PyExc_ValueError});
  g_errors.io_error = NewException(m, "StoreIOError", {PyExc_OSError});
  g_errors.unavailable = NewException(m, "UnavailableError", {PyExc_OSError});
  g_errors.not_supported = NewException(m, "NotSupportedError", {PyExc_OSError});
  g_errors.no_space = NewException(m, "NoSpaceError", {PyExc_OSError});
}

void BindProcessFunctions(py::module_& m) {
  // The process's metrics (every pipeline, scrub and rebuild in it).
  m.def("cuda_available", [] {
    Status st = cuda::Available();
    return st.ok() ? std::string() : st.ToString();
  }, "'' when the CUDA driver can be used for device-to-host staging, else why not");
  m.def("metrics", [] {
    std::vector<MetricFamily> families;
    {
      py::gil_scoped_release release;
      families = DefaultMetrics().Collect();
    }
    py::list out;
    for (const auto& f : families) {
      py::list samples;
      for (const auto& smp : f.samples) {
        py::dict labels;
        for (const auto& [k, v] : smp.labels) labels[py::str(k)] = py::str(v);
        samples.append(py::make_tuple(smp.name, labels, smp.value));
      }
      py::dict d;
      d["name"] = f.name;
      d["help"] = f.help;
      d["type"] = f.type == MetricType::kCounter ? "counter" : f.type == MetricType::kGauge ? "gauge" : "histogram";
      d["samples"] = samples;
      out.append(d);
    }
    return out;
  });
  m.def("metrics_text", [] {
    py::gil_scoped_release release;
    return DefaultMetrics().RenderPrometheus();
  });
}

py::dict ProgressDict(const TierProgress& p) {
  py::dict d;
  d["uri"] = p.uri;
  d["state"] = TierStateName(p.state);
  d["durable_seconds"] = p.durable_seconds;
  d["bytes_written"] = p.bytes_written;
  d["attempts"] = p.attempts;
  d["error"] = p.error.ok() ? std::string() : p.error.ToString();
  return d;
}

py::list BacklogList(const std::vector<TierBacklog>& backlog) {
  py::list out;
  for (const auto& b : backlog) {
    py::dict d;
    d["uri"] = b.uri;
    d["steps"] = b.steps;
    d["bytes"] = b.bytes;
    d["superseded"] = b.superseded;
    out.append(d);
  }
  return out;
}

py::dict InfoDict(const CheckpointInfo& info) {
  py::dict d;
  d["name"] = info.name;
  d["step"] = info.step;
  d["complete"] = info.complete;
  d["ranks"] = info.ranks;
  d["items"] = info.items;
  d["bytes"] = info.bytes;
  d["referenced_bytes"] = info.referenced_bytes;
  d["created_unix_ms"] = info.created_unix_ms;
  d["problem"] = info.problem;
  d["part_ranks"] = info.part_ranks;
  d["safe_hosts"] = info.safe_hosts;
  return d;
}


namespace {

// The arena hooks of a pipeline's own arena or of the process's pool: the
// arena is pinned for CUDA DMA once it is made, if a device is known by
// then (PinForCuda), and unpinned before it is freed.
std::function<void(void*, uint64_t)> PinOnAllocated(const std::shared_ptr<StagingPin>& pin) {
  return [pin](void* base, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(pin->mu);
    pin->base = base;
    pin->arena_bytes = bytes;
    pin->PinLocked();
  };
}

std::function<void(void*, uint64_t)> UnpinOnFreeing(const std::shared_ptr<StagingPin>& pin) {
  return [pin](void* base, uint64_t) {
    std::lock_guard<std::mutex> lock(pin->mu);
    if (pin->pinned) (void)cuda::Unpin(base, *pin->device);
    pin->pinned = false;
    pin->base = nullptr;
  };
}

}  // namespace

void BindStagingPool(py::module_& m) {
  py::class_<PyStagingPool>(m, "StagingPool")
      .def(py::init([](uint64_t bytes, bool huge_pages, double idle_release_seconds) {
             auto pin = std::make_shared<StagingPin>();
             StagingPoolOptions o;
             o.bytes = bytes;
             o.huge_pages = huge_pages;
             o.idle_release_seconds = idle_release_seconds;
             // Pinned for CUDA DMA as a pipeline's own arena is (MakeOptions).
             o.on_allocated = PinOnAllocated(pin);
             o.on_freeing = UnpinOnFreeing(pin);
             return PyStagingPool{ValueOrThrow(StagingPool::Open(o)), pin};
           }),
           py::arg("bytes"), py::arg("huge_pages") = true, py::arg("idle_release_seconds") = 0.0)
      .def_property_readonly("bytes", [](const PyStagingPool& p) { return p.pool->bytes(); })
      .def_property_readonly("resident_bytes", [](const PyStagingPool& p) { return p.pool->resident_bytes(); })
      .def("release_if_idle", [](const PyStagingPool& p) {
        py::gil_scoped_release release;
        return p.pool->ReleaseIfIdle();
      });
}

PipelineOptions MakeOptions(const std::vector<std::string>& tiers, uint64_t staging_bytes,
                            uint32_t copy_threads, uint32_t max_in_flight, uint64_t chunk_bytes,
                            uint64_t io_bytes, uint64_t object_bytes, uint64_t rank_timeout_ms,
                            bool create_if_missing, bool huge_pages, bool staging_at_open,
                            const std::vector<uint64_t>& rate_bytes_per_sec,
                            const std::vector<uint32_t>& keep_last, uint64_t scrub_rate_bytes_per_sec,
                            uint64_t rebuild_rate_bytes_per_sec, uint32_t rebuild_keep_last,
                            const BacklogArgs& backlog, bool tier0_per_host,
                            const std::shared_ptr<StagingPin>& pin) {
  if (!backlog.policy.empty() && backlog.policy.size() != tiers.size()) {
    throw py::value_error("backlog_policy needs one policy per tier (or one string for all)");
  }
  if (backlog.when != "wait" && backlog.when != "fail") {
    throw py::value_error("when_backlogged must be 'wait' or 'fail', not '" + backlog.when + "'");
  }
  if (!rate_bytes_per_sec.empty() && rate_bytes_per_sec.size() != tiers.size()) {
    throw py::value_error("rate_bytes_per_sec needs one figure per tier");
  }
  if (!keep_last.empty() && keep_last.size() != tiers.size()) {
    throw py::value_error("keep_last needs one figure per tier");
  }
  PipelineOptions o;
  for (size_t k = 0; k < tiers.size(); ++k) {
    TierOptions t;
    t.uri = tiers[k];
    if (!rate_bytes_per_sec.empty()) t.rate_bytes_per_sec = rate_bytes_per_sec[k];
    if (!keep_last.empty()) t.keep_last = keep_last[k];
    if (!backlog.policy.empty()) {
      const std::string& policy = backlog.policy[k];
      if (policy == "coalesce") {
        t.backlog = BacklogPolicy::kCoalesce;
      } else if (policy == "drain-every") {
        t.backlog = BacklogPolicy::kDrainEvery;
      } else {
        throw py::value_error("backlog_policy must be 'coalesce' or 'drain-every', not '" + policy + "'");
      }
    }
    o.tiers.push_back(t);
  }
  // Every rank copies its part of every step to tier 1: a policy given for
  // all tiers at once leaves tier 1 out (one given per tier must say so).
  o.tier0_per_host = tier0_per_host;
  if (tier0_per_host && o.tiers.size() > 1 && (backlog.policy.empty() || backlog.one_for_all)) {
    o.tiers[1].backlog = BacklogPolicy::kDrainEvery;
  }
  o.max_backlog_steps = backlog.max_steps;
  o.max_backlog_bytes = backlog.max_bytes;
  o.when_backlogged = backlog.when == "fail" ? BusyPolicy::kRefuse : BusyPolicy::kWait;
  o.staging_bytes = staging_bytes;
  o.staging_at_open = staging_at_open;
  o.scrub_rate_bytes_per_sec = scrub_rate_bytes_per_sec;
  o.rebuild_rate_bytes_per_sec = rebuild_rate_bytes_per_sec;
  o.rebuild_keep_last = rebuild_keep_last;
  o.copy_threads = copy_threads;
  o.max_in_flight = max_in_flight;
  o.huge_pages = huge_pages;
  o.store.chunk_bytes = chunk_bytes;
  o.store.io_bytes = io_bytes;
  o.store.object_bytes = object_bytes;
  o.store.rank_timeout_ms = rank_timeout_ms;
  o.store.create_if_missing = create_if_missing;
  // The arena is pinned for CUDA DMA once, when a save first holds a CUDA
  // tensor (PinForCuda) or, after that, when the arena is made; a process
  // that never saves one never touches CUDA.
  o.on_staging_allocated = PinOnAllocated(pin);
  o.on_staging_freeing = UnpinOnFreeing(pin);
  return o;
}


}  // namespace sluice::pyb

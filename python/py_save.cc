#include "py_save.h"

namespace sluice::pyb {

void PyLazySnapshot::WaitItems(const std::vector<uint32_t>& items) {
  Status st;
  {
    py::gil_scoped_release release;
    st = lazy_->WaitItems(items);
  }
  ThrowIfError(st);
}

void PyLazySnapshot::WaitAll() {
  Status st;
  {
    py::gil_scoped_release release;
    st = lazy_->WaitAll();
  }
  state_.reset();  // the copy is over: the buffers are not read again
  ThrowIfError(st);
}

void PyLazySnapshot::Finish(std::optional<std::string> error) {
  lazy_->Finish(error ? Status::InvalidArgument(*error) : Status::OK());
}

PyLazySnapshot::~PyLazySnapshot() {
  if (!state_ || !lazy_) return;
  if (!lazy_->copy_done()) {
    py::gil_scoped_release release;
    (void)lazy_->WaitAll();
  }
  state_.reset();
}

void BindSave(py::module_& m) {
  py::class_<PySaveHandle>(m, "SaveHandle")
      .def_property_readonly("stall_seconds", &PySaveHandle::stall_seconds)
      .def_property_readonly("name", &PySaveHandle::name)
      .def_property_readonly("step", &PySaveHandle::step)
      .def("done", &PySaveHandle::done)
      .def("wait_tier", &PySaveHandle::WaitTier, py::arg("tier"))
      .def("wait", &PySaveHandle::Wait)
      .def("wait_written", &PySaveHandle::WaitWritten)
      .def("release_part", &PySaveHandle::ReleasePart)
      .def("progress", &PySaveHandle::Progress)
      .def("stats", &PySaveHandle::Stats)
      .def("backlog", &PySaveHandle::Backlog);

  py::class_<PyPendingCheckpoint>(m, "PendingCheckpoint")
      .def("add_address", &PyPendingCheckpoint::AddAddress, py::arg("key"), py::arg("metadata"),
           py::arg("address"), py::arg("size"), py::arg("owner"))
      .def("add_cuda", &PyPendingCheckpoint::AddCuda, py::arg("key"), py::arg("metadata"),
           py::arg("address"), py::arg("size"), py::arg("device"), py::arg("owner"))
      .def("add_buffer", &PyPendingCheckpoint::AddBuffer, py::arg("key"), py::arg("metadata"),
           py::arg("data"))
      .def("snapshot", &PyPendingCheckpoint::Snapshot)
      .def("snapshot_lazily", &PyPendingCheckpoint::SnapshotLazily)
      .def("abandon", &PyPendingCheckpoint::Abandon);

  py::class_<PyLazySnapshot>(m, "LazySnapshot")
      .def_property_readonly("handle", &PyLazySnapshot::handle)
      .def("wait_items", &PyLazySnapshot::WaitItems, py::arg("items"))
      .def("wait_all", &PyLazySnapshot::WaitAll)
      .def("copy_done", &PyLazySnapshot::copy_done)
      .def_property_readonly("copy_seconds", &PyLazySnapshot::copy_seconds)
      .def("finish", &PyLazySnapshot::Finish, py::arg("error") = py::none());
}

}  // namespace sluice::pyb

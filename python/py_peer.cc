// The _sluice binding of sluice/peer.h: a host's tier 0 as peer replicas
// use it (python/sluice/_peer.py moves the bytes over torch.distributed).
#include "py_peer.h"

#include <cstring>
#include <string_view>

#include "py_support.h"
#include "sluice/peer.h"

namespace sluice::pyb {
namespace {

py::dict DigestDict(const RankDigest& d) {
  py::dict out;
  out["rank"] = d.rank;
  out["manifest"] = d.manifest;
  out["manifest_bytes"] = d.manifest_bytes;
  out["manifest_crc32c"] = d.manifest_crc32c;
  out["items"] = d.items;
  out["bytes"] = d.bytes;
  return out;
}

RankDigest DigestOf(const py::dict& d) {
  return RankDigest{d["rank"].cast<uint32_t>(), d["manifest"].cast<std::string>(),
                    d["manifest_bytes"].cast<uint64_t>(), d["manifest_crc32c"].cast<uint32_t>(),
                    d["items"].cast<uint64_t>(), d["bytes"].cast<uint64_t>()};
}

class PyPeerStore {
 public:
  PyPeerStore(const std::string& uri, bool create, uint64_t io_bytes)
      : store_(ValueOrThrow(PeerStore::Open(uri, create, io_bytes))) {}

  py::dict ReadPart(const std::string& manifest_object) {
    Result<PeerPart> r = PeerPart();
    {
      py::gil_scoped_release release;
      r = store_->ReadPart(manifest_object);
    }
    PeerPart part = ValueOrThrow(std::move(r));
    py::dict out;
    out["digest"] = DigestDict(part.digest);
    out["manifest_data"] = py::bytes(part.manifest_bytes);
    out["objects"] = part.objects;
    out["sizes"] = part.sizes;
    return out;
  }

  // Data object `index` of the part, verified, into `into` (a writable
  // buffer of exactly its size: a tensor the caller sends from).
  void ReadObjectInto(const std::string& manifest_object, size_t index, py::buffer into) {
    py::buffer_info info = into.request(true);
    Status st;
    {
      py::gil_scoped_release release;
      st = store_->ReadObjectInto(manifest_object, index, info.ptr, static_cast<size_t>(info.size * info.itemsize));
    }
    ThrowIfError(st);
  }

  py::dict WriteReplica(const std::string& manifest_object, const py::bytes& manifest, const py::list& objects) {
    const std::string manifest_bytes = manifest;
    std::vector<py::buffer_info> infos;
    std::vector<std::string_view> views;
    for (const auto& o : objects) {
      infos.push_back(o.cast<py::buffer>().request());
      views.emplace_back(static_cast<const char*>(infos.back().ptr),
                         static_cast<size_t>(infos.back().size * infos.back().itemsize));
    }
    Result<RankDigest> r = RankDigest();
    {
      py::gil_scoped_release release;
      r = store_->WriteReplica(manifest_object, manifest_bytes, views);
    }
    return DigestDict(ValueOrThrow(std::move(r)));
  }

  void ReleaseReplica(const std::string& manifest_object) { store_->ReleaseReplica(manifest_object); }

  void PublishPeerCommit(const py::dict& d) {
    PeerCommit c;
    c.name = d["name"].cast<std::string>();
    c.step = d["step"].cast<uint64_t>();
    c.world = d["world"].cast<uint32_t>();
    c.attempt = d["attempt"].cast<std::string>();
    c.replicas = d["replicas"].cast<uint32_t>();
    for (const auto& r : d["ranks"].cast<py::list>()) c.ranks.push_back(DigestOf(r.cast<py::dict>()));
    for (const auto& h : d["holders"].cast<py::list>()) {
      auto hd = h.cast<py::dict>();
      c.holders.push_back(PartHolding{hd["host"].cast<std::string>(), hd["domain"].cast<std::string>(),
                                      hd["ranks"].cast<std::vector<uint32_t>>()});
    }
    Status st;
    {
      py::gil_scoped_release release;
      st = store_->PublishPeerCommit(c);
    }
    ThrowIfError(st);
  }

  py::dict ReadPeerCommit(const std::string& name, uint64_t step) {
    PeerCommit c = ValueOrThrow(store_->ReadPeerCommit(name, step));
    py::dict out;
    out["name"] = c.name;
    out["step"] = c.step;
    out["world"] = c.world;
    out["attempt"] = c.attempt;
    out["replicas"] = c.replicas;
    py::list ranks, holders;
    for (const auto& r : c.ranks) ranks.append(DigestDict(r));
    for (const auto& h : c.holders) {
      py::dict hd;
      hd["host"] = h.host;
      hd["domain"] = h.domain;
      hd["ranks"] = h.ranks;
      holders.append(hd);
    }
    out["ranks"] = ranks;
    out["holders"] = holders;
    return out;
  }

  std::optional<uint64_t> NewestPeerCommit(const std::string& name) {
    return ValueOrThrow(store_->NewestPeerCommit(name));
  }

  std::vector<std::pair<uint64_t, std::string>> RecentPeerCommits(const std::string& name, size_t limit) {
    return ValueOrThrow(store_->RecentPeerCommits(name, limit));
  }

  void RemoveStep(const std::string& name, uint64_t step) { ThrowIfError(store_->RemoveStep(name, step)); }

  std::vector<uint32_t> RanksHeld(const std::string& name, uint64_t step) {
    return ValueOrThrow(store_->RanksHeld(name, step));
  }

 private:
  std::unique_ptr<PeerStore> store_;
};

}  // namespace

void BindPeer(py::module_& m) {
  py::class_<PyPeerStore>(m, "PeerStore")
      .def(py::init<const std::string&, bool, uint64_t>(), py::arg("uri"), py::arg("create") = false,
           py::arg("io_bytes") = 4ull << 20)
      .def("read_part", &PyPeerStore::ReadPart, py::arg("manifest_object"))
      .def("read_object_into", &PyPeerStore::ReadObjectInto, py::arg("manifest_object"), py::arg("index"),
           py::arg("into"))
      .def("write_replica", &PyPeerStore::WriteReplica, py::arg("manifest_object"), py::arg("manifest"),
           py::arg("objects"))
      .def("release_replica", &PyPeerStore::ReleaseReplica, py::arg("manifest_object"))
      .def("publish_peer_commit", &PyPeerStore::PublishPeerCommit, py::arg("commit"))
      .def("read_peer_commit", &PyPeerStore::ReadPeerCommit, py::arg("name"), py::arg("step"))
      .def("newest_peer_commit", &PyPeerStore::NewestPeerCommit, py::arg("name"))
      .def("recent_peer_commits", &PyPeerStore::RecentPeerCommits, py::arg("name"), py::arg("limit") = 16)
      .def("remove_step", &PyPeerStore::RemoveStep, py::arg("name"), py::arg("step"))
      .def("ranks_held", &PyPeerStore::RanksHeld, py::arg("name"), py::arg("step"));
}

}  // namespace sluice::pyb

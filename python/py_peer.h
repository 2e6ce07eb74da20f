// The _sluice binding of peer replicas' store side (sluice/peer.h).
#ifndef SLUICE_PYTHON_PY_PEER_H_
#define SLUICE_PYTHON_PY_PEER_H_

#include <pybind11/pybind11.h>

namespace sluice::pyb {

// PeerStore(uri): read a part to send, write a received replica, publish
// and read peer commits.
void BindPeer(pybind11::module_& m);

}  // namespace sluice::pyb

#endif  // SLUICE_PYTHON_PY_PEER_H_

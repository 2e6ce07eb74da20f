// Which items of a checkpoint are tensors, and their names outside sluice:
// what `sluice export` and `sluice import` agree on with the Python package.
//   t/<path>           sluice.save: the tensor at <path> of the state dict
//                      (components escaped as python/sluice/_state_dict.py
//                      does); its name is the components joined by '.'.
//   dcp/<fqn>@<offs>   the DCP writer: one chunk of tensor <fqn>; a whole
//                      tensor is one chunk at offsets 0 (dcp/r<rank>/...
//                      without collectives: each rank's copy).
// Metadata of both: JSON {"dtype": "float32", "shape": [..], ...}.
#ifndef SLUICE_TOOLS_SLUICE_TENSOR_ITEMS_H_
#define SLUICE_TOOLS_SLUICE_TENSOR_ITEMS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sluice/store.h"

namespace sluice::cli {

struct TensorItem {
  std::string key;    // the item
  std::string name;   // e.g. "model.layers.0.weight"
  std::string dtype;  // torch's name: "float32"
  std::vector<uint64_t> shape;
  uint64_t size = 0;
  bool dcp_chunk_at_origin = true;  // false: a DCP chunk at nonzero offsets
};

// The tensor an item holds, or nullopt (not a tensor item, or metadata that
// does not describe one).
std::optional<TensorItem> TensorItemOf(const ItemInfo& item);

// One state-dict path component as an item key component, and back.
std::string EscapeComponent(const std::string& component);
std::string UnescapeComponent(const std::string& text);

// The item metadata sluice.save writes for a tensor.
std::string TensorMetadata(const std::string& torch_dtype, const std::vector<uint64_t>& shape);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_TENSOR_ITEMS_H_

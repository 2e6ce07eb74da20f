// Safetensors (Hugging Face) files: the header that `sluice export` writes
// and `sluice import` reads. A file is
//   u64 little-endian N | N bytes of JSON header | data
// where the header maps each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end)} relative to the data, plus an optional
// "__metadata__" object of strings. The parser treats the header as
// untrusted: it refuses a header past the file or past 100 MB, bad JSON, an
// unknown dtype, a shape whose bytes differ from its offsets, offsets past
// the data, overlapping tensors, and duplicate names, each naming the file
// and tensor. Sharded models add model.safetensors.index.json, whose
// "weight_map" names the file of each tensor.
//
// Thread-safety: values and pure functions.
#ifndef SLUICE_SAFETENSORS_H_
#define SLUICE_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // safetensors' name: F32, BF16, I64, BOOL, ...
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // data offsets, relative to the end of the header
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N: where the data begins in the file
};

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Bytes per element of a safetensors dtype; 0 if unknown.
uint64_t SafetensorsDtypeBytes(std::string_view dtype);
// The safetensors dtype of a torch dtype name as sluice.save stores it
// ("float32" -> "F32"), and back; empty if there is none.
std::string SafetensorsDtypeOfTorch(std::string_view torch_dtype);
std::string TorchDtypeOfSafetensors(std::string_view dtype);

// The header length N from a file's first 8 bytes (Corruption unless the
// header fits in a file of `file_size` bytes and under the limit).
Result<uint64_t> SafetensorsHeaderLength(std::string_view first8, uint64_t file_size,
                                         const std::string& what);
// Parses and checks the N header bytes of a file of `file_size` bytes.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json, uint64_t file_size,
                                                 const std::string& what);
// The first 8 + N bytes of a file holding `tensors` (their offsets set by
// the caller, back to back from 0), padded with spaces so that the data
// starts 8-byte aligned.
std::string EncodeSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                    const std::map<std::string, std::string>& metadata);

// model.safetensors.index.json: tensor name -> file name.
Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view json,
                                                                 const std::string& what);
std::string EncodeSafetensorsIndex(const std::map<std::string, std::string>& weight_map,
                                   uint64_t total_size);

}  // namespace sluice

#endif  // SLUICE_SAFETENSORS_H_

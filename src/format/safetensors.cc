#include "sluice/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

namespace sluice {
namespace {

using Json = nlohmann::ordered_json;

struct DtypePair {
  const char* safetensors;
  const char* torch;
  uint64_t bytes;
};
constexpr DtypePair kDtypes[] = {
    {"BOOL", "bool", 1},       {"U8", "uint8", 1},       {"I8", "int8", 1},
    {"I16", "int16", 2},       {"I32", "int32", 4},      {"I64", "int64", 8},
    {"F16", "float16", 2},     {"BF16", "bfloat16", 2},  {"F32", "float32", 4},
    {"F64", "float64", 8},     {"C64", "complex64", 8},  {"U16", "", 2},
    {"U32", "", 4},            {"U64", "", 8},           {"F8_E4M3", "", 1},
    {"F8_E5M2", "", 1},
};

Status Bad(const std::string& what, const std::string& why) {
  return Status::Corruption(what + ": " + why);
}

}  // namespace

uint64_t SafetensorsDtypeBytes(std::string_view dtype) {
  for (const auto& d : kDtypes) {
    if (dtype == d.safetensors) return d.bytes;
  }
  return 0;
}

std::string SafetensorsDtypeOfTorch(std::string_view torch_dtype) {
  for (const auto& d : kDtypes) {
    if (*d.torch != '\0' && torch_dtype == d.torch) return d.safetensors;
  }
  return "";
}

std::string TorchDtypeOfSafetensors(std::string_view dtype) {
  for (const auto& d : kDtypes) {
    if (dtype == d.safetensors) return d.torch;
  }
  return "";
}

Result<uint64_t> SafetensorsHeaderLength(std::string_view first8, uint64_t file_size,
                                         const std::string& what) {
  if (first8.size() < 8 || file_size < 8) return Bad(what, "shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(first8[i]);
  if (n < 2) return Bad(what, "header of " + std::to_string(n) + " bytes");
  if (n > kMaxSafetensorsHeaderBytes) {
    return Bad(what, "header of " + std::to_string(n) + " bytes, over the 100 MB limit");
  }
  if (n > file_size - 8) {
    return Bad(what, "header of " + std::to_string(n) + " bytes runs past the end of the file (" +
                         std::to_string(file_size) + " bytes): truncated?");
  }
  return n;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json, uint64_t file_size,
                                                 const std::string& what) {
  SafetensorsHeader out;
  out.data_start = 8 + json.size();
  if (out.data_start > file_size) return Bad(what, "header runs past the end of the file");
  const uint64_t data_bytes = file_size - out.data_start;
  // Duplicate names: nlohmann keeps the last of duplicate keys, so they are
  // caught while parsing.
  std::set<std::string> names;
  std::string duplicate;
  Json::parser_callback_t cb = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && duplicate.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!names.insert(key).second) duplicate = key;
    }
    return true;
  };
  Json header = Json::parse(json.begin(), json.end(), cb, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Bad(what, "header is not valid JSON");
  if (!duplicate.empty()) return Bad(what, "tensor '" + duplicate + "' appears twice in the header");
  if (!header.is_object()) return Bad(what, "header is not a JSON object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return Bad(what, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return Bad(what, "__metadata__ '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string tw = what + ": tensor '" + name + "'";
    if (name.empty()) return Status::Corruption(what + ": a tensor has an empty name");
    if (!v.is_object()) return Status::Corruption(tw + " is not an object");
    auto dtype = v.find("dtype");
    auto shape = v.find("shape");
    auto offsets = v.find("data_offsets");
    if (dtype == v.end() || !dtype->is_string()) return Status::Corruption(tw + ": no dtype");
    if (shape == v.end() || !shape->is_array()) return Status::Corruption(tw + ": no shape");
    if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return Status::Corruption(tw + ": data_offsets must be [begin, end]");
    }
    SafetensorsTensor t;
    t.name = name;
    t.dtype = dtype->get<std::string>();
    const uint64_t elem = SafetensorsDtypeBytes(t.dtype);
    if (elem == 0) return Status::Corruption(tw + ": unknown dtype '" + t.dtype + "'");
    uint64_t count = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) return Status::Corruption(tw + ": shape has a non-integer");
      const uint64_t n = d.get<uint64_t>();
      if (n != 0 && count > UINT64_MAX / n) return Status::Corruption(tw + ": shape overflows");
      count *= n;
      t.shape.push_back(n);
    }
    if (count > UINT64_MAX / elem) return Status::Corruption(tw + ": shape overflows");
    t.begin = (*offsets)[0].get<uint64_t>();
    t.end = (*offsets)[1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_bytes) {
      return Status::Corruption(tw + ": data_offsets [" + std::to_string(t.begin) + ", " +
                                std::to_string(t.end) + ") outside the " + std::to_string(data_bytes) +
                                " data bytes (truncated file?)");
    }
    if (t.end - t.begin != count * elem) {
      return Status::Corruption(tw + ": " + std::to_string(t.end - t.begin) + " data bytes for " +
                                t.dtype + " of " + std::to_string(count) + " elements");
    }
    out.tensors.push_back(std::move(t));
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (size_t i = 1; i < out.tensors.size(); ++i) {
    const auto& a = out.tensors[i - 1];
    const auto& b = out.tensors[i];
    if (b.begin < a.end) {
      return Bad(what, "tensors '" + a.name + "' and '" + b.name + "' overlap in the data");
    }
  }
  return out;
}

std::string EncodeSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                    const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  for (const auto& t : tensors) {
    header[t.name] = Json{{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = header.dump(-1, ' ', false, Json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + text;
}

Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view json,
                                                                 const std::string& what) {
  Json index = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) return Bad(what, "not a JSON object");
  auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object()) return Bad(what, "no weight_map object");
  std::map<std::string, std::string> out;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it.value().is_string()) return Bad(what, "weight_map '" + it.key() + "' is not a file name");
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return Bad(what, "weight_map '" + it.key() + "' names '" + file + "', not a file beside it");
    }
    out[it.key()] = file;
  }
  return out;
}

std::string EncodeSafetensorsIndex(const std::map<std::string, std::string>& weight_map,
                                   uint64_t total_size) {
  Json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", Json::object()}};
  for (const auto& [name, file] : weight_map) index["weight_map"][name] = file;
  return index.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace sluice

#include "tensor_items.h"

#include <nlohmann/json.hpp>

namespace sluice::cli {

std::string EscapeComponent(const std::string& component) {
  if (component.empty()) return "%";
  if (component == ".") return "%2E";
  if (component == "..") return "%2E%2E";
  std::string out;
  for (char c : component) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else {
      out += c;
    }
  }
  return out;
}

std::string UnescapeComponent(const std::string& text) {
  if (text == "%") return "";
  if (text == "%2E") return ".";
  if (text == "%2E%2E") return "..";
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 3, "%2F") == 0) {
      out += '/';
      i += 2;
    } else if (text.compare(i, 3, "%25") == 0) {
      out += '%';
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string TensorMetadata(const std::string& torch_dtype, const std::vector<uint64_t>& shape) {
  nlohmann::json j = {{"dtype", torch_dtype}, {"shape", shape}};
  return j.dump();
}

std::optional<TensorItem> TensorItemOf(const ItemInfo& item) {
  TensorItem t;
  t.key = item.key;
  t.size = item.size;
  if (item.key.rfind("t/", 0) == 0) {
    std::string rest = item.key.substr(2);
    size_t start = 0;
    for (;;) {
      size_t slash = rest.find('/', start);
      if (!t.name.empty() || start > 0) t.name += '.';
      t.name += UnescapeComponent(rest.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
  } else if (item.key.rfind("dcp/", 0) == 0) {
    std::string rest = item.key.substr(4);
    // A save without collectives keeps each rank's items under "r<rank>/".
    if (rest.size() > 2 && rest[0] == 'r' && rest.find('/') != std::string::npos &&
        rest.find_first_not_of("0123456789", 1) == rest.find('/')) {
      rest = rest.substr(rest.find('/') + 1);
    }
    size_t at = rest.rfind('@');
    if (at == std::string::npos) return std::nullopt;  // a DCP byte item
    t.name = UnescapeComponent(rest.substr(0, at));
    for (char c : rest.substr(at + 1)) {
      if (c != '0' && c != '_') t.dcp_chunk_at_origin = false;
    }
  } else {
    return std::nullopt;
  }
  nlohmann::json meta = nlohmann::json::parse(item.metadata, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) return std::nullopt;
  auto dtype = meta.find("dtype");
  auto shape = meta.find("shape");
  if (dtype == meta.end() || !dtype->is_string() || shape == meta.end() || !shape->is_array()) {
    return std::nullopt;
  }
  t.dtype = dtype->get<std::string>();
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned()) return std::nullopt;
    t.shape.push_back(d.get<uint64_t>());
  }
  return t;
}

}  // namespace sluice::cli

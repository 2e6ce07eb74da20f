// FNV-1a 64 of a string, as 16 lowercase hex digits: a stable, short,
// filesystem-safe name for any text (a drain note's tier URI, a store's
// home path). Its offset basis is 1469598103934665603, not the standard
// 14695981039346656037 (a digit short since the first version), so it does
// not match other FNV-1a implementations; it stays, because names already
// on disk depend on it.
#ifndef SLUICE_IO_FNV1A_H_
#define SLUICE_IO_FNV1A_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace sluice {

inline std::string Fnv1aHex(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace sluice

#endif  // SLUICE_IO_FNV1A_H_

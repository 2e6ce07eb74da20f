#include "sluice/safetensors.h"

#include <gtest/gtest.h>

#include <string>

#include "format/abort_note.h"

namespace sluice {
namespace {

// A file: 8-byte length, `json`, then `data_bytes` zero bytes.
std::string File(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(json.size()) >> (8 * i));
  return out + json + std::string(data_bytes, '\0');
}

Result<SafetensorsHeader> Parse(const std::string& file) {
  auto n = SafetensorsHeaderLength(file, file.size(), "f.safetensors");
  if (!n.ok()) return n.status();
  return ParseSafetensorsHeader(std::string_view(file).substr(8, *n), file.size(), "f.safetensors");
}

TEST(Safetensors, ParsesTensorsInDataOrderWithMetadata) {
  auto h = Parse(File(R"({"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]},)"
                      R"("__metadata__":{"format":"pt"},)"
                      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("s":{"dtype":"I64","shape":[],"data_offsets":[12,20]}})",
                      20));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), 3u);
  EXPECT_EQ(h->tensors[0].name, "a");
  EXPECT_EQ(h->tensors[1].name, "b");
  EXPECT_EQ(h->tensors[1].shape, (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(h->tensors[2].shape.empty());  // a scalar: one element
  EXPECT_EQ(h->metadata.at("format"), "pt");
}

TEST(Safetensors, EncodedHeadersParseBackAndAlignTheData) {
  std::vector<SafetensorsTensor> ts = {{"w", "F16", {3}, 0, 6}, {"x.y", "U8", {2, 1}, 6, 8}};
  std::string head = EncodeSafetensorsHeader(ts, {{"k", "v"}});
  EXPECT_EQ(head.size() % 8, 0u);
  auto h = Parse(head + std::string(8, 'z'));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), 2u);
  EXPECT_EQ(h->tensors[1].name, "x.y");
  EXPECT_EQ(h->data_start, head.size());
  EXPECT_EQ(h->metadata.at("k"), "v");
}

TEST(Safetensors, RefusesEveryKindOfBadHeaderByName) {
  const std::string ok_a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  struct Case {
    std::string file;
    std::string says;
  } cases[] = {
      {File("{" + ok_a + "}", 4), "outside"},                         // truncated data
      {File("{" + ok_a + "}", 8).substr(0, 20), "past the end"},       // truncated header
      {File("{" + ok_a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "overlap"},
      {File("{" + ok_a + "," + ok_a + "}", 8), "appears twice"},
      {File(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8), "unknown dtype"},
      {File(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "8 data bytes for F32 of 3"},
      {File(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-integer"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "outside"},
      {File(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "data_offsets"},
      {File(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8), "overflows"},
      {File("{\"a\":", 8), "not valid JSON"},
      {File("[1,2]", 8), "not a JSON object"},
      {File(R"({"__metadata__":{"k":1}})", 0), "not a string"},
      {std::string("\x05\0\0\0\0\0\0\0{}", 10), "past the end"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10), "limit"},
      {std::string("abc"), "8-byte"},
  };
  for (const auto& c : cases) {
    auto h = Parse(c.file);
    ASSERT_FALSE(h.ok()) << c.says;
    EXPECT_EQ(h.status().code(), StatusCode::kCorruption) << c.says;
    EXPECT_NE(h.status().message().find(c.says), std::string::npos) << h.status().message();
    EXPECT_NE(h.status().message().find("f.safetensors"), std::string::npos) << h.status().message();
  }
}

TEST(Safetensors, IndexMapsNamesToFilesBesideIt) {
  auto m = ParseSafetensorsIndex(EncodeSafetensorsIndex({{"a", "m-1.safetensors"}, {"b", "m-2.safetensors"}}, 12),
                                 "index");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->at("b"), "m-2.safetensors");
  EXPECT_FALSE(ParseSafetensorsIndex(R"({"weight_map":{"a":"../etc/passwd"}})", "index").ok());
  EXPECT_FALSE(ParseSafetensorsIndex(R"({"weight_map":{"a":1}})", "index").ok());
  EXPECT_FALSE(ParseSafetensorsIndex(R"({"nothing":{}})", "index").ok());
}

TEST(Safetensors, DtypesMapBothWays) {
  EXPECT_EQ(SafetensorsDtypeOfTorch("bfloat16"), "BF16");
  EXPECT_EQ(TorchDtypeOfSafetensors("BF16"), "bfloat16");
  EXPECT_EQ(SafetensorsDtypeOfTorch("complex128"), "");  // safetensors has no C128
  EXPECT_EQ(TorchDtypeOfSafetensors("F8_E4M3"), "");     // sluice.load has no float8 yet
  EXPECT_EQ(SafetensorsDtypeBytes("F64"), 8u);
}

TEST(AbortNote, RoundTripsAndRefusesDamage) {
  AbortNote n{"launch-7", 3, "disk full", 1234};
  std::string bytes = EncodeAbortNote(n);
  auto back = DecodeAbortNote(bytes, "note");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->attempt, "launch-7");
  EXPECT_EQ(back->rank, 3u);
  EXPECT_EQ(back->reason, "disk full");
  bytes[bytes.size() / 2] ^= 1;
  EXPECT_FALSE(DecodeAbortNote(bytes, "note").ok());
}

}  // namespace
}  // namespace sluice

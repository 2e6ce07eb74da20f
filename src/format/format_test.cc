#include <gtest/gtest.h>

#include <random>
#include <string>

#include "format/commit_record.h"
#include "format/peer_commit.h"
#include "format/encoding.h"
#include "format/record_frame.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "io/crc32c.h"
#include "sluice/names.h"

namespace sluice {
namespace {

Manifest SampleManifest() {
  Manifest m;
  m.name = "llama-8b";
  m.step = 1200;
  m.rank = 1;
  m.world = 4;
  m.writer_id = "0123456789abcdef";
  m.created_unix_ms = 1796212767242;
  m.chunk_bytes = 4 << 20;
  m.objects = {{"ckpt/llama-8b/x/data/a.dat", 10 << 20}, {"ckpt/llama-8b/x/data/b.dat", 100}};
  ManifestItem a{"model/layers.0/w", "dtype=bf16;shape=[4096,4096]", (4 << 20) + 10, {}};
  a.chunks = {{0, 0, 4 << 20, 0x11111111, false, {}}, {0, 4 << 20, 10, 0x22222222, false, {}}};
  ManifestItem empty{"empty", "", 0, {}};
  ManifestItem b{"ünïcode/ключ", std::string("\0\1\2", 3), 100, {{1, 0, 100, 0x33333333, false, {}}}};
  m.items = {a, empty, b};
  return m;
}

CommitRecord SampleCommit() {
  CommitRecord c;
  c.name = "llama-8b";
  c.step = 1200;
  c.world = 2;
  c.created_unix_ms = 42;
  c.ranks = {{0, "ckpt/m0.man", 123, 0xabcdef01, 3, 1000}, {1, "ckpt/m1.man", 456, 0x01020304, 4, 2000}};
  return c;
}

TEST(Manifest, RoundTripsEveryField) {
  Manifest m = SampleManifest();
  auto d = DecodeManifest(EncodeManifest(m), "test");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->name, m.name);
  EXPECT_EQ(d->step, m.step);
  EXPECT_EQ(d->rank, m.rank);
  EXPECT_EQ(d->world, m.world);
  EXPECT_EQ(d->writer_id, m.writer_id);
  EXPECT_EQ(d->created_unix_ms, m.created_unix_ms);
  ASSERT_EQ(d->objects.size(), 2u);
  EXPECT_EQ(d->objects[1].name, m.objects[1].name);
  ASSERT_EQ(d->items.size(), 3u);
  EXPECT_EQ(d->items[0].metadata, m.items[0].metadata);
  EXPECT_EQ(d->items[2].key, m.items[2].key);
  EXPECT_EQ(d->items[2].metadata, m.items[2].metadata);
  ASSERT_EQ(d->items[0].chunks.size(), 2u);
  EXPECT_EQ(d->items[0].chunks[1].offset, 4u << 20);
  EXPECT_EQ(d->items[0].chunks[1].crc32c, 0x22222222u);
  EXPECT_EQ(d->TotalBytes(), m.TotalBytes());
}

TEST(Manifest, EveryTruncationIsCorruption) {
  std::string enc = EncodeManifest(SampleManifest());
  for (size_t n = 0; n < enc.size(); ++n) {
    auto d = DecodeManifest(enc.substr(0, n), "test");
    ASSERT_FALSE(d.ok()) << "prefix " << n;
    EXPECT_TRUE(d.status().IsCorruption()) << d.status().ToString();
  }
}

TEST(Manifest, EverySingleBitFlipIsRejected) {
  std::string enc = EncodeManifest(SampleManifest());
  for (size_t i = 0; i < enc.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = enc;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      auto d = DecodeManifest(bad, "test");
      ASSERT_FALSE(d.ok()) << "byte " << i << " bit " << bit;
    }
  }
}

// A structurally wrong manifest with a valid envelope must still be refused:
// the crc only proves the bytes are what some writer wrote.
TEST(Manifest, SemanticChecksRejectInconsistentContent) {
  auto expect_bad = [](Manifest m, const char* what) {
    auto d = DecodeManifest(EncodeManifest(m), "test");
    EXPECT_TRUE(!d.ok() && d.status().IsCorruption()) << what;
  };
  Manifest m = SampleManifest();
  m.items[0].size += 1;
  expect_bad(m, "size != sum of chunks");
  m = SampleManifest();
  m.items[0].chunks[0].object = 7;
  expect_bad(m, "object index out of range");
  m = SampleManifest();
  m.items[0].chunks[1].offset = (10 << 20) - 5;
  expect_bad(m, "chunk past end of object");
  m = SampleManifest();
  m.items[1].key = m.items[0].key;
  expect_bad(m, "duplicate key");
  m = SampleManifest();
  m.items[0].key = "../../etc/passwd";
  expect_bad(m, "traversal key");
  m = SampleManifest();
  m.rank = 4;
  expect_bad(m, "rank >= world");
  m = SampleManifest();
  m.name = "a/b";
  expect_bad(m, "bad name");
}

TEST(Manifest, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(1);
  std::string enc = EncodeManifest(SampleManifest());
  for (int trial = 0; trial < 20000; ++trial) {
    std::string g = enc;
    int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) g[rng() % g.size()] = static_cast<char>(rng());
    if (rng() % 4 == 0) g.resize(rng() % g.size());
    (void)DecodeManifest(g, "fuzz").ok();
  }
  for (int trial = 0; trial < 2000; ++trial) {
    std::string g(rng() % 256, '\0');
    for (auto& c : g) c = static_cast<char>(rng());
    EXPECT_FALSE(DecodeManifest(g, "fuzz").ok());
  }
}

TEST(Manifest, ChunkHashesRoundTripAndReferencesAreCounted) {
  Manifest m = SampleManifest();
  m.name = "m";
  m.step = 7;
  m.objects = {{"ckpt/m/00000000000000000007/data/r000001-0123456789abcdef-000000.dat", 10 << 20},
               {"ckpt/m/00000000000000000003/data/r000001-fedcba9876543210-000002.dat", 100}};
  m.items[0].chunks[0].has_hash = true;
  m.items[0].chunks[0].hash = Hash128{0x0102030405060708ull, 0xa0b0c0d0e0f00010ull};
  auto d = DecodeManifest(EncodeManifest(m), "test");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->items[0].chunks[0].has_hash);
  EXPECT_EQ(d->items[0].chunks[0].hash, m.items[0].chunks[0].hash);
  EXPECT_FALSE(d->items[0].chunks[1].has_hash);
  EXPECT_FALSE(d->IsReference(0));
  EXPECT_TRUE(d->IsReference(1));
  EXPECT_EQ(d->ReferencedBytes(), 100u);  // item b's chunk lies in step 3's object
  EXPECT_EQ(d->OwnBytes(), (4u << 20) + 10);
  EXPECT_EQ(StepOfDataObject("m", m.objects[1].name), std::optional<uint64_t>(3));
  // An object in this step's folder that another writer wrote (a removed
  // earlier save of the same step number, kept for a later step) is shared.
  d->objects[0].name = "ckpt/m/00000000000000000007/data/r000001-aaaaaaaaaaaaaaaa-000000.dat";
  EXPECT_TRUE(d->IsReference(0));
}

// A manifest written before chunk hashes existed (format version 1, no
// per-chunk flags) is still read, with no hashes.
TEST(Manifest, VersionOneManifestsAreStillRead) {
  const Manifest m = SampleManifest();
  Encoder e;
  e.PutBytes(m.name);
  e.PutVarint(m.step);
  e.PutVarint(m.rank);
  e.PutVarint(m.world);
  e.PutBytes(m.writer_id);
  e.PutBytes(m.attempt);
  e.PutVarint(static_cast<uint64_t>(m.created_unix_ms));
  e.PutVarint(m.chunk_bytes);
  e.PutVarint(m.objects.size());
  for (const auto& o : m.objects) {
    e.PutBytes(o.name);
    e.PutVarint(o.size);
  }
  e.PutVarint(m.items.size());
  for (const auto& it : m.items) {
    e.PutBytes(it.key);
    e.PutBytes(it.metadata);
    e.PutVarint(it.size);
    e.PutVarint(it.chunks.size());
    for (const auto& c : it.chunks) {
      e.PutVarint(c.object);
      e.PutVarint(c.offset);
      e.PutVarint(c.length);
      e.PutFixed32(c.crc32c);
    }
  }
  auto d = DecodeManifest(FrameRecord(kManifestMagic, e.buffer(), 1), "v1");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->items.size(), 3u);
  EXPECT_EQ(d->items[0].chunks[1].crc32c, 0x22222222u);
  EXPECT_FALSE(d->items[0].chunks[0].has_hash);
  // A version this sluice does not know is NotSupported, not corruption.
  auto v3 = DecodeManifest(FrameRecord(kManifestMagic, e.buffer(), 3), "v3");
  EXPECT_EQ(v3.status().code(), StatusCode::kNotSupported);
}

TEST(CommitRecord, RoundTripsAndRejectsDamage) {
  CommitRecord c = SampleCommit();
  std::string enc = EncodeCommitRecord(c);
  auto d = DecodeCommitRecord(enc, "test");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->world, 2u);
  EXPECT_EQ(d->ranks[1].manifest, "ckpt/m1.man");
  EXPECT_EQ(d->ranks[1].manifest_crc32c, 0x01020304u);
  EXPECT_EQ(d->TotalBytes(), 3000u);
  EXPECT_EQ(d->TotalItems(), 7u);
  for (size_t n = 0; n < enc.size(); ++n) ASSERT_FALSE(DecodeCommitRecord(enc.substr(0, n), "t").ok());
  for (size_t i = 0; i < enc.size(); ++i) {
    std::string bad = enc;
    bad[i] = static_cast<char>(bad[i] ^ 0x40);
    ASSERT_FALSE(DecodeCommitRecord(bad, "t").ok()) << i;
  }
  c.ranks[1].rank = 0;
  EXPECT_FALSE(DecodeCommitRecord(EncodeCommitRecord(c), "t").ok()) << "ranks out of order";
  c = SampleCommit();
  c.world = 3;
  EXPECT_FALSE(DecodeCommitRecord(EncodeCommitRecord(c), "t").ok()) << "missing rank";
}

TEST(CommitRecord, NewerVersionIsNotSupportedNotCorruption) {
  std::string enc = EncodeCommitRecord(SampleCommit());
  // A future sluice's record: version 2, with a valid crc.
  enc[8] = 2;
  uint32_t crc = Crc32c(enc.data(), enc.size() - 4);
  for (int i = 0; i < 4; ++i) enc[enc.size() - 4 + i] = static_cast<char>(crc >> (8 * i));
  auto d = DecodeCommitRecord(enc, "t");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotSupported) << d.status().ToString();
}

TEST(Names, CheckpointNames) {
  EXPECT_TRUE(ValidateCheckpointName("llama3-8b_run.2").ok());
  EXPECT_TRUE(ValidateCheckpointName("ünïcode").ok());
  EXPECT_TRUE(ValidateCheckpointName(std::string(255, 'a')).ok());
  EXPECT_FALSE(ValidateCheckpointName("").ok());
  EXPECT_FALSE(ValidateCheckpointName(std::string(256, 'a')).ok());
  EXPECT_FALSE(ValidateCheckpointName("a/b").ok());
  EXPECT_FALSE(ValidateCheckpointName("..").ok());
  EXPECT_FALSE(ValidateCheckpointName(".").ok());
  EXPECT_FALSE(ValidateCheckpointName(std::string("a\0b", 3)).ok());
  EXPECT_FALSE(ValidateCheckpointName("a\nb").ok());
  EXPECT_FALSE(ValidateCheckpointName("a\x7f").ok());
}

// Names are shown and typed back, so they must be text: C1 controls and
// ill-formed UTF-8 are refused, and the messages stay valid UTF-8.
TEST(Names, CheckpointNamesAreValidUtf8WithoutControls) {
  EXPECT_TRUE(ValidateCheckpointName("\xe6\x97\xa5\xe6\x9c\xac-\xf0\x9f\x9a\x80").ok());  // 日本-🚀
  Status c1 = ValidateCheckpointName("run\xc2\x85x");  // U+0085 NEXT LINE
  EXPECT_FALSE(c1.ok());
  EXPECT_NE(c1.message().find("control character"), std::string::npos) << c1.ToString();
  for (const char* bad : {"a\xff", "a\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    Status st = ValidateCheckpointName(bad);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("not valid UTF-8"), std::string::npos) << st.ToString();
  }
  // 128 two-byte characters (256 bytes): the message cuts at a character
  // boundary, never in the middle of one.
  std::string long_name;
  for (int i = 0; i < 128; ++i) long_name += "\xc3\xa9";
  Status st = ValidateCheckpointName(long_name);
  ASSERT_FALSE(st.ok());
  const std::string m = st.message();
  const size_t open = m.find('\''), close = m.find('\'', open + 1);
  ASSERT_NE(close, std::string::npos);
  const std::string shown = m.substr(open + 1, close - open - 1);
  EXPECT_EQ(shown.size() % 2, 0u) << m;
  EXPECT_EQ(shown, long_name.substr(0, shown.size()));
}

TEST(Names, ItemKeys) {
  EXPECT_TRUE(ValidateItemKey("a/b/c.bin").ok());
  EXPECT_TRUE(ValidateItemKey("..hidden/x..y").ok());
  EXPECT_FALSE(ValidateItemKey("").ok());
  EXPECT_FALSE(ValidateItemKey("/abs").ok());
  EXPECT_FALSE(ValidateItemKey("a//b").ok());
  EXPECT_FALSE(ValidateItemKey("a/../b").ok());
  EXPECT_FALSE(ValidateItemKey("a/./b").ok());
  EXPECT_FALSE(ValidateItemKey("a/").ok());
  EXPECT_FALSE(ValidateItemKey(std::string("a\0b", 3)).ok());
}

TEST(Names, Steps) {
  EXPECT_EQ(*ParseStep("0"), 0u);
  EXPECT_EQ(*ParseStep("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(ParseStep("18446744073709551616").ok());
  EXPECT_FALSE(ParseStep("-1").ok());
  EXPECT_FALSE(ParseStep("1.5").ok());
  EXPECT_FALSE(ParseStep("").ok());
  EXPECT_FALSE(ParseStep("12a").ok());
  EXPECT_FALSE(ParseStep(" 1").ok());
}

TEST(Layout, ObjectNamesParseBack) {
  std::string d = DataObject("n", 77, 3, "00ff", 2);
  auto p = ParseObjectName(d);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->name, "n");
  EXPECT_EQ(p->step, 77u);
  EXPECT_EQ(p->rest.rfind("data/", 0), 0u);
  auto m = ParseObjectName(ManifestObject("n", 5, 12, "abcd"));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(RankOfManifest(m->rest), 12u);
  EXPECT_EQ(ParseObjectName(CommitObject("n", UINT64_MAX))->step, UINT64_MAX);
  EXPECT_FALSE(ParseObjectName("ckpt/n/12/COMMIT").has_value());
  EXPECT_FALSE(ParseObjectName("other/x").has_value());
  // Steps sort as strings in numeric order.
  EXPECT_LT(StepPrefix("n", 9), StepPrefix("n", 10));
}

TEST(PeerCommitRecord, RoundTripsAndRefusesARankHeldInTooFewDomains) {
  PeerCommitRecord r;
  r.commit.name = "job";
  r.commit.step = 7;
  r.commit.world = 2;
  r.commit.created_unix_ms = 1234;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    r.commit.ranks.push_back(CommittedRank{rank, ManifestObject("job", 7, rank, "00000000000000a" + std::to_string(rank)),
                                           100 + rank, 7u + rank, 3, 4096});
  }
  r.attempt = "attempt-1";
  r.replicas = 1;
  r.holders = {PartHolder{"host0", "rack-a", {0, 1}}, PartHolder{"host1", "rack-b", {0, 1}}};
  auto back = DecodePeerCommitRecord(EncodePeerCommitRecord(r), "peer commit");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->attempt, "attempt-1");
  EXPECT_EQ(back->holders.size(), 2u);
  EXPECT_TRUE(SameManifests(back->commit, r.commit));
  EXPECT_EQ(back->DomainsHolding(1), 2u);

  // Both hosts in one domain: rank 1 is held in one domain, not the two a
  // safe step with one replica has.
  r.holders[1].domain = "rack-a";
  auto refused = DecodePeerCommitRecord(EncodePeerCommitRecord(r), "peer commit");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("fewer than the 2"), std::string::npos) << refused.status().message();

  // Every single-bit flip is caught by the frame's crc.
  r.holders[1].domain = "rack-b";
  std::string bytes = EncodePeerCommitRecord(r);
  bytes[bytes.size() / 2] ^= 0x10;
  EXPECT_TRUE(DecodePeerCommitRecord(bytes, "peer commit").status().IsCorruption());

  // A record of another save of the step lists other manifests.
  CommitRecord other = r.commit;
  other.ranks[1].manifest_crc32c ^= 1;
  EXPECT_FALSE(SameManifests(other, r.commit));
}

}  // namespace
}  // namespace sluice

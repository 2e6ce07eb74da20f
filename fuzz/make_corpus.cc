// Writes seed inputs for the fuzzers: valid records, so mutations start
// from the real format rather than from noise.
#include <cstdio>
#include <fstream>
#include <string>

#include "format/commit_record.h"
#include "format/manifest.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::string dir = argv[1];
  sluice::Manifest m;
  m.name = "seed";
  m.step = 7;
  m.world = 2;
  m.rank = 1;
  m.writer_id = "00ff00ff00ff00ff";
  m.chunk_bytes = 4096;
  m.objects = {{"ckpt/seed/00000000000000000007/data/r000001-00ff00ff00ff00ff-000000.dat", 10000}};
  m.items = {{"a/b", "meta", 5000, {{0, 0, 4096, 1, false, {}}, {0, 4096, 904, 2, false, {}}}}, {"empty", "", 0, {}}};
  m.items[0].chunks[0].has_hash = true;
  m.items[0].chunks[0].hash = sluice::Hash128{1, 2};
  // Each record twice: whole, and as the bare body (what the fuzz targets
  // wrap in a valid envelope).
  auto body = [](const std::string& r) { return r.substr(24, r.size() - 28); };
  std::ofstream(dir + "/manifest.seed", std::ios::binary) << sluice::EncodeManifest(m);
  std::ofstream(dir + "/manifest-body.seed", std::ios::binary) << body(sluice::EncodeManifest(m));
  sluice::CommitRecord c;
  c.name = "seed";
  c.step = 7;
  c.world = 2;
  c.ranks = {{0, "ckpt/x/r0.man", 100, 5, 1, 10}, {1, "ckpt/x/r1.man", 200, 6, 2, 20}};
  std::ofstream(dir + "/commit.seed", std::ios::binary) << sluice::EncodeCommitRecord(c);
  std::ofstream(dir + "/commit-body.seed", std::ios::binary) << body(sluice::EncodeCommitRecord(c));
  return 0;
}

// The XML documents S3 answers with (errors, listings, multipart uploads),
// parsed by expat into a small tree, and the few readings of them the
// backend needs.
//
// Thread-safety: pure functions; an XmlNode is a value.
#ifndef SLUICE_BACKENDS_S3_S3_XML_H_
#define SLUICE_BACKENDS_S3_S3_XML_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice {

struct XmlNode {
  std::string name;  // the local name: a namespace prefix is dropped
  std::string text;  // character data directly inside
  std::vector<XmlNode> children;

  // The first child named `child`, or null.
  const XmlNode* Find(const std::string& child) const;
  // The text of the first child named `child`; empty if there is none.
  std::string Text(const std::string& child) const;
};

// The document's root element; Corruption if `xml` is not well-formed (a
// truncated answer is not).
Result<XmlNode> ParseXml(const std::string& xml);

// An S3 <Error> document's Code and Message (both empty if `xml` is none).
struct S3ErrorBody {
  std::string code;
  std::string message;
};
S3ErrorBody ParseS3Error(const std::string& xml);

// One page of ListObjectsV2.
struct S3ListPage {
  struct Entry {
    std::string key;
    uint64_t size = 0;
    int64_t mtime_unix_ms = 0;
  };
  std::vector<Entry> entries;
  std::vector<std::string> common_prefixes;  // with a delimiter: each CommonPrefixes' Prefix
  bool truncated = false;
  std::string next_token;  // NextContinuationToken
};
Result<S3ListPage> ParseListObjectsV2(const std::string& xml);

// One page of ListMultipartUploads.
struct S3UploadsPage {
  struct Upload {
    std::string key;
    std::string upload_id;
    int64_t initiated_unix_ms = 0;
  };
  std::vector<Upload> uploads;
  bool truncated = false;
  std::string next_key_marker, next_upload_id_marker;
};
Result<S3UploadsPage> ParseListMultipartUploads(const std::string& xml);

// An ISO 8601 time as S3 writes it ("2026-12-06T19:45:12.000Z") in
// milliseconds since the epoch; 0 if it is not one.
int64_t ParseIso8601Ms(const std::string& s);

// `s` with &, <, >, " escaped, for XML request bodies.
std::string XmlEscape(const std::string& s);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_S3_S3_XML_H_

#include "backends/s3/s3_xml.h"

#include <expat.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace sluice {
namespace {

struct Builder {
  XmlNode root;
  std::vector<XmlNode*> open;  // the path from the root to the element being read
  bool have_root = false;
};

std::string LocalName(const char* name) {
  const char* colon = std::strrchr(name, ':');
  return colon ? std::string(colon + 1) : std::string(name);
}

void OnStart(void* data, const XML_Char* name, const XML_Char** /*attrs*/) {
  auto* b = static_cast<Builder*>(data);
  if (b->open.empty()) {
    b->root.name = LocalName(name);
    b->have_root = true;
    b->open.push_back(&b->root);
    return;
  }
  XmlNode* parent = b->open.back();
  parent->children.push_back(XmlNode{LocalName(name), "", {}});
  b->open.push_back(&parent->children.back());
}

void OnEnd(void* data, const XML_Char* /*name*/) {
  auto* b = static_cast<Builder*>(data);
  if (!b->open.empty()) b->open.pop_back();
}

void OnText(void* data, const XML_Char* s, int len) {
  auto* b = static_cast<Builder*>(data);
  if (!b->open.empty()) b->open.back()->text.append(s, static_cast<size_t>(len));
}

uint64_t ToU64(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 10); }

}  // namespace

const XmlNode* XmlNode::Find(const std::string& child) const {
  for (const XmlNode& c : children) {
    if (c.name == child) return &c;
  }
  return nullptr;
}

std::string XmlNode::Text(const std::string& child) const {
  const XmlNode* c = Find(child);
  return c ? c->text : std::string();
}

Result<XmlNode> ParseXml(const std::string& xml) {
  // Builder keeps pointers to the open elements only, which are ancestors
  // of the one being read: a vector of children grows only while its
  // parent is the innermost open element, so no kept pointer moves.
  Builder b;
  XML_Parser p = XML_ParserCreateNS(nullptr, ':');
  if (p == nullptr) return Status::IOError("s3: cannot make an XML parser");
  XML_SetUserData(p, &b);
  XML_SetElementHandler(p, OnStart, OnEnd);
  XML_SetCharacterDataHandler(p, OnText);
  const bool ok = XML_Parse(p, xml.data(), static_cast<int>(xml.size()), 1) == XML_STATUS_OK;
  std::string why = ok ? "" : XML_ErrorString(XML_GetErrorCode(p));
  XML_ParserFree(p);
  if (!ok || !b.have_root) {
    return Status::Corruption("s3: the server's answer is not well-formed XML (" +
                              (why.empty() ? std::string("no element") : why) + ", " + std::to_string(xml.size()) +
                              " bytes): truncated?");
  }
  return std::move(b.root);
}

S3ErrorBody ParseS3Error(const std::string& xml) {
  S3ErrorBody e;
  auto doc = ParseXml(xml);
  if (!doc.ok() || doc->name != "Error") return e;
  e.code = doc->Text("Code");
  e.message = doc->Text("Message");
  return e;
}

Result<S3ListPage> ParseListObjectsV2(const std::string& xml) {
  ASSIGN_OR_RETURN(XmlNode doc, ParseXml(xml));
  if (doc.name != "ListBucketResult") {
    return Status::Corruption("s3: a listing answered <" + doc.name + "> instead of <ListBucketResult>");
  }
  S3ListPage page;
  for (const XmlNode& c : doc.children) {
    if (c.name == "CommonPrefixes") page.common_prefixes.push_back(c.Text("Prefix"));
    if (c.name != "Contents") continue;
    page.entries.push_back({c.Text("Key"), ToU64(c.Text("Size")), ParseIso8601Ms(c.Text("LastModified"))});
  }
  page.truncated = doc.Text("IsTruncated") == "true";
  page.next_token = doc.Text("NextContinuationToken");
  if (page.truncated && page.next_token.empty()) {
    return Status::Corruption("s3: a truncated listing has no NextContinuationToken");
  }
  return page;
}

Result<S3UploadsPage> ParseListMultipartUploads(const std::string& xml) {
  ASSIGN_OR_RETURN(XmlNode doc, ParseXml(xml));
  if (doc.name != "ListMultipartUploadsResult") {
    return Status::Corruption("s3: a list of uploads answered <" + doc.name + ">");
  }
  S3UploadsPage page;
  for (const XmlNode& c : doc.children) {
    if (c.name != "Upload") continue;
    page.uploads.push_back({c.Text("Key"), c.Text("UploadId"), ParseIso8601Ms(c.Text("Initiated"))});
  }
  page.truncated = doc.Text("IsTruncated") == "true";
  page.next_key_marker = doc.Text("NextKeyMarker");
  page.next_upload_id_marker = doc.Text("NextUploadIdMarker");
  return page;
}

int64_t ParseIso8601Ms(const std::string& s) {
  std::tm tm{};
  int ms = 0;
  const char* rest = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return 0;
  if (*rest == '.') {
    int digits = 0;
    for (++rest; *rest >= '0' && *rest <= '9'; ++rest) {
      if (digits < 3) ms = ms * 10 + (*rest - '0');
      ++digits;
    }
    for (; digits < 3; ++digits) ms *= 10;
  }
  return static_cast<int64_t>(timegm(&tm)) * 1000 + ms;
}

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(ch);
    }
  }
  return out;
}

}  // namespace sluice

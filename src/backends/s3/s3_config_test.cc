// The s3:// store's URI options, credential lookup and XML readings: no
// server is needed (tests/s3_test.sh runs the backend against a real one).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "backends/s3/s3_config.h"
#include "backends/s3/s3_http.h"
#include "backends/s3/s3_xml.h"
#include "sluice/backend.h"

namespace sluice {
namespace {

class S3ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-s3conf-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                          "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"}) {
      if (const char* old = std::getenv(v)) saved_.emplace_back(v, old);
      unsetenv(v);
    }
    setenv("AWS_SHARED_CREDENTIALS_FILE", (dir_ + "/credentials").c_str(), 1);
    setenv("AWS_CONFIG_FILE", (dir_ + "/config").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_CONFIG_FILE");
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_REGION"}) unsetenv(v);
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
    (void)std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  void Write(const std::string& file, const std::string& text) { std::ofstream(dir_ + "/" + file) << text; }
  Result<S3Config> Parse(const std::string& uri) {
    std::string rest = uri.substr(5);
    size_t q = rest.find('?');
    return ParseS3Uri(uri, rest.substr(0, q), q == std::string::npos ? "" : rest.substr(q + 1));
  }

  std::string dir_;
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(S3ConfigTest, EnvironmentCredentialsAndOptions) {
  setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "secret/example", 1);
  auto c = Parse("s3://my-bucket/ckpt/run1/?endpoint=http://127.0.0.1:7480/&part_mib=8&qd=4&region=eu-west-1");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->bucket, "my-bucket");
  EXPECT_EQ(c->prefix, "ckpt/run1");
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:7480");
  EXPECT_EQ(c->region, "eu-west-1");
  EXPECT_TRUE(c->path_style);
  EXPECT_EQ(c->part_bytes, 8u << 20);
  EXPECT_EQ(c->queue_depth, 4u);
  EXPECT_EQ(c->credentials.access_key, "AKIDEXAMPLE");
  EXPECT_EQ(c->credentials.source, "environment");
}

TEST_F(S3ConfigTest, AwsItselfIsVirtualHostedInItsRegion) {
  setenv("AWS_ACCESS_KEY_ID", "a", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "b", 1);
  setenv("AWS_REGION", "ap-south-1", 1);
  auto c = Parse("s3://bucket-x/p");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->endpoint, "https://s3.ap-south-1.amazonaws.com");
  EXPECT_FALSE(c->path_style);
}

TEST_F(S3ConfigTest, ProfilesFromTheCredentialsAndConfigFiles) {
  Write("credentials", "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n"
                       "[ci]\naws_access_key_id=CI\naws_secret_access_key=cisecret\naws_session_token = tok\n");
  Write("config", "[profile ci]\nregion = us-west-2\nendpoint_url = http://minio:9000\n"
                  "[profile other]\naws_access_key_id = OTHER\naws_secret_access_key = othersecret\n");
  auto d = Parse("s3://bucket/p");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->credentials.access_key, "DEF");
  auto ci = Parse("s3://bucket/p?profile=ci");
  ASSERT_TRUE(ci.ok()) << ci.status().ToString();
  EXPECT_EQ(ci->credentials.access_key, "CI");
  EXPECT_EQ(ci->credentials.session_token, "tok");
  EXPECT_EQ(ci->region, "us-west-2");
  EXPECT_EQ(ci->endpoint, "http://minio:9000");
  EXPECT_NE(ci->credentials.source.find("profile 'ci'"), std::string::npos);
  setenv("AWS_PROFILE", "other", 1);
  auto other = Parse("s3://bucket/p");
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->credentials.access_key, "OTHER");
  // A profile named in the URI wins over the environment's keys.
  setenv("AWS_ACCESS_KEY_ID", "ENV", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
  EXPECT_EQ(Parse("s3://bucket/p?profile=ci")->credentials.access_key, "CI");
  EXPECT_EQ(Parse("s3://bucket/p")->credentials.access_key, "ENV");
}

TEST_F(S3ConfigTest, MissingCredentialsSayWhereItLooked) {
  auto c = Parse("s3://bucket/p");
  ASSERT_TRUE(c.status().IsNotFound()) << c.status().ToString();
  EXPECT_NE(c.status().message().find(dir_ + "/credentials"), std::string::npos) << c.status().ToString();
  setenv("AWS_ACCESS_KEY_ID", "only-the-id", 1);
  auto half = Parse("s3://bucket/p");
  EXPECT_EQ(half.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(half.status().message().find("only-the-id"), std::string::npos);
}

TEST_F(S3ConfigTest, BadUrisAreRefusedAndSecretsNeverEchoed) {
  setenv("AWS_ACCESS_KEY_ID", "a", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "b", 1);
  for (const char* bad : {"s3:///p", "s3://B/p", "s3://ab/p", "s3://bucket//p", "s3://bucket/p?colour=blue",
                          "s3://bucket/p?addressing=sideways", "s3://bucket/p?part_mib=4", "s3://bucket/p?qd=0",
                          "s3://bucket/p?endpoint=ftp://x", "s3://bucket/p?conditional=maybe"}) {
    EXPECT_EQ(Parse(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto secret = Parse("s3://bucket/p?secret_key=TOPSECRET123");
  EXPECT_EQ(secret.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(secret.status().message().find("TOPSECRET123"), std::string::npos) << secret.status().ToString();
  auto userinfo = Parse("s3://KEY:TOPSECRET123@bucket/p");
  EXPECT_EQ(userinfo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(userinfo.status().message().find("TOPSECRET123"), std::string::npos);
}

TEST(S3Encoding, KeysAndQueriesInSigV4CanonicalForm) {
  EXPECT_EQ(S3Encode("a/b c+d~e", true), "a/b%20c%2Bd~e");
  EXPECT_EQ(S3Encode("a/b", false), "a%2Fb");
  EXPECT_EQ(S3Query({{"uploadId", "x/y"}, {"partNumber", "3"}}), "partNumber=3&uploadId=x%2Fy");
  EXPECT_EQ(S3Query({{"uploads", ""}}), "uploads=");
}

TEST(S3Xml, ListingsUploadsAndErrors) {
  const std::string list =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>b</Name><IsTruncated>true</IsTruncated><NextContinuationToken>tok&amp;1</NextContinuationToken>"
      "<Contents><Key>p/a &amp; b</Key><LastModified>2026-12-06T19:45:12.345Z</LastModified><Size>42</Size></Contents>"
      "<Contents><Key>p/c</Key><Size>0</Size></Contents></ListBucketResult>";
  auto page = ParseListObjectsV2(list);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->entries.size(), 2u);
  EXPECT_EQ(page->entries[0].key, "p/a & b");
  EXPECT_EQ(page->entries[0].size, 42u);
  EXPECT_EQ(page->entries[0].mtime_unix_ms, 1796586312345);
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "tok&1");
  // A listing cut short is an error, not a shorter listing.
  EXPECT_TRUE(ParseListObjectsV2(list.substr(0, list.size() / 2)).status().IsCorruption());
  auto uploads = ParseListMultipartUploads(
      "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated><Upload><Key>p/x</Key><UploadId>2~abc</UploadId>"
      "<Initiated>2026-12-06T00:00:00.000Z</Initiated></Upload></ListMultipartUploadsResult>");
  ASSERT_TRUE(uploads.ok());
  ASSERT_EQ(uploads->uploads.size(), 1u);
  EXPECT_EQ(uploads->uploads[0].upload_id, "2~abc");
  EXPECT_EQ(uploads->uploads[0].initiated_unix_ms, 1796515200000);
  S3ErrorBody e = ParseS3Error("<Error><Code>SlowDown</Code><Message>Please reduce</Message></Error>");
  EXPECT_EQ(e.code, "SlowDown");
  EXPECT_EQ(e.message, "Please reduce");
  EXPECT_TRUE(ParseS3Error("not xml").code.empty());
}

// Without a server: a refused endpoint is a one-line Unavailable after the
// stated number of tries.
TEST_F(S3ConfigTest, ARefusedEndpointIsUnavailableAfterItsRetries) {
  setenv("AWS_ACCESS_KEY_ID", "a", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "TOPSECRET123", 1);
  auto b = OpenBackend("s3://bucket/p?endpoint=http://127.0.0.1:9&retries=1", false);
  ASSERT_FALSE(b.ok());
  if (b.status().code() == StatusCode::kNotSupported) GTEST_SKIP() << b.status().ToString();
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable) << b.status().ToString();
  const std::string m = b.status().message();
  EXPECT_NE(m.find("127.0.0.1:9"), std::string::npos) << m;
  EXPECT_NE(m.find("2 tries"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(m.find("TOPSECRET123"), std::string::npos) << m;
}

}  // namespace
}  // namespace sluice

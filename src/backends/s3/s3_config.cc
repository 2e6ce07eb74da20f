#include "backends/s3/s3_config.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "backends/uri_query.h"

namespace sluice {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string HomeFile(const char* env_name, const char* under_home) {
  std::string path = Env(env_name);
  if (!path.empty()) return path;
  std::string home = Env("HOME");
  return home.empty() ? std::string() : home + "/" + under_home;
}

// Which options take what, for the message of an unknown one.
constexpr const char* kOptions =
    "endpoint, region, profile, addressing, part_mib, qd, connections, retries, timeout_s, conditional";

Status ParseOption(const std::string& uri, const std::string& key, const std::string& val, S3Config* c,
                   bool* profile_given) {
  auto bad = [&](const std::string& expected) {
    return Status::InvalidArgument("store URI '" + uri + "': option " + key + "='" + val + "' (expected " +
                                   expected + ")");
  };
  if (key == "endpoint") {
    if (val.rfind("http://", 0) != 0 && val.rfind("https://", 0) != 0) return bad("http://HOST[:PORT] or https://...");
    if (val.find('@') != std::string::npos) {
      return Status::InvalidArgument("store URI '" + uri.substr(0, uri.find('?')) +
                                     "': an endpoint with user information refused: credentials never go in a "
                                     "store URI");
    }
    c->endpoint = val;
    while (!c->endpoint.empty() && c->endpoint.back() == '/') c->endpoint.pop_back();
  } else if (key == "region") {
    if (val.empty()) return bad("a region name such as us-east-1");
    c->region = val;
  } else if (key == "profile") {
    if (val.empty()) return bad("a profile name of ~/.aws/credentials");
    c->profile = val;
    *profile_given = true;
  } else if (key == "addressing") {
    if (val != "path" && val != "virtual") return bad("path or virtual");
    c->path_style = val == "path";
  } else if (key == "part_mib") {
    ASSIGN_OR_RETURN(unsigned mib, ParseUnsignedOption(uri, key, val, 5, 5120));
    c->part_bytes = static_cast<uint64_t>(mib) << 20;
  } else if (key == "qd") {
    ASSIGN_OR_RETURN(c->queue_depth, ParseUnsignedOption(uri, key, val, 1, 1024));
  } else if (key == "connections") {
    ASSIGN_OR_RETURN(c->connections, ParseUnsignedOption(uri, key, val, 1, 1024));
  } else if (key == "retries") {
    ASSIGN_OR_RETURN(c->retries, ParseUnsignedOption(uri, key, val, 0, 20));
  } else if (key == "timeout_s") {
    ASSIGN_OR_RETURN(c->timeout_s, ParseUnsignedOption(uri, key, val, 1, 3600));
  } else if (key == "conditional") {
    if (val != "require" && val != "unsafe") return bad("require or unsafe");
    c->conditional = val == "require" ? S3Conditional::kRequire : S3Conditional::kUnsafe;
  } else if (key == "access_key" || key == "secret_key" || key == "aws_access_key_id" ||
             key == "aws_secret_access_key" || key == "session_token" || key == "aws_session_token" ||
             key == "token" || key == "password" || key == "key" || key == "secret") {
    // The value is not repeated: it may be a secret.
    return Status::InvalidArgument("store URI '" + uri.substr(0, uri.find('?')) + "': option " + key +
                                   " refused: credentials never go in a store URI (set AWS_ACCESS_KEY_ID and "
                                   "AWS_SECRET_ACCESS_KEY, or use a profile of ~/.aws/credentials)");
  } else {
    // The URI without its query: an unknown option's value may be a secret.
    return Status::InvalidArgument("store URI '" + uri.substr(0, uri.find('?')) + "': unknown option '" + key +
                                   "' (s3 stores take " + kOptions + ")");
  }
  return Status::OK();
}

}  // namespace

std::string S3Encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char ch : s) {
    if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ||
        ch == '_' || ch == '.' || ch == '~' || (keep_slash && ch == '/')) {
      out.push_back(static_cast<char>(ch));
    } else {
      out.push_back('%');
      out.push_back(hex[ch >> 4]);
      out.push_back(hex[ch & 15]);
    }
  }
  return out;
}

std::string IniValue(const std::string& path, const std::string& section, const std::string& key) {
  if (path.empty()) return "";
  std::ifstream in(path);
  if (!in) return "";
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      inside = Trim(t.substr(1, t.size() - 2)) == section;
      continue;
    }
    if (!inside) continue;
    size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    if (Trim(t.substr(0, eq)) == key) return Trim(t.substr(eq + 1));
  }
  return "";
}

Result<S3Credentials> LoadCredentials(const std::string& profile, bool profile_from_uri) {
  S3Credentials c;
  if (!profile_from_uri) {
    c.access_key = Env("AWS_ACCESS_KEY_ID");
    c.secret_key = Env("AWS_SECRET_ACCESS_KEY");
    if (!c.access_key.empty() || !c.secret_key.empty()) {
      if (c.access_key.empty() || c.secret_key.empty()) {
        return Status::InvalidArgument(std::string("s3: ") +
                                       (c.access_key.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") +
                                       " is not set while the other one is");
      }
      c.session_token = Env("AWS_SESSION_TOKEN");
      c.source = "environment";
      return c;
    }
  }
  const std::string name = profile.empty() ? "default" : profile;
  const std::string creds_file = HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  const std::string config_file = HomeFile("AWS_CONFIG_FILE", ".aws/config");
  struct Place {
    std::string file, section;
  };
  for (const Place& p : {Place{creds_file, name},
                         Place{config_file, name == "default" ? std::string("default") : "profile " + name}}) {
    std::string id = IniValue(p.file, p.section, "aws_access_key_id");
    std::string secret = IniValue(p.file, p.section, "aws_secret_access_key");
    if (id.empty() && secret.empty()) continue;
    if (id.empty() || secret.empty()) {
      return Status::InvalidArgument("s3: profile '" + name + "' in " + p.file + " has " +
                                     (id.empty() ? "aws_secret_access_key but no aws_access_key_id"
                                                 : "aws_access_key_id but no aws_secret_access_key"));
    }
    c.access_key = id;
    c.secret_key = secret;
    c.session_token = IniValue(p.file, p.section, "aws_session_token");
    c.source = "profile '" + name + "' in " + p.file;
    return c;
  }
  return Status::NotFound(
      "s3: no credentials: " + std::string(profile_from_uri ? "" : "AWS_ACCESS_KEY_ID is not set, and ") +
      "profile '" + name + "' has no aws_access_key_id in " + (creds_file.empty() ? "~/.aws/credentials" : creds_file) +
      " or " + (config_file.empty() ? "~/.aws/config" : config_file));
}

Result<S3Config> ParseS3Uri(const std::string& uri, const std::string& location, const std::string& query) {
  S3Config c;
  if (location.find('@') != std::string::npos) {
    return Status::InvalidArgument("store URI 's3://...@...' refused: credentials never go in a store URI (set "
                                   "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or use a profile)");
  }
  size_t slash = location.find('/');
  c.bucket = location.substr(0, slash);
  if (c.bucket.empty()) return Status::InvalidArgument("store URI '" + uri + "' has no bucket (s3://BUCKET/PREFIX)");
  if (c.bucket.size() < 3 || c.bucket.size() > 63 ||
      c.bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-_") != std::string::npos) {
    return Status::InvalidArgument("store URI '" + uri + "': '" + c.bucket +
                                   "' is not a bucket name (3-63 lowercase letters, digits, '.', '-')");
  }
  if (slash != std::string::npos) c.prefix = location.substr(slash + 1);
  while (!c.prefix.empty() && c.prefix.back() == '/') c.prefix.pop_back();
  if (!c.prefix.empty() && (c.prefix.front() == '/' || c.prefix.find("//") != std::string::npos)) {
    return Status::InvalidArgument("store URI '" + uri + "': prefix '" + c.prefix + "' has an empty component");
  }
  bool region_given = false, profile_given = false, addressing_given = false;
  RETURN_IF_ERROR(ForEachQueryOption(query, [&](const std::string& key, const std::string& val) -> Status {
    region_given |= key == "region";
    addressing_given |= key == "addressing";
    return ParseOption(uri, key, val, &c, &profile_given);
  }));
  if (!profile_given) c.profile = Env("AWS_PROFILE");
  const std::string config_file = HomeFile("AWS_CONFIG_FILE", ".aws/config");
  const std::string section = c.profile.empty() || c.profile == "default" ? "default" : "profile " + c.profile;
  if (!region_given) {
    std::string r = Env("AWS_REGION");
    if (r.empty()) r = Env("AWS_DEFAULT_REGION");
    if (r.empty()) r = IniValue(config_file, section, "region");
    if (!r.empty()) c.region = r;
  }
  if (c.endpoint.empty()) {
    c.endpoint = Env("AWS_ENDPOINT_URL_S3");
    if (c.endpoint.empty()) c.endpoint = Env("AWS_ENDPOINT_URL");
    if (c.endpoint.empty()) c.endpoint = IniValue(config_file, section, "endpoint_url");
    while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
    if (c.endpoint.empty()) {
      // AWS itself: virtual-hosted addressing, the regional endpoint.
      c.endpoint = "https://s3." + c.region + ".amazonaws.com";
      if (!addressing_given) c.path_style = false;
    }
  }
  if (!c.path_style && c.bucket.find('.') != std::string::npos && c.endpoint.rfind("https://", 0) == 0) {
    return Status::InvalidArgument("store URI '" + uri + "': bucket '" + c.bucket +
                                   "' has a '.', which TLS cannot match under addressing=virtual; use addressing=path");
  }
  ASSIGN_OR_RETURN(c.credentials, LoadCredentials(c.profile, profile_given));
  return c;
}

}  // namespace sluice

// A minimal JSON writer for --json output (scripts read it; no dependency needed).
// Doubles are written with 17 significant digits (round-trip exact); NaN/Inf become null.
#pragma once

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

namespace fp4d::cli {

class Json {
 public:
  explicit Json(std::ostream& os) : os_(os) {}
  Json& begin_object() { return open('{'); }
  Json& end_object() { return close('}'); }
  Json& begin_array() { return open('['); }
  Json& end_array() { return close(']'); }
  Json& key(const std::string& k) {
    comma();
    string(k);
    os_ << ':';
    after_key_ = true;
    return *this;
  }
  Json& value(const std::string& s) {
    comma();
    string(s);
    return *this;
  }
  Json& value(const char* s) { return value(std::string(s)); }
  Json& value(double d) {
    comma();
    if (!std::isfinite(d)) {
      os_ << "null";
    } else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", d);
      os_ << buf;
    }
    return *this;
  }
  Json& value(std::int64_t i) {
    comma();
    os_ << i;
    return *this;
  }
  Json& value(int i) { return value(static_cast<std::int64_t>(i)); }
  Json& value(std::uint64_t i) {
    comma();
    os_ << i;
    return *this;
  }
  Json& value(bool b) {
    comma();
    os_ << (b ? "true" : "false");
    return *this;
  }
  template <class T>
  Json& field(const std::string& k, const T& v) {
    key(k);
    return value(v);
  }

 private:
  Json& open(char c) {
    comma();
    os_ << c;
    first_.push_back(true);
    return *this;
  }
  Json& close(char c) {
    first_.pop_back();
    os_ << c;
    if (first_.empty()) os_ << '\n';
    return *this;
  }
  void comma() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) os_ << ',';
      first_.back() = false;
    }
  }
  void string(const std::string& s) {
    os_ << '"';
    for (unsigned char c : s) {
      switch (c) {
        case '"': os_ << "\\\""; break;
        case '\\': os_ << "\\\\"; break;
        case '\n': os_ << "\\n"; break;
        case '\t': os_ << "\\t"; break;
        case '\r': os_ << "\\r"; break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            os_ << buf;
          } else {
            os_ << c;
          }
      }
    }
    os_ << '"';
  }
  std::ostream& os_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace fp4d::cli

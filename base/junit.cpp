#include "base/junit.h"

#include <cstdint>
#include <cstdio>

namespace spikehunt {

namespace {

// The length of the valid UTF-8 sequence at text[i], or 0.
size_t utf8_length(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return uint8_t(text[k]); };
  const uint8_t b = byte(i);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) >> 6) != 0x2) return 0;
  }
  if (n == 2 && b < 0xC2) return 0;                                    // overlong
  if (n == 3 && b == 0xE0 && byte(i + 1) < 0xA0) return 0;             // overlong
  if (n == 3 && b == 0xED && byte(i + 1) >= 0xA0) return 0;            // a surrogate
  if (n == 4 && (b > 0xF4 || (b == 0xF0 && byte(i + 1) < 0x90) || (b == 0xF4 && byte(i + 1) >= 0x90))) return 0;
  return n;
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", s < 0 ? 0.0 : s);
  return text;
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    const size_t n = utf8_length(text, i);
    if (n == 0 || (n == 1 && uint8_t(c) < 0x20 && c != '\t' && c != '\n')) {
      out += "\xEF\xBF\xBD";  // U+FFFD: XML 1.0 cannot carry it
      ++i;
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += "&#10;"; break;  // kept in attributes too (a raw newline there reads as a space)
      default: out.append(text, i, n);
    }
    i += n;
  }
  return out;
}

std::string junit_xml(const JunitSuite& suite) {
  int64_t failures = 0;
  for (const JunitCase& c : suite.cases) failures += !c.failure_message.empty();
  const std::string counts = " tests=\"" + std::to_string(suite.cases.size()) + "\" failures=\"" +
                             std::to_string(failures) + "\" errors=\"0\" time=\"" + seconds_text(suite.seconds) + "\"";
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += "<testsuites name=\"" + xml_escape(suite.name) + "\"" + counts + ">\n";
  x += "  <testsuite name=\"" + xml_escape(suite.name) + "\"" + counts + " skipped=\"0\">\n";
  if (!suite.properties.empty()) {
    x += "    <properties>\n";
    for (const auto& [name, value] : suite.properties) {
      x += "      <property name=\"" + xml_escape(name) + "\" value=\"" + xml_escape(value) + "\"/>\n";
    }
    x += "    </properties>\n";
  }
  for (const JunitCase& c : suite.cases) {
    x += "    <testcase name=\"" + xml_escape(c.name) + "\" classname=\"" + xml_escape(c.classname) + "\" time=\"" +
         seconds_text(c.seconds) + "\"";
    if (c.failure_message.empty() && c.system_out.empty()) {
      x += "/>\n";
      continue;
    }
    x += ">\n";
    if (!c.failure_message.empty()) {
      x += "      <failure message=\"" + xml_escape(c.failure_message) + "\" type=\"" + xml_escape(c.failure_type) +
           "\">" + xml_escape(c.failure_text) + "</failure>\n";
    }
    if (!c.system_out.empty()) x += "      <system-out>" + xml_escape(c.system_out) + "</system-out>\n";
    x += "    </testcase>\n";
  }
  x += "  </testsuite>\n</testsuites>\n";
  return x;
}

}  // namespace spikehunt

// fuzz_html — the one escaping of text written into spikehunt's HTML reports
// (base/html.h). For any bytes as a string (a tap name, a --vary value, an
// exception's text): html_escape leaves no '<', '>', '"' or '\'' and no '&'
// that does not start a character reference; script_json of an object
// holding it as a key and a value has no '<' at all (so no "</script",
// "<!--" or "<script"), no '>' or '&', and parses back to the same JSON.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "base/html.h"

namespace {

[[noreturn]] void broken(const char* what, const std::string& input) {
  std::fprintf(stderr, "%s: %s\n", what, input.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string s(reinterpret_cast<const char*>(data), size);
  const std::string e = spikehunt::html_escape(s);
  if (e.find_first_of("<>\"'") != std::string::npos) broken("html_escape left markup", s);
  for (size_t at = e.find('&'); at != std::string::npos; at = e.find('&', at + 1)) {
    const size_t semi = e.find(';', at);
    if (semi == std::string::npos || semi - at > 6) broken("html_escape left a bare &", s);
  }
  const nlohmann::json j = {{s, s}, {"list", {s, 1, nullptr}}};
  const std::string text = spikehunt::script_json(j);
  if (text.find_first_of("<>&") != std::string::npos) broken("script_json left <, > or &", s);
  // Valid UTF-8 comes back as it went in; other bytes were replaced (U+FFFD), still one JSON document.
  const nlohmann::json back = nlohmann::json::parse(text);
  const std::string plain = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (back.dump() != nlohmann::json::parse(plain).dump()) broken("script_json changed the document", s);
  return 0;
}

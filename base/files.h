// files.h — whole-file reads that fail with an InputError naming the file,
// and atomic writes (temp file in the same folder, then rename), so a reader
// never sees a half-written result.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace spikehunt {

// Reads a whole file. Throws InputError(path, ...) when it cannot be opened,
// is not a regular file (a directory, a FIFO, a device) or is larger than max_bytes.
std::string read_file(const std::string& path, uint64_t max_bytes = uint64_t{1} << 32);

// Reads and parses a JSON file. Bad JSON is an InputError naming the file,
// with the parser's position ("parse error at line 3, column 5: ...") and `hint`.
nlohmann::json read_json_file(const std::string& path, const std::string& hint,
                              uint64_t max_bytes = uint64_t{16} << 20);
// The same for JSON text read from `path` already. A number beyond a double
// ("1e999") is an InputError naming the file, the field's path and the number.
nlohmann::json parse_json_text(const std::string& text, const std::string& path, const std::string& hint);

// Writes `data` to `path` through "path.tmp-PID" and rename(2). Throws
// std::runtime_error (naming the path and errno text) on failure, leaving no
// temp file behind.
void write_file_atomic(const std::string& path, std::string_view data);

// Removes the files a killed writer left half-written directly in `dir`:
// "*.partial" (a trace being recorded) and "*.tmp-PID" (write_file_atomic's
// temporary). Only for a folder this process holds the writer's lock of
// (out_lock.h): then no other writer is using them. Returns how many.
int64_t remove_stale_temporaries(const std::string& dir);

// Removes `dir` when it is an empty folder (a scratch folder that a failed
// burst would have left its log in); anything else stays.
void remove_if_empty(const std::string& dir);

// `text` with every character but letters, digits and '_' turned into '-',
// for file names made from fault signatures ("non_finite:forward:fc1_act").
std::string file_safe(std::string_view text);

}  // namespace spikehunt

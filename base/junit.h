// junit.h — JUnit XML, the test report Jenkins, GitLab and GitHub's test
// reporters read: one <testsuite> of <testcase>s, each passing or with one
// <failure> (message, type, text), and <system-out>. The dialect is that of
// the Jenkins xUnit plugin's junit-10.xsd (required: a suite's name, tests,
// failures and errors; a case's name; times as plain decimals); text is
// escaped for XML 1.0, with bytes XML cannot carry (control characters,
// invalid UTF-8) replaced by U+FFFD.
// Example:
//   JunitSuite s{"spikehunt sweep results/sweep", 61.2, {{"seed", "0"}}, {}};
//   s.cases.push_back({"non_finite:forward:fc1_act", "spikehunt.sweep", 0, "3 of 24 runs", "non_finite", "...", ""});
//   write_file_atomic("sweep.junit.xml", junit_xml(s));
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace spikehunt {

struct JunitCase {
  std::string name;
  std::string classname;
  double seconds = 0;
  // A failing case has a failure message (one line); "" passes.
  std::string failure_message;
  std::string failure_type;
  std::string failure_text;  // the failure's body: what to look at, how to replay it
  std::string system_out;    // "" for none
};

struct JunitSuite {
  std::string name;
  double seconds = 0;
  std::vector<std::pair<std::string, std::string>> properties;
  std::vector<JunitCase> cases;
};

// The document: <testsuites> holding the one suite.
std::string junit_xml(const JunitSuite& suite);

// `text` escaped for an XML attribute or element (", ', <, >, &; control
// characters but tab and newline, and invalid UTF-8, as U+FFFD).
std::string xml_escape(const std::string& text);

}  // namespace spikehunt

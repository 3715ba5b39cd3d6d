// faulty_scenario.h — training code that can crash its process, for the
// worker tests: scenario "faulty" trains the standard scenario of its config
// and, at forward call `params.at_step`, does what `params.fault` says —
// "segfault" (a write through a null pointer), "abort", "exit"
// (std::exit(3)), "hang" (sleeps for ever), "leak" (keeps `params.leak_mb`
// MiB it touched and never frees) — or nothing ("none").
#pragma once

void register_faulty_scenario();

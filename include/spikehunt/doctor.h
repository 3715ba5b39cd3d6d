/// doctor.h — the vital signs that catch the classic training bugs (overfit
/// one batch, gradient flow, dead units, log(0), collapsed predictions, ...),
/// each a sign with its evidence, ranked.
///
/// Public names: run_doctor, DoctorOptions, DoctorReport, VitalSign,
/// ScenarioFactory, doctor_text, doctor_json, SignInfo, doctor_signs.
///
///   spikehunt::DoctorReport r = spikehunt::run_doctor([&] { return spikehunt::make_scenario(c); }, {});
///   std::cout << spikehunt::doctor_text(r);
#pragma once

#include "spikehunt/scenario.h"

#include "harness/doctor/doctor.h"

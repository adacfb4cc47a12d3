// The options of `attnkit tune` and the pieces its two modes share: the problem the options
// describe, the tuner settings they ask for, and the device tuned (command_tune.cpp registers the
// options; tune_dry_run.cpp and tune_optimize.cpp are the modes).
#pragma once
#include <cstdint>
#include <string>

#include "problem_options.hpp"
#include "tune/offline_tuning.hpp"

namespace attnkit::cli {

struct TuneOptions : ProblemOptions {  // the problem of --dry-run
  bool dry_run = false;
  std::string optimize_file;
  std::string op;
  bool backward = false;
  std::string dtype = kDefaultDType;
  std::string backend = "cpu";
  int threads = 0;
  bool all = false;
  std::string dir;
  bool force = false;
  bool thorough = false;
  int top_k = 4;
  double margin = 0.03;
  int warmup = 5;
  int steps = 20;
  bool json = false;
  bool quiet = false;
};

// The problem of --dry-run's OP and problem options (validated).
tune::ProblemSpec problem_from_options(const TuneOptions& options);

// The device tuned: its tuner options, how to time a problem on it, and how to name its processors.
struct OfflineDevice {
  tune::TunerOptions options;
  tune::RunnerFactory make_runner;
  std::string processors;  // e.g. "8 threads", "132 SMs"
};

OfflineDevice offline_device(const TuneOptions& options);

int print_dry_run(const TuneOptions& options);  // tune_dry_run.cpp
int optimize(const TuneOptions& options);       // tune_optimize.cpp

}  // namespace attnkit::cli

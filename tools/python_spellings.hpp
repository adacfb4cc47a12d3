// The Python package's spelling of an option (attnkit.retention's chunk_size -> --chunk-size),
// accepted next to the CLI's own so that a name copied from Python code works. --help lists the
// CLI's spelling with the option and names the Python ones in a note at its end.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace attnkit::cli {

template <class T>
CLI::Option* add_python_spelling(CLI::App* app, const std::string& name, T& variable) {
  return app->add_option(name, variable)->group("");  // group "" keeps it out of --help
}

}  // namespace attnkit::cli

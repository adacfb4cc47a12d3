// TEMPORARY until the CLI lands.
#include <cstdio>
#include "attnkit/attnkit.hpp"
int main() { std::printf("attnkit %s\n", attnkit::version_string()); return 0; }

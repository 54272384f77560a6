#pragma once
// Runs the Catch2 test cases linked into this executable with its command line, as Catch2's own
// main would (support/catch_runner.cpp), and returns the exit status.
namespace joule::test {
int run_catch_session(int argc, char* argv[]);
}

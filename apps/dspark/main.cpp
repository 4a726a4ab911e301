// dspark: argument parsing and wiring only (see apps/dspark/*.cpp for the subcommands).
#include <cstdio>

#include "dspark/core/error.h"

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  std::puts("dspark: skeleton");
  return 0;
}
